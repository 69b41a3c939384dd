"""Lowering and the validator: bad plans are rejected with a picture of the grid."""

from __future__ import annotations

import pytest

from ppsim.errors import PlanError
from ppsim.plan import (
    RECV_KINDS,
    SEND_KINDS,
    Action,
    Kind,
    Plan,
    add_comms,
    lower,
    matching,
    peer_stage,
    render_grid,
    schedules,
    validate,
)


def _plan(rows: list[str], *, m: int, lowered: bool = False, chunks: int = 1) -> Plan:
    actions = tuple(tuple(Action.parse(t) for t in row.split()) for row in rows)
    p = len(rows)
    return Plan("custom", p, m, chunks, tuple(s % p for s in range(p * chunks)), actions, lowered=lowered)


def test_backward_before_forward_is_marked_in_the_grid() -> None:
    plan = _plan(["0F0 0B1 0F1 0B0", "1F0 1B0 1F1 1B1"], m=2)
    with pytest.raises(PlanError, match="0B1 runs before its forward 0F1") as exc:
        validate(plan)
    assert ">>0B1<<" in (exc.value.detail or "")
    assert "rank 0" in (exc.value.detail or "")


def test_missing_and_duplicate_actions() -> None:
    with pytest.raises(PlanError, match="never runs"):
        validate(_plan(["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"], m=2))
    with pytest.raises(PlanError, match="appears twice"):
        validate(_plan(["0F0 0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"], m=2))


def test_action_on_the_wrong_rank() -> None:
    with pytest.raises(PlanError, match="runs on rank 1"):
        validate(_plan(["0F0 1F0 0B0", "1B0"], m=1))


def test_cyclic_dependencies_are_a_deadlock_with_both_ranks_marked() -> None:
    # rank 0 waits for the grad of micro-batch 0 before it has sent micro-batch 1's activations,
    # while rank 1 insists on micro-batch 1 first
    plan = _plan(["0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"], m=2)
    with pytest.raises(PlanError, match="cannot finish") as exc:
        validate(plan)
    detail = exc.value.detail or ""
    assert ">>0B0<<" in detail and ">>1F1<<" in detail


def test_lowered_plan_that_deadlocks_with_rendezvous_sends() -> None:
    # both ranks send before they receive: fine with buffering, a deadlock when sends block
    plan = _plan(
        [
            "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
            "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
        ],
        m=2,
        lowered=True,
    )
    with pytest.raises(PlanError, match="deadlocks when sends block") as exc:
        validate(plan)
    assert ">>0SEND_F1<<" in (exc.value.detail or "")
    assert ">>1SEND_B0<<" in (exc.value.detail or "")


def test_send_without_receive() -> None:
    plan = _plan(["0F0 0SEND_F0 0B0", "1F0 1B0 1SEND_B0"], m=1, lowered=True)
    with pytest.raises(PlanError, match="no matching"):
        validate(plan)


def test_receive_after_its_use() -> None:
    plan = _plan(["0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"], m=1, lowered=True)
    with pytest.raises(PlanError, match="needs 1RECV_F0 before it"):
        validate(plan)


@pytest.mark.parametrize("name,v", [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1)])
def test_lowering_puts_each_receive_right_before_its_first_use(name: str, v: int) -> None:
    lowered = add_comms(schedules.build(name, 4, 8, v))
    for actions in lowered.actions:
        for i, a in enumerate(actions):
            if a.kind in (Kind.RECV_F, Kind.RECV_B):
                rest = [x for x in actions[i + 1 :] if x.kind not in (Kind.RECV_F, Kind.RECV_B, Kind.SEND_F, Kind.SEND_B)]
                consumer = Kind.F if a.kind is Kind.RECV_F else None
                nxt = rest[0]
                assert nxt.microbatch == a.microbatch and nxt.stage == a.stage
                if consumer:
                    assert nxt.kind is consumer


def test_lower_adds_reduce_and_optimizer_at_the_end() -> None:
    lowered = lower(schedules.build("1f1b", 2, 4), data_parallel=4)
    for r, actions in enumerate(lowered.actions):
        assert [str(a) for a in actions[-2:]] == [f"{r}REDUCE_GRAD", f"{r}OPT"]
    single = lower(schedules.build("1f1b", 2, 4), data_parallel=1)
    assert all(a.kind is not Kind.REDUCE_GRAD for r in single.actions for a in r)
    inference = lower(schedules.build("inference", 2, 4))
    assert all(a.kind is not Kind.OPT for r in inference.actions for a in r)


def test_grid_is_cropped_around_the_mark_for_large_plans() -> None:
    plan = schedules.build("1f1b", 32, 128)
    text = render_grid(plan.actions, {20: 100})
    assert ">>" in text and "earlier steps" in text and "later steps" in text
    assert text.count("\n") < 30


@pytest.mark.parametrize("name, p, m", [("zb-v", 2, 4), ("interleaved-zb", 2, 4), ("zb-v", 4, 8)])
def test_two_ranks_receive_each_others_messages_in_the_order_sent(name: str, p: int, m: int) -> None:
    # activations and grads have the same shape: NCCL and gloo, which match a rank pair's messages
    # by order, would take two crossed ones for each other (both V schedules crossed them at p = 2
    # when sends went right after their producers)
    lowered = lower(schedules.build(name, p, m), rendezvous=False)
    validate(lowered, rendezvous=False)
    where = lowered.stage_to_rank
    for src in range(p):
        for dst in range(p):
            sent = [a for a in lowered.actions[src] if a.kind in SEND_KINDS and where[peer_stage(a)] == dst]
            received = [matching(a) for a in lowered.actions[dst]
                        if a.kind in RECV_KINDS and where[peer_stage(a)] == src]
            assert sent == received


def test_crossed_messages_are_refused_with_the_grid() -> None:
    lowered = lower(schedules.build("1f1b", 2, 2), rendezvous=False)
    crossed = lowered.with_actions([_sends_swapped(lowered.actions[0]), lowered.actions[1]])
    with pytest.raises(PlanError, match="crossed") as exc:
        validate(crossed, rendezvous=False)
    assert exc.value.detail and "rank 0" in exc.value.detail


def _sends_swapped(actions: tuple[Action, ...]) -> list[Action]:
    """Rank 0 of 1F1B (p = 2, m = 2) with both forwards first, then its two sends in reverse."""
    compute = [a for a in actions if a.kind not in SEND_KINDS]
    f0, f1 = compute.index(Action(0, Kind.F, 0)), compute.index(Action(0, Kind.F, 1))
    assert f1 == f0 + 1
    return (compute[:f1 + 1] + [Action(0, Kind.SEND_F, 1), Action(0, Kind.SEND_F, 0)] + compute[f1 + 1:])


# ----- overlapped forward and backward (DualPipe) ------------------------------------------------------
def _v_plan(rows: list[str], *, m: int) -> Plan:
    """Two ranks, V placement: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2."""
    from ppsim.plan import v_placement

    actions = tuple(tuple(Action.parse(t) for t in row.split()) for row in rows)
    return Plan("custom", 2, m, 2, v_placement(2), actions)


def test_an_overlap_of_a_micro_batchs_own_forward_and_backward_is_refused() -> None:
    with pytest.raises(PlanError, match="its own forward") as exc:
        validate(_plan(["0F0 (0F1;0B1)OVERLAP_F_B 0B0", "1F0 1B0 1F1 1B1"], m=2))
    assert ">>(0F1;0B1)OVERLAP_F_B<<" in (exc.value.detail or "")


def test_an_overlap_whose_backward_waits_for_its_own_forward_cannot_finish() -> None:
    # 0B1 needs 1B1, which needs 3F1... which runs inside the same action as 0B1 on rank 0
    rows = ["0F0 0F1 3F0 3B0 (3F1;0B1)OVERLAP_F_B 0B0 3B1", "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"]
    with pytest.raises(PlanError, match="cannot finish"):
        validate(_v_plan(rows, m=2))


def test_an_overlap_with_a_part_of_another_rank_is_refused() -> None:
    with pytest.raises(PlanError, match="which runs on rank 1"):
        validate(_plan(["0F0 0B0 (0F1;1B1)OVERLAP_F_B 0B1", "1F0 1B0 1F1"], m=2))


def test_an_overlaps_messages_go_around_it() -> None:
    """Lowered: the receives either part needs come before the overlapped action, and the sends of
    what either part made right after it (non-blocking sends)."""
    rows = ["0F0 0F1 3F0 (0F2;3B0)OVERLAP_F_B 3F1 (3F2;0B0)OVERLAP_F_B 3B1 3B2 0B1 0B2",
            "1F0 2F0 1F1 2F1 2B0 1F2 2F2 1B0 2B1 1B1 2B2 1B2"]
    plan = _v_plan(rows, m=3)
    validate(plan)
    lowered = lower(plan, 1, rendezvous=False)
    validate(lowered, rendezvous=False)
    seq = [str(a) for a in lowered.actions[0]]
    i = seq.index("(3F2;0B0)OVERLAP_F_B")
    assert {"3RECV_F2", "0RECV_B0"} <= set(seq[:i]) and "SEND" not in seq[i + 1]  # stages 3 and 0 send nothing on
    j = seq.index("(0F2;3B0)OVERLAP_F_B")
    assert sorted(seq[j + 1:j + 3]) == ["0SEND_F2", "3SEND_B0"]
