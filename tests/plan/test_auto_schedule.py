"""Schedule ``auto``: the fastest plan that fits each rank's activation budget — never slower than
a hand-written schedule that fits the same budget, within the budget itself, and faster where the
stages or the memory leave the hand-written orders room to lose."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import GPT_YAML, invoke
from ppsim.cli import app
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.plan import Kind, loop_placement, schedules, validate
from ppsim.plan.order_search.list_scheduler import list_schedule
from ppsim.plan.order_search.timeline import Timing
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize


def _scenario(p: int, m: int, forward: list[float], budget: float, schedule: str = "auto", p2p: float = 0.1,
              w_share: float = 0.5, comm: str = "async") -> Scenario:
    chunks = schedules.describe(schedule).chunks.default
    return parse_scenario({
        "name": "auto", "pipeline": {"stages": p, "microbatches": m, "schedule": schedule, "memory_budget": budget,
                                     "comm": comm, "chunks": chunks},
        "costs": {"forward_ms": forward, "backward_ms": [2 * f for f in forward],
                  "weight_grad_ms": [2 * w_share * f for f in forward], "p2p_ms": p2p}})


def _step_and_peak(s: Scenario) -> tuple[float, float]:
    summary = summarize(predict(s).trace)
    return summary.step_time_ms, max(r.peak_activation_microbatches for r in summary.per_rank)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(2, 5), extra=st.integers(0, 8), budget_share=st.sampled_from([1.0, 1.5, 2.0]),
       forward=st.lists(st.floats(0.5, 2.0), min_size=5, max_size=5), p2p=st.sampled_from([0.0, 0.2, 0.7]),
       w_share=st.sampled_from([0.3, 0.5]), comm=st.sampled_from(["async", "rendezvous"]))
def test_auto_is_never_slower_than_a_hand_written_schedule_that_fits(
        p: int, extra: int, budget_share: float, forward: list[float], p2p: float, w_share: float, comm: str) -> None:
    m, budget = p + extra, budget_share * p
    auto_ms, auto_peak = _step_and_peak(_scenario(p, m, forward[:p], budget, p2p=p2p, w_share=w_share, comm=comm))
    assert auto_peak <= budget + 1e-9
    for name, info in schedules.SCHEDULES.items():  # every one, of one chunk per rank or several
        if not info.training or info.microbatches.nearest(p, m, info.chunks.default) or info.pipes > 1:
            continue  # auto searches one copy of the model
        ms, peak = _step_and_peak(_scenario(p, m, forward[:p], budget, name, p2p=p2p, w_share=w_share, comm=comm))
        if peak <= budget + 1e-9:
            assert auto_ms <= ms + 1e-9, (name, ms, auto_ms)


def test_auto_takes_a_v_shaped_schedule_where_it_holds_less_and_runs_faster() -> None:
    # 1F1B's half and third of memory: the one-stage orders must idle, V-Half and V-Min need not
    for budget, name in ((4, "v-min"), (5, "v-half")):
        s = _scenario(8, 32, [1.0] * 8, budget)
        pred = predict(s)
        theirs, held = _step_and_peak(_scenario(8, 32, [1.0] * 8, budget, name))
        assert held <= budget and summarize(pred.trace).step_time_ms <= theirs + 1e-9
        assert pred.plan.chunks == 2 and pred.plan.meta["search"]["chosen"] in ("v-min", "v-half", "dualpipev")


@pytest.mark.parametrize("forward, m, budget, better_than", [
    ([1.0] * 3 + [1.5] + [1.0] * 4, 32, 8, "zb-h1"),  # a heavy middle stage, 1F1B's memory
    ([1.0] * 8, 8, 16, "zb-h2"),  # as many micro-batches as stages
])
def test_auto_beats_the_zero_bubble_orders_where_they_leave_room(forward: list[float], m: int, budget: float,
                                                                 better_than: str) -> None:
    auto_ms, _ = _step_and_peak(_scenario(8, m, forward, budget, p2p=0.2))
    theirs, _ = _step_and_peak(_scenario(8, m, forward, budget, better_than, p2p=0.2))
    assert auto_ms < theirs * 0.99


def test_between_zb_h1_and_zb_h2_memory_auto_uses_what_it_is_given() -> None:
    # slow links: ZB-H2 (2p - 1 micro-batches) does not fit 1.5p, ZB-H1 leaves the memory unused
    s = _scenario(8, 32, [1.0] * 8, 12, p2p=0.5)
    auto_ms, peak = _step_and_peak(s)
    zb_h1, _ = _step_and_peak(_scenario(8, 32, [1.0] * 8, 12, "zb-h1", p2p=0.5))
    assert 8 < peak <= 12 and auto_ms < zb_h1 * 0.95


def test_the_device_memory_is_the_default_budget() -> None:
    from conftest import gpt

    s = gpt().with_overrides(schedule="auto")
    pred = predict(s)
    summary = summarize(pred.trace)
    capacity = pred.trace.meta["device_memory_bytes"]
    assert all(r.peak_memory_bytes <= capacity for r in summary.per_rank)
    search = pred.trace.meta["search"]
    assert search["considered"] > 4 and search["step_ms"] == pytest.approx(summary.step_time_ms)
    # zb-h1's last rank needs 85 GiB (its split backwards' gradients on the LM head), zb-h2 more
    assert "1f1b" in search["simulated"] and not {"zb-h1", "zb-h2"} & set(search["simulated"])


def test_auto_says_what_it_picked_and_what_it_beat() -> None:
    res = invoke(app, "run", GPT_YAML, "--schedule", "auto", "--stages", "4", "--microbatches", "8")
    assert res.exit_code == 0, res.output
    assert "search" in res.stdout and "picked" in res.stdout and "plans" in res.stdout


def test_a_budget_below_one_micro_batch_is_refused_by_name() -> None:
    with pytest.raises(PpsimError, match="pipeline.memory_budget"):
        predict(_scenario(4, 8, [1.0] * 4, 0.5))


def test_auto_is_a_search_not_a_schedule_to_build() -> None:
    assert "auto" not in schedules.SCHEDULES and "auto" in schedules.NAMES
    with pytest.raises(PpsimError, match="a search on the stage costs"):
        schedules.build("auto", 4, 8)


@settings(max_examples=30, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 14), cap=st.integers(1, 14), defer=st.booleans(),
       rule=st.sampled_from(["backward first", "oldest first", "forward first", "longest path first"]))
def test_the_list_scheduler_never_stalls_with_one_stage_per_rank(p: int, m: int, cap: int, defer: bool,
                                                                  rule: str) -> None:
    from ppsim.plan import Plan
    from ppsim.plan.held import peak_held
    from ppsim.plan.order_search.candidates import rules

    timing = Timing.unit(p)
    made = list_schedule(m, loop_placement(p, 1), True, timing, [float(cap)] * p, rules(p, timing, True)[rule],
                         defer_weight_grads=defer)
    assert made is not None
    orders, _ = made
    plan = Plan("auto", p, m, 1, loop_placement(p, 1), tuple(tuple(o) for o in orders))
    validate(plan)
    assert max(peak_held(plan, timing.activation)) <= cap
    assert all(a.kind in (Kind.F, Kind.I, Kind.W) for o in orders for a in o)


def _passes_end(s: Scenario) -> float:
    trace = predict(s).trace
    start = min(sp.start for sp in trace.spans)
    return max(sp.end for sp in trace.spans if sp.action.kind in (Kind.F, Kind.B, Kind.I, Kind.W)) - start


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 5), extra=st.integers(0, 8), budget_share=st.sampled_from([1.0, 1.5, 2.0]),
       forward=st.lists(st.floats(0.5, 2.0), min_size=5, max_size=5), p2p=st.sampled_from([0.0, 0.2, 0.7]),
       w_share=st.sampled_from([0.3, 0.5]))
def test_no_plan_beats_the_bound(p: int, extra: int, budget_share: float, forward: list[float], p2p: float,
                                 w_share: float) -> None:
    """The bound auto reports is one: neither auto's plan nor any hand-written one that fits ends
    its passes before it."""
    from ppsim.plan.order_search.bound import lower_bound
    from ppsim.prediction import scenario_workload
    from ppsim.prediction.auto import auto_inputs

    m, budget = p + extra, budget_share * p
    s = _scenario(p, m, forward[:p], budget, p2p=p2p, w_share=w_share)
    timing, budgets = auto_inputs(s, scenario_workload(s).costs)
    bound = lower_bound(p, m, timing, budgets)
    chosen = predict(s).plan
    if chosen.chunks == 1:  # (a plan of several chunks per rank may beat it: the bound is not for those)
        assert chosen.meta["search"]["bound_ms"] == pytest.approx(bound)
        assert _passes_end(s) >= bound - 1e-9
    for name in ("1f1b", "zb-h1", "zb-h2", "gpipe"):
        other = _scenario(p, m, forward[:p], budget, name, p2p=p2p, w_share=w_share)
        if _step_and_peak(other)[1] <= budget + 1e-9:
            assert _passes_end(other) >= bound - 1e-9, name


@pytest.mark.parametrize("forward, p2p", [([1.0] * 8, 0.0), ([1.0] * 7 + [1.6], 0.1), ([1.4] + [1.0] * 6 + [1.6], 0.1),
                                          ([1.7 - 0.1 * i for i in range(8)], 0.1)])
def test_auto_reaches_the_bound_where_one_stage_is_the_bottleneck(forward: list[float], p2p: float) -> None:
    from ppsim.prediction import scenario_workload
    from ppsim.prediction.auto import auto_build

    s = _scenario(8, 32, forward, 8, p2p=p2p)
    search = auto_build(s, scenario_workload(s), several_chunks=False).plan.meta["search"]
    assert search["passes_ms"] == pytest.approx(search["bound_ms"])
