"""``file:PATH``: a schedule read from a file — a ppsim plan (JSON, as ``ppsim plan --save``
writes it) or torch's schedule CSV (one row per rank, one action per cell, as
``_PipelineScheduleRuntime._dump_csv`` writes it).

Only the compute actions are read: sends, receives and the end of the step are placed again by
lowering, as for every other schedule, and torch's FSDP actions (UNSHARD, RESHARD) and empty
(bubble) cells are skipped. torch's CSVs are read in both of torch's namings of the backward: today
``B`` is the full backward and ``I`` / ``W`` its input and weight halves; before torch renamed
them, ``BW`` was the full backward and ``B`` the input half. A file is of the older naming when it
has a ``BW``, or ``W`` without any ``I`` (a full backward is never followed by a weight grad).
Sizes and placement come from the file; the plan is validated on reading, so one that cannot
finish is refused with the grid.
"""

from __future__ import annotations

import csv
import io
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ppsim.errors import PlanError, ScheduleError, file_error, shown_path
from ppsim.formats import PLAN_FORMAT
from ppsim.plan.action import COMPUTE_KINDS, Action, Kind
from ppsim.plan.plan import Plan
from ppsim.plan.rules import is_training
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
    except FileNotFoundError:
        raise ScheduleError(f"plan file {shown_path(path)} does not exist; give file:PATH with a ppsim plan JSON or "
                            "a torch schedule CSV", field=FIELD) from None
    except OSError as exc:
        raise file_error(path, exc, writing=False, field=FIELD, kind=ScheduleError) from None
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
        training=is_training(kinds),
        microbatches=Microbatches(f"exactly {m}, as in the file", only_the_files),
        ranks=ranks,
        memory="as the file's order holds them",
        pipes=plan.pipes,
        stage_to_rank_of=lambda p, given_v: plan.stage_to_rank,
    )


def read_plan(path: Path) -> Plan:
    """The compute-only plan in ``path``: JSON if it starts as JSON does, else torch's CSV."""
    text = _read_text(path, field=FIELD)
    try:
        if text.lstrip()[:1] in ("{", "["):
            plan = compute_only(plan_from_json(text), name=FILE_PREFIX + str(path))
        else:
            plan = from_torch_csv(text, FILE_PREFIX + str(path))
        validate(plan)
    except PlanError as exc:
        raise PlanError(f"plan file {path}: {exc.message}", detail=exc.detail) from None
    return plan


def load_plan_file(path: Path) -> Plan:
    """The whole plan (lowered or not) in the ppsim plan JSON at ``path``, as ``ppsim plan --save`` wrote it."""
    text = _read_text(path)
    try:
        return plan_from_json(text)
    except PlanError as exc:
        raise PlanError(f"plan file {path}: {exc.message}", detail=exc.detail) from None


def _read_text(path: Path, field: str | None = None) -> str:
    try:
        if not path.is_file():
            what = "is a folder" if path.is_dir() else "does not exist"
            raise ScheduleError(f"plan file {shown_path(path)} {what}; give a ppsim plan JSON or a torch schedule CSV",
                                field=field)
        return path.read_text(encoding="utf-8")
    except (OSError, RuntimeError) as exc:  # RuntimeError: pathlib's symbolic link loop
        raise file_error(path, exc, writing=False, field=field, kind=ScheduleError) from None
    except UnicodeDecodeError:
        raise ScheduleError(f"plan file {shown_path(path)} is not text; give a ppsim plan JSON or a torch schedule "
                            "CSV", field=field) from None


#: the fields of a ppsim plan JSON: (what each must be, its check)
_COUNT = ("a whole number >= 1", lambda v: type(v) is int and v >= 1)
_FIELDS: dict[str, tuple[str, Any]] = {
    "schedule": ("a string", lambda v: isinstance(v, str)),
    "num_ranks": _COUNT,
    "num_microbatches": _COUNT,
    "chunks": _COUNT,
    "stage_to_rank": ("a list of whole numbers (the rank of each stage)",
                      lambda v: isinstance(v, list) and all(type(r) is int for r in v)),
    "actions": ('a list with one list per rank of action texts such as "0F0"',
                lambda v: isinstance(v, list) and all(isinstance(r, list) and all(isinstance(a, str) for a in r)
                                                      for r in v)),
}
_OPTIONAL: dict[str, tuple[str, Any]] = {
    "lowered": ("true or false", lambda v: isinstance(v, bool)),
    "meta": ("an object", lambda v: isinstance(v, dict)),
    "pipes": _COUNT,
}


def plan_from_json(text: str) -> Plan:
    """A ppsim plan from its JSON text, the shape of every field checked first: one PlanError naming
    the field, never a TypeError from deep inside."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"not valid JSON ({exc.msg} at line {exc.lineno}); give a file `ppsim plan --save` "
                        "wrote") from None
    except RecursionError:
        raise PlanError("JSON nested too deeply to read; give a file `ppsim plan --save` wrote") from None
    if not isinstance(data, dict):
        raise PlanError(f"a plan JSON is an object with the fields format, {', '.join(_FIELDS)}; "
                        f"this file holds {_kind(data)}")
    if data.get("format") != PLAN_FORMAT:
        raise PlanError(f"field 'format' must be {PLAN_FORMAT!r}, got {_shown(data.get('format'))}; "
                        "give a file `ppsim plan --save` wrote")
    for name, (what, ok) in _FIELDS.items():
        if name not in data:
            raise PlanError(f"field {name!r} is missing; it must be {what}")
        if not ok(data[name]):
            raise PlanError(f"field {name!r} must be {what}, got {_first_wrong(data[name], list if name == 'actions' else int)}")
    for name, (what, ok) in _OPTIONAL.items():
        if name in data and not ok(data[name]):
            raise PlanError(f"field {name!r} must be {what}, got {_kind(data[name])}")
    ranks, chunks, m = data["num_ranks"], data["chunks"], data["num_microbatches"]
    if len(data["actions"]) != ranks:
        raise PlanError(f"field 'actions' has {len(data['actions'])} rank lists but 'num_ranks' is {ranks}; "
                        "make them agree")
    if len(data["stage_to_rank"]) != ranks * chunks:
        raise PlanError(f"field 'stage_to_rank' has {len(data['stage_to_rank'])} entries but num_ranks x chunks is "
                        f"{ranks} x {chunks} = {ranks * chunks}; give the rank of every stage")
    if any(not 0 <= r < ranks for r in data["stage_to_rank"]):
        raise PlanError(f"field 'stage_to_rank' names a rank outside 0 to {ranks - 1}")
    pipes = data.get("pipes", 1)
    if (ranks * chunks) % pipes or m % pipes:
        raise PlanError(f"field 'pipes' is {pipes}, which must divide both the stages ({ranks * chunks}) and "
                        f"'num_microbatches' ({m}): each pipe runs an equal share of both")
    n_actions = sum(map(len, data["actions"]))
    if m > n_actions:
        raise PlanError(f"field 'num_microbatches' is {m:,} but the file has only {n_actions:,} actions; "
                        "every micro-batch needs its own")
    return Plan.from_dict(data)


def _first_wrong(value: Any, item_type: type) -> str:
    """What is wrong in a list field: the first entry not of ``item_type`` (or, in a list of
    lists, the first inner entry not a string)."""
    if not isinstance(value, list):
        return _kind(value)
    for i, item in enumerate(value):
        if type(item) is not item_type:
            return f"{_kind(item)} at [{i}]"
        if isinstance(item, list):  # item's type is item_type: a list exactly when item_type is list
            bad = next((j for j, x in enumerate(item) if not isinstance(x, str)), None)
            if bad is not None:
                return f"{_kind(item[bad])} at [{i}][{bad}]"
    return "a list"


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: ``a number (5)``, ``a list``."""
    names = {bool: "true/false", int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    name = names.get(type(value), type(value).__name__)
    return f"{name} ({_shown(value)})" if isinstance(value, (int, float, str)) else name


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def compute_only(plan: Plan, name: str) -> Plan:
    """The plan's compute actions in their order, unlowered, under ``name``."""
    return Plan(schedule=name, num_ranks=plan.num_ranks, num_microbatches=plan.num_microbatches, chunks=plan.chunks,
                stage_to_rank=plan.stage_to_rank,
                actions=tuple(tuple(a for a in r if a.kind in COMPUTE_KINDS) for r in plan.actions),
                pipes=plan.pipes, meta=dict(plan.meta))


#: a compute cell of torch's CSV in the naming before the rename: (stage, BW or B, micro-batch)
_OLD_BACKWARD = re.compile(r"^(\d+)(BW|B)(\d+)$")
_KIND_CELL = re.compile(r"^\d+([A-Z_]+)\d*$")


def before_rename(cells: list[str]) -> bool:
    """Whether torch's CSV cells name the backward as torch did before the rename (module docstring)."""
    kinds = {m.group(1) for c in cells if (m := _KIND_CELL.match(c))}
    return "BW" in kinds or ("W" in kinds and "I" not in kinds)


def _renamed(cell: str) -> str:
    """A cell of the older naming in today's: ``BW`` -> ``B`` (full), ``B`` -> ``I`` (input half)."""
    m = _OLD_BACKWARD.match(cell)
    if not m:
        return cell
    stage, kind, mb = m.groups()
    return f"{stage}{'B' if kind == 'BW' else 'I'}{mb}"


def from_torch_csv(text: str, name: str) -> Plan:
    """A plan from torch's schedule CSV: row r is rank r's actions (``0F0``, ``1I3``, ``2W1``;
    communication, FSDP and empty cells skipped), in either of torch's namings of the backward.
    Sizes and placement follow from the actions."""
    table = [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text))]
    old = before_rename([c for row in table for c in row])
    rows: list[list[Action]] = []
    for r, row in enumerate(table):
        actions = []
        for cell in row:
            if not cell or cell.endswith(_SKIPPED):
                continue
            if old:
                cell = _renamed(cell)
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


__all__ = ["FILE_PREFIX", "before_rename", "compute_only", "from_file", "from_torch_csv", "load_plan_file",
           "plan_from_json", "read_plan"]
