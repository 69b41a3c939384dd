"""DualPipe (DeepSeek-V3, 2024): two copies of the model fed from both ends of the pipeline. Its
orders against DualPipeV's (DeepSeek's own code runs DualPipeV's phases on a rank's ``half_rank``),
the micro-batches each copy carries, the sizes it refuses, and its plan files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import gpt
from ppsim.errors import PlanError, ScheduleError
from ppsim.plan import Plan, schedules
from ppsim.plan.action import Action, Kind
from ppsim.plan.schedules.from_file import plan_from_json
from ppsim.prediction import predict


def _shape(actions: tuple, down: int, up: int, first: dict[int, int]) -> list[str]:
    """A rank's order with its stages named a (down) and b (up) and micro-batches counted from
    each stage's first: what two ranks running the same phases share."""
    def one(a: Action) -> str:
        return f"{'a' if a.stage == down else 'b'}{a.kind.value}{a.microbatch - first.get(a.stage, 0)}"
    return [";".join(one(x) for x in a.parts) for a in actions]


@settings(max_examples=30, deadline=None)
@given(half=st.integers(1, 4), extra=st.integers(0, 6))
def test_each_rank_runs_dualpipevs_phases_as_a_rank_of_half_the_pipeline(half: int, extra: int) -> None:
    p, m = 2 * half, 2 * (2 * half + extra)  # DualPipe: p even, m even and >= 2p
    dual = schedules.build("dualpipe", p, m)
    folded = schedules.build("dualpipev", half, m // 2)
    for r in range(p):
        near = min(r, p - 1 - r)  # DeepSeek's half_rank
        own, mirrored = r, 2 * p - 1 - r
        down, up = (own, mirrored) if r < half else (mirrored, own)
        expected = _shape(folded.actions[near], near, 2 * half - 1 - near, {})
        assert _shape(dual.actions[r], down, up, {mirrored: m // 2}) == expected, r


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 10), (8, 20)])
def test_each_copy_carries_half_the_microbatches_through_its_own_stages(p: int, m: int) -> None:
    plan = schedules.build("dualpipe", p, m)
    assert plan.pipes == 2 and plan.stages_per_pipe == p
    runs: dict[int, set[int]] = {}
    for rank in plan.actions:
        for a in rank:
            for x in a.parts:
                if x.kind is Kind.F:
                    runs.setdefault(x.microbatch, set()).add(x.stage)
    assert runs == {mb: set(range(p)) if mb < m // 2 else set(range(p, 2 * p)) for mb in range(m)}
    # rank r holds the r-th stage of the first copy and the (p - 1 - r)-th of the second
    assert [plan.stages_of_rank(r) for r in range(p)] == [[r, 2 * p - 1 - r] for r in range(p)]
    assert [[s % p for s in plan.stages_of_rank(r)] for r in range(p)] == [[r, p - 1 - r] for r in range(p)]


@pytest.mark.parametrize("p,m,field,fix", [
    (3, 6, "pipeline.stages", "set stages: 4"),
    (4, 9, "pipeline.microbatches", "use 10"),
    (4, 6, "pipeline.microbatches", "use 8"),
])
def test_sizes_it_cannot_run_name_the_field_and_the_fix(p: int, m: int, field: str, fix: str) -> None:
    with pytest.raises(ScheduleError) as err:
        schedules.build("dualpipe", p, m)
    assert err.value.field == field and fix in err.value.message


def test_a_plan_of_two_copies_keeps_them_through_its_json() -> None:
    plan = schedules.build("dualpipe", 4, 8)
    again = plan_from_json(plan.to_json())
    assert again.pipes == 2 and again.actions == plan.actions
    assert "pipes" not in schedules.build("dualpipev", 4, 8).to_dict()  # one copy: written as before


def test_a_microbatch_on_the_other_copys_stage_is_refused_with_the_grid() -> None:
    from ppsim.plan.validate import validate

    plan = schedules.build("dualpipe", 2, 4)
    rows = [list(r) for r in plan.actions]
    at = next(i for i, a in enumerate(rows[0]) if a == Action(0, Kind.F, 0))
    rows[0][at] = Action(0, Kind.F, 3)  # micro-batch 3 belongs to the second copy
    with pytest.raises(PlanError, match="stage 0's pipe runs micro-batches 0 to 1") as err:
        validate(plan.with_actions(rows))
    assert err.value.detail


def test_pipes_must_divide_the_stages_and_the_microbatches() -> None:
    with pytest.raises(PlanError, match="cannot run 2 pipes"):
        Plan("x", 2, 3, 2, (0, 1, 1, 0), ((), ()), pipes=2)


def test_a_saved_dualpipe_plan_predicts_what_the_schedule_does(tmp_path: Path) -> None:
    s = gpt().with_overrides(schedule="dualpipe", stages=4, microbatches=8, chunks=2)
    direct = predict(s)
    path = tmp_path / "dualpipe.json"
    path.write_text(direct.plan.to_json())
    from_file = predict(s.with_overrides(schedule=f"file:{path}"))
    assert from_file.plan.pipes == 2
    assert [(x.rank, x.action, x.start, x.end) for x in from_file.trace.spans] == [
        (x.rank, x.action, x.start, x.end) for x in direct.trace.spans]


def test_a_plan_file_whose_pipes_do_not_divide_its_sizes_is_one_line(tmp_path: Path) -> None:
    data = schedules.build("dualpipe", 2, 4).to_dict()
    data["pipes"] = 3
    path = tmp_path / "bad.json"
    import json

    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="field 'pipes' is 3, which must divide"):
        schedules.get(f"file:{path}")


def test_a_listed_partition_gives_one_copys_stages() -> None:
    from ppsim.errors import ScenarioError
    from ppsim.prediction import build

    s = gpt().with_overrides(schedule="dualpipe", stages=4, microbatches=8, chunks=2)
    layers = s.model.layers
    listed = s.with_overrides(partition=[layers // 4] * 4)
    assert build(listed).workload.partition == [layers // 4] * 8  # both copies laid out alike
    with pytest.raises(ScenarioError, match="stages x chunks / copies of the model = 4 x 2 / 2 = 4; give one "
                                            "count per virtual stage of one copy"):
        s.with_overrides(partition=[layers // 8] * 8)


def test_tune_offers_it_only_where_the_ranks_pair_up() -> None:
    from ppsim.search.tune.space import SearchSpace, candidates

    s = gpt().with_overrides(schedule="1f1b", stages=2, microbatches=8, chunks=1)
    cands = candidates(s, SearchSpace(gpus=12, schedules=("dualpipe",), micro_batches=(1,)))
    assert cands and {c.stages % 2 for c in cands if c.schedule == "dualpipe"} == {0}
