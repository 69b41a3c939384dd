"""The exact peak of activations without simulating (:mod:`ppsim.plan.held`) is the simulated one,
for every schedule (one stage per rank, chunks, the V, overlapped passes, split backwards,
forward only) and any activation size per stage, with anything a split backward keeps between
its two halves, the activations freed at its input grad or at its weight grad."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import built_plans
from ppsim.costs import CostTable, Link, StageCost
from ppsim.plan import Plan, lower
from ppsim.plan.held import peak_held
from ppsim.sim import simulate


@settings(max_examples=120, deadline=None)
@given(plan=built_plans(), data=st.data())
def test_the_exact_peak_is_the_simulated_one(plan: Plan, data: st.DataObject) -> None:
    sizes = data.draw(st.lists(st.integers(0, 1 << 20), min_size=plan.num_stages, max_size=plan.num_stages))
    pending = data.draw(st.lists(st.integers(0, 1 << 20), min_size=plan.num_stages, max_size=plan.num_stages))
    stages = tuple(StageCost(forward_ms=1.0, backward_ms=2.0, weight_grad_ms=1.0, activation_bytes=b,
                             weight_grad_pending_bytes=g) for b, g in zip(sizes, pending, strict=True))
    frees = data.draw(st.booleans())  # a weight-gradient store frees the activations at the input grad
    costs = CostTable(stages=stages, message_bytes=1 << 10, links=(Link.from_gb_s(25.0, 5.0),), input_grad_frees=frees)
    trace = simulate(lower(plan, rendezvous=False), costs, "async")
    simulated = [0.0] * plan.num_ranks
    for c in trace.counters:
        if c.name == "activation_bytes":
            simulated[c.rank] = max([v for _, v in c.points], default=0.0)
    assert peak_held(plan, sizes, pending, frees) == simulated
