"""``file:PATH``: a schedule read from a file — a ppsim plan (JSON, as ``ppsim plan --save``
writes it) or torch's schedule CSV (one row per rank, one action per cell, as
``_PipelineScheduleRuntime._dump_csv`` writes it).

Only the compute actions are read: sends, receives and the end of the step are placed again by
lowering, as for every other schedule, and torch's FSDP actions (UNSHARD, RESHARD) and empty
(bubble) cells are skipped. Sizes and placement come from the file; the plan is validated on
reading, so one that cannot finish is refused with the grid.
"""

from __future__ import annotations

import csv
import io
from functools import lru_cache
from pathlib import Path

from ppsim.errors import PlanError, ScheduleError
from ppsim.plan.action import BACKWARD_KINDS, COMPUTE_KINDS, Action, Kind
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import Chunks, Microbatches, Placement, ScheduleInfo
from ppsim.plan.validate import validate

FILE_PREFIX = "file:"
FIELD = "pipeline.schedule"
_SKIPPED = ("UNSHARD", "RESHARD", "REDUCE_GRAD")  #: torch's actions that ppsim places itself or does not model


def from_file(path: str) -> ScheduleInfo:
    """The schedule of the plan file at ``path`` (read again when the file changes)."""
    file = Path(path).expanduser()
    try:
        stat = file.stat()
    except OSError as exc:
        raise ScheduleError(f"cannot read the plan file {path!r} ({exc.strerror or exc}); "
                            "give file:PATH with a ppsim plan JSON or a torch schedule CSV", field=FIELD) from None
    return _info(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=32)
def _info(path: str, mtime_ns: int, size: int) -> ScheduleInfo:
    plan = read_plan(Path(path))
    name = FILE_PREFIX + path
    ranks, m, v = plan.num_ranks, plan.num_microbatches, plan.chunks

    def only_the_files(p: int, given_m: int, given_v: int) -> int | None:
        return None if given_m == m else m

    def build(p: int, given_m: int, given_v: int) -> Plan:
        return plan

    kinds = {x.kind for r in plan.actions for a in r for x in a.parts}
    return ScheduleInfo(
        name=name,
        summary=f"the plan in {path}",
        build_order=build,
        chunks=Chunks(minimum=v, maximum=v, default=v),
        placement=Placement.PLAN,
        splits_backward=Kind.I in kinds,
        overlaps=any(a.kind is Kind.OVERLAP_F_B for r in plan.actions for a in r),
        training=bool(kinds & BACKWARD_KINDS),
        microbatches=Microbatches(f"exactly {m}, as in the file", only_the_files),
        ranks=ranks,
        memory="as the file's order holds them",
        stage_to_rank_of=lambda p, given_v: plan.stage_to_rank,
    )


def read_plan(path: Path) -> Plan:
    """The compute-only plan in ``path``: JSON if it parses as JSON, else torch's CSV."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"cannot read the plan file {str(path)!r} ({exc})", field=FIELD) from None
    try:
        if text.lstrip().startswith("{"):
            plan = compute_only(Plan.from_json(text), name=FILE_PREFIX + str(path))
        else:
            plan = from_torch_csv(text, FILE_PREFIX + str(path))
        validate(plan)
    except PlanError as exc:
        raise PlanError(f"plan file {path}: {exc.message}", detail=exc.detail) from None
    return plan


def compute_only(plan: Plan, name: str) -> Plan:
    """The plan's compute actions in their order, unlowered, under ``name``."""
    return Plan(schedule=name, num_ranks=plan.num_ranks, num_microbatches=plan.num_microbatches, chunks=plan.chunks,
                stage_to_rank=plan.stage_to_rank,
                actions=tuple(tuple(a for a in r if a.kind in COMPUTE_KINDS) for r in plan.actions),
                meta=dict(plan.meta))


def from_torch_csv(text: str, name: str) -> Plan:
    """A plan from torch's schedule CSV: row r is rank r's actions (``0F0``, ``1I3``, ``2W1``;
    communication, FSDP and empty cells skipped). Sizes and placement follow from the actions."""
    rows: list[list[Action]] = []
    for r, row in enumerate(csv.reader(io.StringIO(text))):
        actions = []
        for cell in row:
            cell = cell.strip()
            if not cell or cell.endswith(_SKIPPED):
                continue
            try:
                a = Action.parse(cell)
            except PlanError as exc:
                raise PlanError(f"rank {r} (row {r + 1}): {exc.message}") from None
            if a.kind in COMPUTE_KINDS:
                actions.append(a)
        rows.append(actions)
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        raise PlanError("the CSV holds no actions (one row per rank, one action such as 0F0 per cell)")
    where: dict[int, int] = {}
    for r, actions in enumerate(rows):
        for a in (x for action in actions for x in action.parts):
            if where.setdefault(a.stage, r) != r:
                raise PlanError(f"stage {a.stage} has actions on rank {where[a.stage]} and rank {r}; "
                                "a stage runs on one rank")
    stages = max(where) + 1
    missing = sorted(set(range(stages)) - set(where))
    if missing:
        raise PlanError(f"stage {missing[0]} has no actions (the stages run 0 to {stages - 1})")
    if stages % len(rows):
        raise PlanError(f"{stages} stages over {len(rows)} ranks: every rank must hold the same number of stages")
    microbatches = max(x.microbatch or 0 for r in rows for a in r for x in a.parts) + 1
    return Plan(schedule=name, num_ranks=len(rows), num_microbatches=microbatches, chunks=stages // len(rows),
                stage_to_rank=tuple(where[s] for s in range(stages)), actions=tuple(tuple(r) for r in rows))


__all__ = ["FILE_PREFIX", "compute_only", "from_file", "from_torch_csv", "read_plan"]
