"""The SimPy engine: communication semantics, links, end of step, memory, determinism."""

from __future__ import annotations

import pytest

from conftest import SCENARIOS, gpt, run_schedule, uniform_costs
from ppsim.costs import CostTable, Link, StageCost
from ppsim.errors import PlanError
from ppsim.inputs.scenario import load
from ppsim.plan import Action, Plan, lower, schedules
from ppsim.prediction import predict
from ppsim.sim import compute_ms, simulate
from ppsim.trace.metrics import summarize


def _custom(rows: list[str], m: int) -> Plan:
    actions = tuple(tuple(Action.parse(t) for t in row.split()) for row in rows)
    p = len(rows)
    return Plan("custom", p, m, 1, tuple(range(p)), actions, lowered=True)


def _span(trace, rank: int, text: str):
    return next(s for s in trace.spans if s.rank == rank and str(s.action) == text)


def _costs(p2p: float) -> CostTable:
    stage = StageCost(forward_ms=5.0, backward_ms=1.0)
    return CostTable(stages=(stage, stage), message_bytes=1000, links=(Link(latency_ms=p2p),))


def _late_receiver_plan() -> Plan:
    """Stage 0 computes an extra forward (5 ms) before it posts the receive of the grad."""
    rows = ["0F0 0SEND_F0 0F1 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"]
    return _custom(rows, m=2)


def test_rendezvous_send_waits_for_the_receive() -> None:
    plan = _late_receiver_plan()
    trace = simulate(plan, _costs(0.5), "rendezvous")
    send = _span(trace, 1, "1SEND_B0")
    recv = _span(trace, 0, "0RECV_B0")
    assert send.start == pytest.approx(5.5 + 5.0 + 1.0)  # F0, transfer, F0 and B0 on stage 1
    assert recv.start == pytest.approx(10.5)  # F0, the send's rendezvous at 5 + 0.5, F1
    assert send.end == pytest.approx(recv.end)
    assert send.end == pytest.approx(max(send.start, recv.start) + 0.5)


def test_async_send_does_not_block_the_sender() -> None:
    plan = _late_receiver_plan()
    trace = simulate(plan, _costs(0.5), "async")
    f1 = _span(trace, 0, "0F1")
    send = _span(trace, 0, "0SEND_F0")
    assert f1.start == pytest.approx(send.start)  # the rank went on at once
    assert send.end == pytest.approx(send.start + 0.5)


def test_eager_send_blocks_for_the_transfer_only() -> None:
    plan = _late_receiver_plan()
    trace = simulate(plan, _costs(0.5), "eager")
    f1 = _span(trace, 0, "0F1")
    send = _span(trace, 0, "0SEND_F0")
    assert f1.start == pytest.approx(send.end) == pytest.approx(send.start + 0.5)


def test_gloo_like_rendezvous_charges_the_wait_to_the_send_span() -> None:
    # the receiver is 4 ms late: the send span covers the wait, as measured on gloo
    rows = ["0F0 0SEND_F0 0B0", "1F1 1RECV_F0 1F0 1B0"]
    actions = tuple(tuple(Action.parse(t) for t in row.split()) for row in rows)
    plan = Plan("custom", 2, 2, 1, (0, 1), actions, lowered=True)
    stage = StageCost(forward_ms=1.0, backward_ms=1.0)
    costs = CostTable(stages=(stage, StageCost(forward_ms=5.0, backward_ms=1.0)), message_bytes=0,
                      links=(Link(latency_ms=0.0),))
    trace = simulate(plan, costs, "rendezvous")
    send = _span(trace, 0, "0SEND_F0")
    assert send.start == pytest.approx(1.0) and send.end == pytest.approx(5.0)


def test_gpipe_with_p2p_latency_matches_the_closed_form() -> None:
    p, m, F, B, c = 4, 6, 1.0, 2.0, 0.25
    trace = run_schedule("gpipe", p, m, forward=F, backward=B, p2p=c, comm="async")
    assert summarize(trace).step_time_ms == pytest.approx((m + p - 1) * (F + B) + 2 * (p - 1) * c)


def test_transfers_share_a_link_in_fifo_order() -> None:
    # two sends back to back on one link: the second waits for the first's bytes to go through
    plan = _custom(["0F0 0SEND_F0 0F1 0SEND_F1 0B0 0B1", "1RECV_F0 1RECV_F1 1F0 1F1 1B0 1B1"], m=2)
    stage = StageCost(forward_ms=0.0, backward_ms=0.0)
    costs = CostTable(stages=(stage, stage), message_bytes=1000, links=(Link(latency_ms=0.1, bandwidth_bytes_per_ms=1000),))
    trace = simulate(plan, costs, "async")
    first, second = _span(trace, 1, "1RECV_F0"), _span(trace, 1, "1RECV_F1")
    assert first.end == pytest.approx(1.1)
    assert second.end == pytest.approx(2.1)


def test_simulator_reports_a_deadlock_with_the_grid() -> None:
    plan = _custom(
        ["0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1", "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"],
        m=2,
    )
    with pytest.raises(PlanError, match="deadlocks with rendezvous") as exc:
        simulate(plan, uniform_costs(2, 1.0, 2.0), "rendezvous")
    assert ">>0SEND_F1<<" in (exc.value.detail or "")
    # with buffered sends the same plan runs
    simulate(plan, uniform_costs(2, 1.0, 2.0), "async")


def test_data_parallel_allreduce_and_optimizer_close_the_step() -> None:
    stage = StageCost(forward_ms=1.0, backward_ms=2.0, optimizer_ms=0.5, allreduce_ms=3.0, grad_bytes=10)
    costs = CostTable(stages=(stage,) * 2, message_bytes=0, links=(Link(0.0),))
    plan = lower(schedules.build("1f1b", 2, 4), data_parallel=2, duration=compute_ms(costs))
    trace = simulate(plan, costs, "async")
    assert summarize(trace).step_time_ms == pytest.approx((4 + 1) * 3 + 3.0 + 0.5)
    reduce = [s for s in trace.spans if s.lane == "collective"]
    assert len(reduce) == 2 and all(s.bytes == 10 for s in reduce)


def test_activation_memory_counter_tracks_in_flight_microbatches() -> None:
    trace = simulate(
        lower(schedules.build("1f1b", 4, 8)), uniform_costs(4, 1.0, 2.0, activation_bytes=100), "async"
    )
    peaks = {c.rank: max(v for _, v in c.points) for c in trace.counters if c.name == "activation_bytes"}
    assert peaks == {0: 400, 1: 300, 2: 200, 3: 100}
    assert all(c.points[-1][1] == 0 for c in trace.counters)


def test_same_scenario_same_trace() -> None:
    a = predict(load(SCENARIOS / "gpt-interleaved.yaml")).trace.to_dict()
    b = predict(load(SCENARIOS / "gpt-interleaved.yaml")).trace.to_dict()
    assert a == b


def test_trace_json_round_trip(tmp_path) -> None:
    from ppsim.trace import Trace

    trace = predict(gpt().with_overrides(microbatches=16)).trace
    trace.save(tmp_path / "t.json")
    again = Trace.load(tmp_path / "t.json")
    assert again.spans == trace.spans and again.meta == trace.meta and again.counters == trace.counters
    assert summarize(again) == summarize(trace)


def test_link_overheads_surround_the_transfer() -> None:
    """The sender spends its overhead before the data moves, the receiver its overhead after."""
    stage = StageCost(forward_ms=1.0, backward_ms=2.0)
    link = Link(latency_ms=0.2, send_overhead_ms=0.1, recv_overhead_ms=0.3)
    costs = CostTable(stages=(stage, stage), message_bytes=0, links=(link,))
    plan = _custom(["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"], m=1)
    for comm in ("rendezvous", "eager", "async"):
        trace = simulate(plan, costs, comm)
        send, recv = _span(trace, 0, "0SEND_F0"), _span(trace, 1, "1RECV_F0")
        assert recv.end == pytest.approx(1.0 + 0.1 + 0.2 + 0.3), comm
        assert _span(trace, 1, "1F0").start == pytest.approx(recv.end)
        if comm != "async":
            assert send.end == pytest.approx(1.0 + 0.1 + 0.2), comm  # the sender does not wait for the copy-out
        assert costs.p2p_ms() == pytest.approx(0.6)


def test_gradient_clipping_waits_for_the_slowest_stage() -> None:
    """CLIP: each rank's own part, then every rank leaves the norm all-reduce together."""
    fast, slow = StageCost(forward_ms=1.0, backward_ms=1.0, clip_ms=0.5, optimizer_ms=2.0), \
        StageCost(forward_ms=1.0, backward_ms=5.0, clip_ms=0.25, optimizer_ms=3.0)
    costs = CostTable(stages=(slow, fast), message_bytes=0, links=(Link(latency_ms=0.0),), clip_allreduce_ms=0.125)
    plan = lower(schedules.build("1f1b", 2, 2), 1, compute_ms(costs), clip=True)
    trace = simulate(plan, costs, "rendezvous")
    clips = [_span(trace, r, f"{r}CLIP") for r in (0, 1)]
    last_arrival = max(c.start + costs.stages[c.action.stage].clip_ms for c in clips)
    assert all(c.end == pytest.approx(last_arrival + 0.125) for c in clips)
    assert all(c.lane == "collective" for c in clips)
    for r, c in enumerate(clips):
        opt = _span(trace, r, f"{r}OPT")
        assert opt.start == pytest.approx(c.end) and opt.duration == pytest.approx(costs.stages[r].optimizer_ms)
    # the wait is idle time, not busy time: stage 1 is busy F + B + OPT only
    busy = summarize(trace).per_rank[1].busy_ms
    assert busy == pytest.approx(2 * 1.0 + 2 * 1.0 + 2.0)


def test_without_clipping_there_is_no_clip_action() -> None:
    plan = lower(schedules.build("1f1b", 2, 2), 1)
    assert not any(a.kind.value == "CLIP" for r in plan.actions for a in r)
    clipped = lower(schedules.build("1f1b", 2, 2), 1, clip=True)
    assert [str(r[-2]) for r in clipped.actions] == ["0CLIP", "1CLIP"]


def _dp_costs(overlap: bool, buckets: int) -> CostTable:
    stage = StageCost(forward_ms=1.0, backward_ms=4.0, allreduce_ms=8.0, allreduce_buckets=buckets)
    return CostTable(stages=(stage, stage), message_bytes=0, links=(Link(latency_ms=0.0),), overlap_grad_reduce=overlap)


def test_overlapped_gradient_reduction_hides_behind_the_last_backward() -> None:
    plan = lower(schedules.build("1f1b", 2, 4), 2)
    plain = simulate(plan, _dp_costs(False, 4), "rendezvous")
    one_bucket = simulate(plan, _dp_costs(True, 1), "rendezvous")
    four = simulate(plan, _dp_costs(True, 4), "rendezvous")
    for r in (0, 1):
        last_b = _span(plain, r, f"{r}B3")
        red = _span(plain, r, f"{r}REDUCE_GRAD")
        assert red.start == pytest.approx(last_b.end) and red.duration == pytest.approx(8.0)
        # one bucket is ready only when the whole backward is done: nothing to overlap
        assert _span(one_bucket, r, f"{r}REDUCE_GRAD").end == pytest.approx(red.end)
        # four buckets of 2 ms: the first goes out a quarter into the last backward (1 ms in);
        # they queue on the lane, so the reduction ends 1 + 4 x 2 ms after the backward starts
        b = _span(four, r, f"{r}B3")
        red4 = _span(four, r, f"{r}REDUCE_GRAD")
        assert red4.start == pytest.approx(b.start + 1.0)
        assert red4.end == pytest.approx(b.start + 1.0 + 8.0)
        assert _span(four, r, f"{r}OPT").start == pytest.approx(red4.end)
    assert summarize(four).step_time_ms < summarize(plain).step_time_ms


def test_tree_and_ring_all_reduce_formulas() -> None:
    from ppsim.costs.collectives import grad_allreduce, ring_allreduce_ms, tree_allreduce_ms

    link = Link.from_gb_s(100, 10)  # 1e8 bytes per ms, 0.01 ms latency
    n, nbytes = 16, 1e9
    assert ring_allreduce_ms(nbytes, n, link) == pytest.approx(2 * 15 / 16 * 10 + 2 * 15 * 0.01)
    assert tree_allreduce_ms(nbytes, n, link) == pytest.approx(2 * 10 + 2 * 4 * 0.01)
    total, buckets = grad_allreduce(nbytes, n, link, "ring", 25e6)
    assert buckets == 40
    assert total == pytest.approx(40 * ring_allreduce_ms(nbytes / 40, n, link))
    assert grad_allreduce(nbytes, 1, link, "ring", 25e6) == (0.0, 1)
