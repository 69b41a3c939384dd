"""The lowering's fast paths against plain references: the structure check on a table of flags
agrees with the full one (a dict of actions, the grid on failure) on every schedule's plan and the
same plans broken at random; the one-pass placement of posted sends gives what placing each
receive before its consumer and each send after its producer, as the rule says, gives; the walk
that refuses plans which cannot finish agrees with the ideal timeline's; and only the very plans a
schedule built skip the checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, reject, settings
from hypothesis import strategies as st

from conftest import built_plans
from ppsim.errors import PlanError, ScheduleError
from ppsim.plan import COMPUTE_KINDS, Action, Kind, lower, schedules, validate, validate_structure
from ppsim.plan.action import Overlap, message_kinds
from ppsim.plan.deps import dependencies, grad_producers, ideal_times
from ppsim.plan.lower import in_receive_order
from ppsim.plan.plan import Plan
from ppsim.plan.posted import finishes
from ppsim.plan.validate import structure_holds

NAMES = sorted(schedules.SCHEDULES)


def _full_check_holds(plan) -> bool:
    try:
        validate_structure(plan, check_order=False)
    except PlanError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(NAMES), p=st.integers(1, 4), extra=st.integers(0, 4), data=st.data())
def test_the_fast_check_agrees_with_the_full_one(name: str, p: int, extra: int, data: st.DataObject) -> None:
    try:
        plan = schedules.build(name, p, p + extra)
    except ScheduleError:
        reject()  # a (p, m) the schedule does not take: not an example
    assert structure_holds(plan) and _full_check_holds(plan)
    rows = [list(r) for r in plan.actions]
    rank = data.draw(st.integers(0, len(rows) - 1))
    assume(rows[rank])
    i = data.draw(st.integers(0, len(rows[rank]) - 1))
    a = rows[rank][i]
    how = data.draw(st.sampled_from(["drop", "twice", "stage", "mb", "kind", "move", "split", "overlap-self"]))
    s, k, mb = (a.forward if isinstance(a, Overlap) else a)
    if how == "drop":
        del rows[rank][i]
    elif how == "twice":
        rows[rank].insert(i, a)
    elif how == "stage":
        rows[rank][i] = Action(s + data.draw(st.sampled_from([-1, 1, plan.num_stages])), k, mb)
    elif how == "mb":
        rows[rank][i] = Action(s, k, data.draw(st.sampled_from([-1, plan.num_microbatches, (mb or 0) + 1])))
    elif how == "kind":
        rows[rank][i] = Action(s, data.draw(st.sampled_from([Kind.F, Kind.B, Kind.I, Kind.W, Kind.OPT])), mb)
    elif how == "move":
        rows[(rank + 1) % len(rows)].append(rows[rank].pop(i))
    elif how == "split" and k is Kind.B:
        rows[rank][i:i + 1] = [Action(s, Kind.I, mb), Action(s, Kind.W, mb)]
    elif how == "overlap-self" and k is Kind.F:
        rows[rank][i] = Overlap(Action(s, Kind.F, mb), Kind.OVERLAP_F_B, Action(s, Kind.B, mb))
    broken = replace(plan, actions=tuple(tuple(r) for r in rows))
    assert structure_holds(broken) == _full_check_holds(broken)


def _posted_by_the_rule(plan) -> list[list[Action]]:
    """Each receive right before its consumer, each send right after its producer, then each
    rank's sends in the order its peer receives them."""
    where, grads = plan.stage_to_rank, grad_producers(plan)
    out = []
    for r, ra in enumerate(plan.actions):
        seq = []
        for a in ra:
            parts = a.parts if a.kind is Kind.OVERLAP_F_B else (a,)
            for part in parts:
                for d in dependencies(part, plan.num_stages, grads):
                    if where[d[0]] != r:
                        seq.append(Action(part.stage, message_kinds(Action(*d))[1], part.microbatch))
            seq.append(a)
            for part in parts:
                consumer = part.stage + 1 if part.kind is Kind.F else part.stage - 1
                if part.kind in (Kind.F, Kind.B, Kind.I) and 0 <= consumer < plan.num_stages and where[consumer] != r:
                    seq.append(Action(part.stage, message_kinds(part)[0], part.microbatch))
        out.append(seq)
    return in_receive_order(out, where)


@settings(max_examples=150, deadline=None)
@given(plan=built_plans())
def test_posted_sends_are_placed_as_the_rule_says(plan: Plan) -> None:
    assert all(a.kind in COMPUTE_KINDS for r in plan.actions for a in r)
    lowered = lower(plan, rendezvous=False)
    validate(lowered, rendezvous=False)
    steps = [list(r[:len(r) - sum(1 for a in r if a.kind is Kind.OPT)]) for r in lowered.actions]
    assert steps == _posted_by_the_rule(plan)


def _ideal_timeline_finishes(plan) -> bool:
    try:
        ideal_times(plan)
    except PlanError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(plan=built_plans(), data=st.data())
def test_the_walk_finds_the_cycles_the_ideal_timeline_finds(plan: Plan, data: st.DataObject) -> None:
    assert finishes(plan) and _ideal_timeline_finishes(plan)
    rows = [list(r) for r in plan.actions]
    rank = data.draw(st.integers(0, len(rows) - 1))
    assume(len(rows[rank]) >= 2)
    i, j = sorted(data.draw(st.lists(st.integers(0, len(rows[rank]) - 1), min_size=2, max_size=2, unique=True)))
    rows[rank][i], rows[rank][j] = rows[rank][j], rows[rank][i]  # often a cycle: a wait before what it waits on
    swapped = replace(plan, actions=tuple(tuple(r) for r in rows))
    assert finishes(swapped) == _ideal_timeline_finishes(swapped)


def test_every_schedule_builds_valid_plans_that_finish_at_every_small_size() -> None:
    """What lowering takes on trust from a registered schedule (its plans placed, complete, ordered
    and free of cycles), checked at every size it takes up to 6 ranks, 12 micro-batches, 3 chunks."""
    checked = 0
    for name in NAMES:
        info = schedules.get(name)
        for p in range(1, 7):
            for v in sorted({info.chunks.default} | {c for c in (1, 2, 3) if info.chunks.allows(c)}):
                for m in range(1, 13):
                    try:
                        plan = info.build(p, m, v, remembered=False)
                    except ScheduleError:
                        continue
                    validate(plan)
                    assert finishes(plan), (name, p, m, v)
                    checked += 1
    assert checked > 800  # every schedule at many sizes (1,010 today), not a few that happened to build


def test_only_the_plans_a_schedule_built_are_taken_as_valid() -> None:
    plan = schedules.build("1f1b", 4, 8)
    assert plan.built_by_a_schedule and schedules.get("1f1b").build(4, 8, remembered=False).built_by_a_schedule
    assert not Plan.from_json(plan.to_json()).built_by_a_schedule  # read back: anyone may have edited it
    assert not plan.with_actions(plan.actions).built_by_a_schedule  # new actions, however alike
    assert not replace(plan, stage_to_rank=tuple(reversed(plan.stage_to_rank))).built_by_a_schedule
    assert not replace(plan, actions=tuple(tuple(r) for r in plan.actions)).built_by_a_schedule  # a replace keeps no trust
    assert replace(plan, meta={"note": 1}).built_by_a_schedule  # what else it says changes nothing of its actions
    with pytest.raises(TypeError):
        plan.meta["sends"] = "posted"  # type: ignore[index]  # read-only: a pass makes a new Plan


def test_a_changed_copy_of_a_built_plan_is_walked_and_refused_when_it_cannot_finish() -> None:
    plan = schedules.build("1f1b", 2, 2)
    # rank 0 waits for micro-batch 0's grad before it sends micro-batch 1, rank 1 insists on 1 first
    rows = [[Action.parse(t) for t in row.split()] for row in ("0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0")]
    cyclic = replace(plan, actions=tuple(tuple(r) for r in rows))
    for rendezvous in (False, True):
        with pytest.raises(PlanError, match="cannot finish") as exc:
            lower(cyclic, rendezvous=rendezvous)
        assert ">>1F1<<" in (exc.value.detail or "")
