"""A rank's time outside compute, split by what it waited for (ppsim/trace/waits.py): exposed comm
(the data moving, or queued for a link) against peer wait (a peer's work). A faster link shortens
the first only."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import DATA, GPT_YAML, SCENARIOS, invoke, run_schedule
from ppsim.cli import app
from ppsim.costs import CostTable, Link, StageCost
from ppsim.inputs.scenario import load
from ppsim.plan import Action, Plan, schedules
from ppsim.prediction import predict
from ppsim.sim import simulate
from ppsim.trace import Trace
from ppsim.trace.metrics import summarize
from ppsim.trace.waits import rank_times


@pytest.mark.parametrize("comm", ["async", "eager", "rendezvous"])
def test_free_communication_leaves_only_peer_wait_by_the_formula(comm: str) -> None:
    """1F1B, p = 4, m = 8, F = 1, B = 2, free links (step 33): rank r waits r F for its first input
    and (p - 1 - r) B ... in all (p - 1)(F + B) - r B for its peers, and idles r B at the end,
    when the step waits for rank 0's last backward."""
    trace = run_schedule("1f1b", 4, 8, comm=comm)
    s = summarize(trace)
    assert s.step_time_ms == 33
    for r in s.per_rank:
        assert r.exposed_comm_ms == 0
        assert r.peer_wait_ms == pytest.approx(3 * 3 - 2 * r.rank)


def _late_receiver(comm: str) -> Trace:
    """Stage 0 computes a second forward (5 ms) before it posts the receive of the grad; each
    message spends 0.5 ms on the link."""
    rows = ["0F0 0SEND_F0 0F1 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"]
    plan = Plan("custom", 2, 2, 1, (0, 1), tuple(tuple(Action.parse(t) for t in r.split()) for r in rows), lowered=True)
    stage = StageCost(forward_ms=5.0, backward_ms=1.0)
    return simulate(plan, CostTable(stages=(stage, stage), message_bytes=1000, links=(Link(latency_ms=0.5),)), comm)


def test_a_receive_waits_for_the_peer_until_its_send_starts_then_for_the_link() -> None:
    """rendezvous: rank 1 waits 5 ms for 0F0 (peer), 0.5 ms for the message (comm); rank 0's send
    finds the receive posted (0.5 ms comm), and its receive of the grad waits 1 ms for 1B0 (peer)
    and 0.5 ms for the link (comm); rank 1's send of the grad finds the receive posted (comm)."""
    waits = rank_times(_late_receiver("rendezvous"))
    assert [(w.exposed_comm_ms, w.peer_wait_ms) for w in waits] == [pytest.approx((1.0, 1.0)),
                                                                    pytest.approx((1.0, 5.0))]


def test_a_rendezvous_send_waits_for_the_receiver_to_post() -> None:
    """Rank 0 sends the grad's way back late: rank 1's rendezvous send of 1SEND_B0 (posted at 11.5)
    waits for 0RECV_B0 (posted at 15.5, after 0F1 and 0F2): peer wait; then 0.5 ms on the link."""
    rows = ["0F0 0SEND_F0 0F1 0F2 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"]
    plan = Plan("custom", 2, 3, 1, (0, 1), tuple(tuple(Action.parse(t) for t in r.split()) for r in rows), lowered=True)
    stage = StageCost(forward_ms=5.0, backward_ms=1.0)
    trace = simulate(plan, CostTable(stages=(stage, stage), message_bytes=1000, links=(Link(latency_ms=0.5),)),
                     "rendezvous")
    send = next(s for s in trace.spans if str(s.action) == "1SEND_B0")
    assert (send.start, send.end) == pytest.approx((11.5, 16.0))
    assert rank_times(trace)[1].peer_wait_ms == pytest.approx(5.0 + 15.5 - 11.5)
    assert rank_times(trace)[1].exposed_comm_ms == pytest.approx(0.5 + 0.5)


def test_an_async_send_blocks_nothing_and_an_eager_one_only_the_transfer() -> None:
    """Posted sends: the rank goes on at once, so its send costs it no time; an eager send blocks
    for the transfer (comm), never for the receiver."""
    posted, eager = rank_times(_late_receiver("async")), rank_times(_late_receiver("eager"))
    assert posted[0].exposed_comm_ms == pytest.approx(0.5)  # the grad's transfer, in 0RECV_B0
    assert eager[0].exposed_comm_ms == pytest.approx(1.0)  # and the activation's, in 0SEND_F0
    assert posted[1].peer_wait_ms == eager[1].peer_wait_ms == pytest.approx(5.0)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(n for n, i in schedules.SCHEDULES.items() if i.training)),
       p=st.integers(2, 4), extra=st.integers(0, 4), latency=st.sampled_from([0.0, 0.05, 0.4]),
       comm=st.sampled_from(["async", "eager", "rendezvous"]))
def test_waits_fit_in_the_bubble_and_vanish_on_free_links(name: str, p: int, extra: int, latency: float,
                                                          comm: str) -> None:
    """Every schedule, any size: busy + exposed comm + peer wait never exceed the step, none is
    negative, and free links leave no exposed comm at all."""
    info = schedules.SCHEDULES[name]
    v, p = info.chunks.default, info.ranks or p + p % info.pipes  # each pipe over every rank
    m = info.microbatches.nearest(p, p * v + extra, v) or p * v + extra  # the nearest count the schedule takes
    assume(p <= 4)
    trace = run_schedule(name, p, m, v, weight_grad=0.5 if info.splits_backward else 0.0, p2p=latency, comm=comm)
    s = summarize(trace)
    for r in s.per_rank:
        assert r.exposed_comm_ms >= 0 and r.peer_wait_ms >= 0
        assert r.busy_ms + r.exposed_comm_ms + r.peer_wait_ms <= s.step_time_ms + 1e-9
        if latency == 0:
            assert r.exposed_comm_ms == 0


def test_a_faster_link_shortens_exposed_comm_and_leaves_the_wait_on_the_slow_stage() -> None:
    """GPT-3 13B (scenarios/gpt.yaml): ranks 0-6 wait for rank 7's LM head. With the stage link
    1000x faster their exposed comm shrinks to the gradient all-reduce; the peer wait stays."""
    s = load(GPT_YAML)
    fast = s.model_copy(update={"hardware": s.hardware.model_copy(update={
        "link": s.hardware.link.model_copy(update={"bandwidth_gb_s": 25_000, "latency_us": 0.005})})})  # type: ignore[union-attr]
    before, after = (summarize(predict(x).trace) for x in (s, fast))
    for b, a in zip(before.per_rank[:7], after.per_rank[:7], strict=True):
        assert a.exposed_comm_ms < b.exposed_comm_ms / 4
        assert a.peer_wait_ms > 20 * a.exposed_comm_ms
        assert a.peer_wait_ms > b.peer_wait_ms
    assert after.per_rank[0].peer_wait_ms > 3_000


@pytest.mark.parametrize("name", ["tiny-1f1b.measured.trace.json", "tiny-gpipe.measured.trace.json"])
def test_measured_traces_are_split_the_same_way(name: str) -> None:
    """The split reads only the trace: a run ppexec recorded works as a prediction does."""
    trace = Trace.load(DATA / name)
    s = summarize(trace)
    assert any(r.peer_wait_ms > 0 for r in s.per_rank)
    for r in s.per_rank:
        assert 0 <= r.exposed_comm_ms and 0 <= r.peer_wait_ms
        assert r.busy_ms + r.exposed_comm_ms + r.peer_wait_ms <= s.step_time_ms + 1e-9


def test_the_table_shows_both_and_the_json_names_them(tmp_path: Path) -> None:
    res = invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"))
    header = next(line for line in res.output.splitlines() if "busy ms" in line)
    assert "exposed comm ms" in header and "peer wait ms" in header and "comm wait" not in res.output
    import json

    doc = json.loads(invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"), "--json").stdout)
    assert {"exposed_comm_ms", "peer_wait_ms"} <= set(doc["ranks"][0]) and "comm_wait_ms" not in doc["ranks"][0]


def test_without_waits_the_summary_is_the_same_but_for_them() -> None:
    """summarize(waits=False), which the TUI uses, gives every other figure the same."""
    trace = predict(load(SCENARIOS / "megatron-gpt3-175b.yaml")).trace
    full, lean = summarize(trace), summarize(trace, waits=False)
    assert all(r.exposed_comm_ms is None and r.peer_wait_ms is None for r in lean.per_rank)
    strip = {"exposed_comm_ms": None, "peer_wait_ms": None}
    from dataclasses import replace

    assert [replace(r, **strip) for r in full.per_rank] == list(lean.per_rank)
    assert (full.step_time_ms, full.bubble_fraction, full.mfu) == (lean.step_time_ms, lean.bubble_fraction, lean.mfu)
