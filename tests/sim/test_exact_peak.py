"""The exact peak of activations without simulating (:mod:`ppsim.plan.held`) is the simulated one,
for every schedule (one stage per rank, chunks, the V, overlapped passes, split backwards,
forward only) and any activation size per stage, with anything a split backward keeps between
its two halves, the activations freed at its input grad or at its weight grad, overlapped passes
one after the other or layer by layer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import built_plans
from ppsim.costs import CostTable, Link, StageCost
from ppsim.plan import Action, Kind, Overlap, Plan, lower
from ppsim.plan.held import peak_held
from ppsim.plan.schedules.base import make_plan
from ppsim.sim import simulate


@settings(max_examples=120, deadline=None)
@given(plan=built_plans(), data=st.data())
def test_the_exact_peak_is_the_simulated_one(plan: Plan, data: st.DataObject) -> None:
    sizes = data.draw(st.lists(st.integers(0, 1 << 20), min_size=plan.num_stages, max_size=plan.num_stages))
    pending = data.draw(st.lists(st.integers(0, 1 << 20), min_size=plan.num_stages, max_size=plan.num_stages))
    stages = tuple(StageCost(forward_ms=1.0, backward_ms=2.0, weight_grad_ms=1.0, activation_bytes=b,
                             weight_grad_pending_bytes=g) for b, g in zip(sizes, pending, strict=True))
    frees = data.draw(st.booleans())  # a weight-gradient store frees the activations at the input grad
    layerwise = data.draw(st.booleans())  # overlapped passes interleave layer by layer
    costs = CostTable(stages=stages, message_bytes=1 << 10, links=(Link.from_gb_s(25.0, 5.0),), input_grad_frees=frees,
                      overlap_layerwise=layerwise)
    trace = simulate(lower(plan, rendezvous=False), costs, "async")
    simulated = [0.0] * plan.num_ranks
    for c in trace.counters:
        if c.name == "activation_bytes":
            simulated[c.rank] = max([v for _, v in c.points], default=0.0)
    assert peak_held(plan, sizes, pending, frees, layerwise) == simulated


def test_an_input_grad_overlapped_with_a_forward_takes_what_it_leaves_for_its_weight_grad() -> None:
    """(F1 ; I0) overlapped, by hand: one rank, activations 10 a micro-batch, 100 kept from I to W.
    One pass after the other or layer by layer, the pair adds F1's 10 and I0's 100 to F0's 10
    (120), I1 its 100 (220), and the weight grads free everything; the simulator's counter agrees."""
    plan = make_plan("hand", 1, 2, 1, [[Action(0, Kind.F, 0), Overlap.of(Action(0, Kind.F, 1), Action(0, Kind.I, 0)),
                                         Action(0, Kind.I, 1), Action(0, Kind.W, 0), Action(0, Kind.W, 1)]])
    for layerwise in (False, True):
        stages = (StageCost(forward_ms=1.0, backward_ms=2.0, weight_grad_ms=1.0, activation_bytes=10,
                            weight_grad_pending_bytes=100),)
        costs = CostTable(stages=stages, message_bytes=1, links=(Link.from_gb_s(25.0, 5.0),), overlap_layerwise=layerwise)
        trace = simulate(lower(plan, rendezvous=False), costs, "async")
        points = next(c.points for c in trace.counters if c.name == "activation_bytes")
        assert max(v for _, v in points) == peak_held(plan, [10], [100], False, layerwise)[0] == 220
        assert points[-1][1] == 0  # everything freed by the end
