"""The critical path (ppsim.trace.critical) and the bubble with communication free
(ppsim.trace.ideal): hand-computed paths of 1F1B and GPipe with one slow stage, what a receive
waited for, a measured trace read by the same code, and the CLI's line."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.costs.table import CostTable, Link, StageCost
from ppsim.plan import Action, Kind, lower, schedules
from ppsim.sim import compute_ms, simulate
from ppsim.trace import Trace
from ppsim.trace.critical import bottleneck, critical_path
from ppsim.trace.ideal import ideal_bubble_fraction
from ppsim.trace.load import load_trace


def _run(name: str, forward: list[float], latency: float = 0.0, m: int = 2) -> Trace:
    """``name`` on len(forward) ranks, stage s's forward forward[s] and its backward twice that."""
    costs = CostTable(stages=tuple(StageCost(forward_ms=f, backward_ms=2 * f) for f in forward),
                      message_bytes=0, links=(Link(latency_ms=latency),))
    plan = lower(schedules.build(name, len(forward), m), 1, compute_ms(costs), rendezvous=False)
    return simulate(plan, costs, "async")


def _compute_path(trace: Trace) -> list[str]:
    return [str(s.span.action) for s in critical_path(trace).stretches if s.kind == "compute"]


def test_1f1b_with_a_slow_last_stage_runs_through_all_of_its_work() -> None:
    """p = 2, m = 2, F = 1 and 3 (B twice): rank 0 F0 [0, 1], F1 [1, 2]; rank 1 F0 [1, 4],
    B0 [4, 10], F1 [10, 13], B1 [13, 19]; rank 0 B0 [10, 12], B1 [19, 21]. The path: rank 0's
    F0, all of rank 1's work, rank 0's B1; rank 1's compute is 18 of the 21 ms."""
    trace = _run("1f1b", [1.0, 3.0])
    assert _compute_path(trace) == ["0F0", "1F0", "1B0", "1F1", "1B1", "0B1"]
    b = bottleneck(critical_path(trace))
    assert b is not None and b.rank == 1 and b.compute_ms == pytest.approx(18.0) and b.step_ms == pytest.approx(21.0)
    assert b.others_ms == pytest.approx(3.0) and b.link_ms == pytest.approx(0.0) and b.idle_ms == pytest.approx(0.0)
    # rank 0's B1 waited for rank 1's grad from 12 to 19 ms: its receive is bound to rank 1's send
    path = critical_path(trace)
    recv = next(s for s in trace.spans if s.action == Action(0, Kind.RECV_B, 1))
    binding = path.binding(recv)
    assert binding.cause == "peer" and binding.after is not None and binding.after.rank == 1
    assert binding.waited_ms == pytest.approx(7.0)


def test_slack_is_how_much_later_a_span_could_end_without_a_longer_step() -> None:
    """The same 1F1B: rank 0's F1 [1, 2] could end at 10 (its next action waits for rank 1's B0 until
    then, and rank 1 takes F1's data only at 10): 8 ms; its B0 [10, 12] could end at 19, when B1's
    grad arrives: 7 ms; rank 1's optimizer step, at 19 of 21: 2 ms; the path: none."""
    trace = _run("1f1b", [1.0, 3.0])
    path = critical_path(trace)

    def compute(rank: int, kind: Kind, mb: int | None):
        return next(s for s in trace.spans if s.rank == rank and s.action.kind is kind and s.action.microbatch == mb)

    assert path.slack(compute(0, Kind.F, 1)) == pytest.approx(8.0)
    assert path.slack(compute(0, Kind.B, 0)) == pytest.approx(7.0)
    assert path.slack(compute(1, Kind.OPT, None)) == pytest.approx(2.0)
    assert path.slack(compute(1, Kind.B, 1)) == pytest.approx(0.0)  # its grad is what rank 0's B1 waits for
    assert all(path.slack(s) == pytest.approx(0.0, abs=1e-9) for s in path.spans)


@pytest.mark.parametrize("name,p,m", [("1f1b", 4, 8), ("gpipe", 3, 5), ("zb-h1", 4, 8), ("interleaved-1f1b", 2, 4)])
@pytest.mark.parametrize("comm", ["async", "rendezvous"])
def test_slack_is_never_negative_and_none_on_the_path(name: str, p: int, m: int, comm: str) -> None:
    """Uneven stages and slow links: every span's slack is >= 0; on a path with no idle stretch
    every span has none; some span off the path has some (the other ranks idle in the bubble)."""
    from conftest import run_schedule

    v = 2 if name == "interleaved-1f1b" else 1
    trace = run_schedule(name, p, m, v, forward=1.0, backward=2.5, weight_grad=0.5 if name == "zb-h1" else 0.0,
                         p2p=0.3, comm=comm)
    path = critical_path(trace)
    slack = {id(s): path.slack(s) for s in trace.spans}
    assert min(slack.values()) >= 0.0
    assert max(slack.values()) > 0.0
    if not any(x.kind == "idle" for x in path.stretches):
        assert all(slack[id(s)] == pytest.approx(0.0, abs=1e-9) for s in path.spans)
    last = max(trace.spans, key=lambda s: s.end)
    assert slack[id(last)] == pytest.approx(0.0, abs=1e-9)


def test_gpipe_with_a_slow_middle_stage_waits_on_it_both_ways() -> None:
    """p = 3, m = 2, F = 1, 2, 1 (B twice): forwards go at stage 1's pace (1F0 [1, 3], 1F1 [3, 5]),
    rank 2 runs 2F1 [5, 6] and then (GPipe's backward order) 2B0 [6, 8]; rank 1's backwards follow
    (1B0 [8, 12], 1B1 [12, 16]) and rank 0's last, 0B1 [16, 18], ends the step: 12 of its 18 ms are
    rank 1's compute."""
    trace = _run("gpipe", [1.0, 2.0, 1.0])
    assert _compute_path(trace) == ["0F0", "1F0", "1F1", "2F1", "2B0", "1B0", "1B1", "0B1"]
    b = bottleneck(critical_path(trace))
    assert b is not None and b.rank == 1 and b.compute_ms == pytest.approx(12.0) and b.step_ms == pytest.approx(18.0)


def test_the_path_covers_the_step_and_links_show_on_slow_links() -> None:
    trace = _run("1f1b", [1.0, 1.0, 1.0, 1.0], latency=0.5, m=4)
    path = critical_path(trace)
    step = max(s.end for s in trace.spans) - min(s.start for s in trace.spans)
    assert sum(s.ms for s in path.stretches) == pytest.approx(step)
    assert all(a.end <= b.start + 1e-9 for a, b in zip(path.stretches, path.stretches[1:], strict=False))
    links = [s for s in path.stretches if s.kind == "link"]
    assert links and all(s.ms == pytest.approx(0.5) for s in links)  # each message on the path: its latency
    b = bottleneck(path)
    assert b is not None and b.link_ms == pytest.approx(0.5 * len(links))
    assert b.compute_ms + b.others_ms + b.link_ms == pytest.approx(step)


def test_a_measured_trace_is_read_by_the_same_code() -> None:
    trace = load_trace(DATA / "tiny-1f1b.measured.trace.json")
    path = critical_path(trace)
    step = max(s.end for s in trace.spans) - min(s.start for s in trace.spans)
    assert sum(s.ms for s in path.stretches) == pytest.approx(step, rel=1e-9)
    assert len(path.bindings()) == len(trace.spans)
    step = max(s.end for s in trace.spans) - min(s.start for s in trace.spans)
    assert all(0.0 <= path.slack(s) <= step for s in trace.spans)
    assert bottleneck(path) is not None and ideal_bubble_fraction(trace) is not None


def test_the_ideal_bubble_is_the_schedules_own_with_free_links() -> None:
    """1F1B on p equal stages idles (p - 1) / (m + p - 1) with free links, whatever the latency."""
    for latency in (0.0, 0.5):
        trace = _run("1f1b", [1.0] * 4, latency=latency, m=8)
        assert ideal_bubble_fraction(trace) == pytest.approx(3 / 11)


def test_the_cli_names_the_bottleneck_and_the_ideal_bubble() -> None:
    res = invoke(app, "run", SCENARIOS / "gpt.yaml")
    assert res.exit_code == 0, res.output
    assert "critical path  rank 7's own compute: 95 % of the step" in res.output
    assert "ideal bubble   15.15 %  (the same order, communication free)" in res.output
    doc = json.loads(invoke(app, "run", SCENARIOS / "gpt.yaml", "--json").stdout)
    assert doc["critical_path"]["bottleneck_rank"] == 7 and 0 < doc["ideal_bubble_fraction"] < doc["bubble_fraction"]


def test_a_plan_that_does_not_fit_breaks_its_peak_down_and_names_the_changes_that_fit() -> None:
    res = invoke(app, "run", SCENARIOS / "gpt.yaml", "--stages", "2")
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("at the peak"))
    assert "rank 0: weights 12.23 + gradients 12.23 + optimizer 73.37 + buffers 0.04 + activations 44.55 GiB" in line
    doc = json.loads(invoke(app, "run", SCENARIOS / "gpt.yaml", "--stages", "2", "--json").stdout)
    rank0 = doc["ranks"][0]
    static = rank0["static_memory_bytes"]
    assert static["weights"] + static["gradients"] + static["optimizer"] + static["buffers"] == static["total"]
    assert doc["fits"] is False and doc["to_fit"], doc.get("to_fit")
    steps = [f["step_time_ms"] for f in doc["to_fit"]]
    assert steps == sorted(steps)
    for fix in doc["to_fit"]:  # each suggestion, run as written, fits and predicts what it said
        again = json.loads(invoke(app, "run", SCENARIOS / "gpt.yaml", "--stages", "2", *fix["options"].split(),
                                  "--json").stdout)
        assert again["fits"] is True and again["step_time_ms"] == pytest.approx(fix["step_time_ms"])
        assert again["samples_per_step"] == doc["samples_per_step"]  # the same global batch
    assert "to fit         --zero-stage 1: " in res.output


def test_fewer_microbatches_than_stages_is_a_note_with_the_bound_it_sets() -> None:
    res = invoke(app, "run", SCENARIOS / "gpt.yaml", "--microbatches", "4")
    assert res.exit_code == 0
    assert ("note: pipeline.microbatches: 4 micro-batches on 8 stages: the ranks idle at least 50% of the step on "
            "average") in res.output
    doc = json.loads(invoke(app, "run", SCENARIOS / "gpt.yaml", "--microbatches", "4", "--json").stdout)
    assert doc["bubble_fraction"] >= 0.5  # the bound holds
    assert "note: pipeline.microbatches" not in invoke(app, "run", SCENARIOS / "gpt.yaml").output


@pytest.mark.parametrize("name", ["mixtral-8x7b.yaml", "nemotron3-nano.yaml", "llama3-405b.yaml"])
def test_no_span_on_the_path_has_slack_and_a_send_has_no_more_than_its_receive(name: str) -> None:
    """The data-parallel reductions wait for the backward that made their gradients, and a gap on a
    rank stays as long: the path's spans have none; an async send's message cannot arrive later
    than its receive may end, so the send has no more slack than the receive plus its own wait."""
    from ppsim.inputs.scenario import load
    from ppsim.plan.action import RECV_KINDS
    from ppsim.prediction import predict

    trace = predict(load(SCENARIOS / name)).trace
    path = critical_path(trace)
    assert all(path.slack(s) == pytest.approx(0.0, abs=1e-6) for s in path.spans)
    sends = {(s.rank, s.action): s for s in trace.spans if s.lane == "send"}
    where = trace.meta["stage_to_rank"]
    from ppsim.plan import matching

    for r in (s for s in trace.spans if s.action.kind in RECV_KINDS):
        other = matching(r.action)
        send = sends.get((where[other.stage], other))
        if send is not None:
            assert path.slack(send) <= path.slack(r) + (r.end - send.end) + 1e-6


def test_a_measured_path_adds_up_to_its_step() -> None:
    """A torch profiler trace whose clocks put a peer's send after the receive ended: that peer did
    not hold the receive, and the path covers the step once."""
    trace = load_trace(DATA / "kineto" / "no-schedule")
    path = critical_path(trace)
    step = max(s.end for s in trace.spans) - min(s.start for s in trace.spans)
    assert sum(s.ms for s in path.stretches) == pytest.approx(step, rel=1e-9)
    for s in trace.spans:
        b = path.binding(s)
        if b.cause == "peer":
            assert b.after is not None and b.after.start < s.end + 1e-9
