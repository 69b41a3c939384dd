"""The step-time lower bound (ppsim.sim.bound) never exceeds the simulated step, and is exact
where it should be."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from ppsim.costs import CostTable, Link, StageCost
from ppsim.errors import ScheduleError
from ppsim.plan import lower, schedules
from ppsim.sim import simulate
from ppsim.sim.bound import step_time_bound_ms
from ppsim.trace.metrics import step_time_ms

TRAINING = list(schedules.SCHEDULES)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(TRAINING), p=st.integers(1, 5), extra=st.integers(0, 6),
       comm=st.sampled_from(["async", "eager", "rendezvous"]), dp=st.sampled_from([1, 2]), clip=st.booleans(),
       overlap=st.booleans(), f=st.lists(st.floats(0.0, 5.0), min_size=10, max_size=10),
       b=st.lists(st.floats(0.0, 9.0), min_size=10, max_size=10), w=st.floats(0.0, 0.9),
       latency=st.floats(0.0, 2.0))
def test_the_bound_never_exceeds_the_simulated_step(name, p, extra, comm, dp, clip, overlap, f, b, w, latency) -> None:
    info = schedules.get(name)
    v = info.chunks.default
    if info.chunks.minimum > 1 and p < 2 and name in ("dualpipev",):
        p = 2
    m = p + extra
    m = info.microbatches.nearest(p, m, v) or m
    try:
        plan = schedules.build(name, p, m, v)
    except ScheduleError:  # a size this schedule refuses: not an example
        reject()
    n = plan.num_stages
    stages = tuple(StageCost(forward_ms=f[s % 10], backward_ms=b[s % 10], weight_grad_ms=w * b[s % 10],
                             optimizer_ms=0.3, allreduce_ms=1.0 + s, clip_ms=0.1) for s in range(n))
    costs = CostTable(stages=stages, message_bytes=1 << 20, links=(Link.from_gb_s(5.0, 1000 * latency),),
                      clip_allreduce_ms=0.2 if clip else 0.0, overlap_grad_reduce=overlap)
    lowered = lower(plan, dp, rendezvous=comm == "rendezvous", clip=clip)
    step = step_time_ms(simulate(lowered, costs, comm))
    assert step_time_bound_ms(plan, costs, data_parallel=dp, clip=clip) <= step + 1e-9 * max(1.0, step)


@pytest.mark.parametrize("p,m", [(1, 4), (4, 4), (4, 16), (8, 32)])
def test_on_1f1b_with_free_links_the_bound_is_the_step(p: int, m: int) -> None:
    """(m + p - 1)(F + B) plus the optimizer step: the last rank starts after p - 1 forwards, works
    m (F + B), and its last backward still has p - 1 backwards below it."""
    stage = StageCost(forward_ms=1.0, backward_ms=2.0, optimizer_ms=0.5)
    costs = CostTable(stages=(stage,) * p, message_bytes=0, links=(Link(latency_ms=0.0),))
    plan = schedules.build("1f1b", p, m)
    step = step_time_ms(simulate(lower(plan), costs, "async"))
    assert step_time_bound_ms(plan, costs) == pytest.approx((m + p - 1) * 3.0 + 0.5) == pytest.approx(step)


def test_the_messages_on_the_fill_and_drain_count() -> None:
    """1F1B with a 0.5 ms link: the last rank starts after 3 forwards and 3 messages, and its last
    backward still has 3 messages and 3 backwards below it: 6 x 0.5 ms more than with free links
    (the simulation finds more: 1F1B's steady state waits for round trips too)."""
    stage = StageCost(forward_ms=1.0, backward_ms=2.0)
    free = CostTable(stages=(stage,) * 4, message_bytes=0, links=(Link(latency_ms=0.0),))
    slow = replace(free, links=(Link(latency_ms=0.5),))
    plan = schedules.build("1f1b", 4, 8)
    assert step_time_bound_ms(plan, slow) == pytest.approx(step_time_bound_ms(plan, free) + 6 * 0.5)
    assert step_time_bound_ms(plan, slow) <= step_time_ms(simulate(lower(plan), slow, "async")) + 1e-9
