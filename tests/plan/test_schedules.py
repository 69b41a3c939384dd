"""Schedules against the published formulas and their invariants."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import run_schedule
from ppsim.errors import ScheduleError
from ppsim.plan import COMPUTE_KINDS, Kind, lower, schedules, validate
from ppsim.trace.metrics import summarize

CASES = [(p, m) for p in (2, 4, 8, 16) for m in (1, p, 4 * p)]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", CASES)
def test_fill_drain_bubble_formula(name: str, p: int, m: int) -> None:
    s = summarize(run_schedule(name, p, m, forward=1.0, backward=2.0))
    assert s.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)
    for stage in s.per_rank:
        assert stage.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-9)


def test_1f1b_worked_example() -> None:
    s = summarize(run_schedule("1f1b", 4, 8, forward=1.0, backward=2.0))
    assert s.step_time_ms == pytest.approx(33.0, abs=1e-12)
    assert s.bubble_fraction == pytest.approx(3 / 11, abs=1e-12)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16), (8, 16), (8, 32)])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_divides_idle_time_by_chunks(p: int, m: int, v: int) -> None:
    # Megatron's order meets the formula exactly when forward and backward take equal time
    one = summarize(run_schedule("1f1b", p, m, forward=1.0, backward=1.0))
    inter = summarize(run_schedule("interleaved-1f1b", p, m, v, forward=1.0, backward=1.0))
    idle_one = one.step_time_ms - 2 * m
    idle_inter = inter.step_time_ms - 2 * m
    assert idle_one == pytest.approx((p - 1) * 2)
    assert idle_inter == pytest.approx(idle_one / v, abs=1e-9)


@pytest.mark.parametrize("p,m", [(2, 2), (4, 4), (4, 8), (8, 8), (8, 24), (16, 32)])
def test_zb_h1_has_a_third_of_1f1b_idle_time(p: int, m: int) -> None:
    # F = I = W = 1: the full backward is 2
    one = summarize(run_schedule("1f1b", p, m, forward=1.0, backward=2.0))
    zb = summarize(run_schedule("zb-h1", p, m, forward=1.0, backward=2.0, weight_grad=1.0))
    idle = lambda s: sum(s.step_time_ms - st.busy_ms for st in s.per_rank)  # noqa: E731
    assert idle(zb) == pytest.approx(idle(one) / 3, abs=1e-9)
    assert max(st.peak_activation_microbatches for st in zb.per_rank) <= min(p, m)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 2), (4, 8), (8, 32), (16, 16)])
def test_activation_peaks(p: int, m: int) -> None:
    one = summarize(run_schedule("1f1b", p, m))
    gp = summarize(run_schedule("gpipe", p, m))
    for s, stage in enumerate(one.per_rank):
        assert stage.peak_activation_microbatches == min(p - s, m)
    for stage in gp.per_rank:
        assert stage.peak_activation_microbatches == m


def test_interleaved_rank0_peak_matches_published_estimate() -> None:
    p, m, v = 4, 16, 2
    s = summarize(run_schedule("interleaved-1f1b", p, m, v))
    # Narayanan et al.: rank 0 holds about p (1 + (p - 1) / (p v)) stage-equivalents
    assert s.per_rank[0].peak_activation_microbatches == pytest.approx(p * (1 + (p - 1) / (p * v)), abs=0.5)


def test_interleaved_needs_microbatches_multiple_of_stages() -> None:
    with pytest.raises(ScheduleError, match="multiple of p") as exc:
        schedules.build("interleaved-1f1b", 4, 6, 2)
    assert exc.value.field == "pipeline.microbatches"


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "inference"])
def test_single_chunk_schedules_reject_chunks(name: str) -> None:
    with pytest.raises(ScheduleError, match="one chunk per rank") as exc:
        schedules.build(name, 4, 8, 2)
    assert exc.value.field == "pipeline.chunks"


def test_unknown_schedule_lists_the_known_ones() -> None:
    with pytest.raises(ScheduleError, match="gpipe, 1f1b"):
        schedules.build("pipedream-2bw", 4, 8)


def test_1f1b_per_stage_order_is_deepspeeds() -> None:
    # DeepSpeed TrainSchedule, p = 4, m = 6: stage 1 warms up with 2 forwards, then alternates
    plan = schedules.build("1f1b", 4, 6)
    assert [str(a) for a in plan.actions[1]] == [
        "1F0", "1F1", "1F2", "1B0", "1F3", "1B1", "1F4", "1B2", "1F5", "1B3", "1B4", "1B5",
    ]
    assert [str(a) for a in plan.actions[3]][:4] == ["3F0", "3B0", "3F1", "3B1"]


def test_interleaved_order_is_megatrons() -> None:
    # rank 0 of p = 4, m = 8, v = 2 as in Megatron-LM / torch.distributed.pipelining
    plan = schedules.build("interleaved-1f1b", 4, 8, 2)
    expected = (
        "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 0B2 0B3 "
        "4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7"
    )
    assert " ".join(str(a) for a in plan.actions[0]) == expected


# ----- properties over (p, m, v) -------------------------------------------------------------
@st.composite
def plans(draw: st.DrawFn) -> tuple[str, int, int, int]:
    """A registered schedule at sizes it accepts (its chunks and micro-batch rule); auto, a search
    on costs, has its own tests (test_auto_schedule.py)."""
    name = draw(st.sampled_from(sorted(schedules.SCHEDULES)))
    info = schedules.get(name)
    p = info.pipes * draw(st.integers(1, 8 // info.pipes))  # each pipe over every rank
    v = info.chunks.default if info.chunks.fixed else draw(st.integers(info.chunks.minimum, 3))
    assume(info.allows_chunks(p, v))
    m = draw(st.integers(1, 12))
    m = info.microbatches.nearest(p, m, v) or m
    return name, p, m, v


@settings(max_examples=60, deadline=None)
@given(plans())
def test_schedule_invariants(case: tuple[str, int, int, int]) -> None:
    name, p, m, v = case
    plan = schedules.build(name, p, m, v)
    validate(plan)
    training = schedules.get(name).training
    info = schedules.get(name)
    for r, compound in enumerate(plan.actions):
        assert all(a.kind in COMPUTE_KINDS for a in compound)
        assert any(a.kind is Kind.OVERLAP_F_B for a in compound) <= info.overlaps  # only where it says so
        actions = [x for a in compound for x in a.parts]
        assert all(plan.stage_to_rank[a.stage] == r for a in actions)
        passes = {(a.stage, a.microbatch): 0 for a in actions}
        for a in actions:
            passes[(a.stage, a.microbatch)] += 1 if a.kind in (Kind.F, Kind.B) or not info.overlaps else 0.5
        per_mb = 1 if not training else (3 if info.splits_backward and not info.overlaps else 2)
        # every stage of the rank runs its pipe's share of the micro-batches: F + B, or F + I + W (I + W = one B)
        assert len(passes) == v * m // info.pipes and set(passes.values()) == {per_mb}
        pos = {a: i for i, a in enumerate(compound) for a in a.parts}
        for a in actions:
            if a.kind in (Kind.B, Kind.I):
                assert pos[a._replace(kind=Kind.F)] < pos[a]
            if a.kind is Kind.W:
                assert pos[a._replace(kind=Kind.I)] < pos[a]


@settings(max_examples=40, deadline=None)
@given(plans(), st.sampled_from(["rendezvous", "eager", "async"]), st.integers(1, 3))
def test_lowered_plans_run_under_every_semantics(case: tuple[str, int, int, int], comm: str, dp: int) -> None:
    name, p, m, v = case
    lowered = lower(schedules.build(name, p, m, v), dp)
    sends = {a for r in lowered.actions for a in r if a.kind in (Kind.SEND_F, Kind.SEND_B)}
    recvs = {a for r in lowered.actions for a in r if a.kind in (Kind.RECV_F, Kind.RECV_B)}
    assert len(sends) == len(recvs)
    weight_grad = 1.0 if schedules.get(name).splits_backward else 0.0
    trace = run_schedule(name, p, m, v, weight_grad=weight_grad, p2p=0.25, comm=comm, dp=dp)
    executed = trace.actions_by_rank()
    assert [sorted(map(str, r)) for r in executed] == [sorted(map(str, r)) for r in lowered.actions]
    s = summarize(trace)
    assert 0.0 <= s.bubble_fraction < 1.0
    # a rank's v chunks each cost 1/v of its figures and run their pipe's share of the micro-batches
    busy = m * (1.0 + (2.0 if schedules.get(name).training else 0.0)) / schedules.get(name).pipes
    for stage in s.per_rank:
        assert stage.busy_ms == pytest.approx(busy, rel=1e-9)


def test_a_built_plan_is_remembered_and_can_be_built_anew() -> None:
    """The same (p, m, v) shares its actions with the plan built before (a plan's meta is read-only,
    so nothing one caller adds reaches another); remembered=False builds the same actions again."""
    info = schedules.get("1f1b")
    first, again = info.build(4, 8), info.build(4, 8)
    fresh = info.build(4, 8, remembered=False)
    assert again.actions is first.actions
    with pytest.raises(TypeError):
        first.meta["search"] = {}  # type: ignore[index]
    assert fresh.actions == first.actions and fresh.actions is not first.actions


def test_combined_1f1b_needs_virtual_stages_with_a_pipeline() -> None:
    """As Megatron asserts for --overlap-moe-expert-parallel-comm: with more than one pipeline
    stage, virtual stages; on one stage any count."""
    from ppsim.errors import ScheduleError

    with pytest.raises(ScheduleError, match="at least 2 chunks per rank with a pipeline") as err:
        schedules.build("combined-1f1b", 4, 8, 1)
    assert err.value.field == "pipeline.chunks"
    assert schedules.build("combined-1f1b", 1, 8, 1).num_stages == 1
    assert schedules.build("combined-1f1b", 4, 8, 2).num_stages == 8
