"""Plan: the contract between schedule builders, the simulator and the executor.

A :class:`Plan` maps every pipeline rank to its ordered :class:`~ppsim.plan.action.Action` s and
says which rank holds each virtual stage (``stage_to_rank``). It is pure data: it knows no costs
and no hardware, and is serialised to JSON (and to the CSV layout torch uses).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any

from ppsim.errors import PlanError
from ppsim.formats import PLAN_FORMAT
from ppsim.plan.action import Action, Kind
from ppsim.plan.memo import per_plan

_kind_of = itemgetter(1)  #: an action's kind (an Overlap's too), without the attribute lookup


class ReadOnlyMeta(dict[str, Any]):
    """A plan's meta: a dict that refuses changes (a pass that adds to it makes a new Plan), and
    copies, pickles and serialises as a dict does."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a plan's meta is read-only: make a new Plan, e.g. dataclasses.replace(plan, meta={...})")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]  # refusals
    __ior__ = _refuse  # type: ignore[assignment]  # a refusal

    def __reduce__(self) -> tuple[type[ReadOnlyMeta], tuple[dict[str, Any]]]:
        return type(self), (dict(self),)


@dataclass(frozen=True)
class Plan:
    """Per-rank ordered actions for one training step of one data-parallel replica.

    ``stage_to_rank[s]`` is the rank that runs virtual stage ``s``; ``chunks`` virtual stages run on
    every rank. ``lowered`` says whether communication and end-of-step actions were added.
    ``pipes``: how many pipelines the stages form, each a copy of the whole model (DualPipe runs
    two in opposite directions): pipe k is the k-th run of ``num_stages // pipes`` consecutive
    stages and carries the k-th equal share of the micro-batches (:meth:`microbatches_of`).
    """

    schedule: str
    num_ranks: int
    num_microbatches: int
    chunks: int
    stage_to_rank: tuple[int, ...]
    actions: tuple[tuple[Action, ...], ...]
    lowered: bool = False
    pipes: int = 1
    #: what else a plan says of itself (how its messages were ordered: ``sends``; a search's record:
    #: ``search``); read-only: a pass that adds to it makes a new Plan
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: the actions and placement a registered schedule built, when one did (:meth:`built_by_a_schedule`)
    built: tuple[tuple[tuple[Action, ...], ...], tuple[int, ...]] | None = field(default=None, compare=False,
                                                                                  hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.pipes != 1 and (self.pipes < 1 or len(self.stage_to_rank) % self.pipes
                                or self.num_microbatches % self.pipes):
            raise PlanError(f"a plan of {len(self.stage_to_rank)} stages and {self.num_microbatches} micro-batches "
                            f"cannot run {self.pipes} pipes: each pipe runs an equal share of both")
        if not isinstance(self.meta, ReadOnlyMeta):
            object.__setattr__(self, "meta", ReadOnlyMeta(self.meta))

    @property
    def built_by_a_schedule(self) -> bool:
        """Whether this plan's actions and placement are exactly what a registered schedule built
        (:meth:`~ppsim.plan.schedules.base.ScheduleInfo.build` says so through ``built``). Such a plan
        is valid by construction: placed, complete, ordered and free of cycles (tests/plan/test_schedules.py
        validates every schedule's plans over its sizes), so lowering checks none of that again. A
        plan read from a file, edited, or copied with other actions or placement is checked in full:
        ``built`` names the very actions it vouches for, so any change of them loses it."""
        built = self.built
        return built is not None and built[0] is self.actions and built[1] == self.stage_to_rank

    @property
    def num_stages(self) -> int:
        """Number of virtual stages (ranks x chunks)."""
        return len(self.stage_to_rank)

    @property
    def stages_per_pipe(self) -> int:
        """The virtual stages a micro-batch runs through: every stage, unless the plan runs
        several pipes."""
        return len(self.stage_to_rank) // self.pipes

    def microbatches_of(self, stage: int) -> range:
        """The micro-batches virtual stage ``stage`` runs: its pipe's share."""
        return pipe_microbatches(stage // self.stages_per_pipe, self.pipes, self.num_microbatches)

    def stages_of_rank(self, rank: int) -> list[int]:
        """The virtual stages rank ``rank`` holds, in increasing order."""
        by_rank = _stages_by_rank(self.stage_to_rank)
        return list(by_rank[rank]) if 0 <= rank < len(by_rank) else []

    def num_actions(self) -> int:
        return sum(len(a) for a in self.actions)

    def kinds(self, rank: int | None = None) -> frozenset[Kind]:
        """The kinds of action ``rank`` runs (every rank's when None)."""
        by_rank = _kinds_by_rank(self)
        return by_rank[rank] if rank is not None else frozenset().union(*by_rank)

    def with_actions(self, actions: Sequence[Sequence[Action]], *, lowered: bool | None = None) -> Plan:
        return Plan(
            schedule=self.schedule,
            num_ranks=self.num_ranks,
            num_microbatches=self.num_microbatches,
            chunks=self.chunks,
            stage_to_rank=self.stage_to_rank,
            actions=tuple(tuple(a) for a in actions),
            lowered=self.lowered if lowered is None else lowered,
            pipes=self.pipes,
            meta=self.meta,
        )

    # ----- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "version": 1,
            "schedule": self.schedule,
            "num_ranks": self.num_ranks,
            "num_microbatches": self.num_microbatches,
            "chunks": self.chunks,
            **({"pipes": self.pipes} if self.pipes > 1 else {}),  # one pipe: as plans were written before
            "stage_to_rank": list(self.stage_to_rank),
            "lowered": self.lowered,
            "meta": dict(self.meta),
            "actions": [[str(a) for a in rank] for rank in self.actions],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanError(f"not a ppsim plan: the 'format' field must be {PLAN_FORMAT!r}")
        try:
            return cls(
                schedule=str(data["schedule"]),
                num_ranks=int(data["num_ranks"]),
                num_microbatches=int(data["num_microbatches"]),
                chunks=int(data["chunks"]),
                stage_to_rank=tuple(int(r) for r in data["stage_to_rank"]),
                actions=tuple(tuple(Action.parse(t) for t in rank) for rank in data["actions"]),
                lowered=bool(data.get("lowered", False)),
                pipes=int(data.get("pipes", 1)),
                meta=dict(data.get("meta", {})),
            )
        except KeyError as exc:
            raise PlanError(f"plan JSON lacks the field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise PlanError(f"plan JSON has a malformed field ({exc})") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data)

    def to_csv(self) -> str:
        """One row per rank, one action text per cell: the layout of torch's schedule CSV files."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        for rank in self.actions:
            writer.writerow([str(a) for a in rank])
        return buf.getvalue()

    @staticmethod
    def actions_from_csv(text: str) -> list[list[Action]]:
        rows = csv.reader(io.StringIO(text))
        return [[Action.parse(c) for c in row if c.strip()] for row in rows]


@per_plan
def _kinds_by_rank(plan: Plan) -> tuple[frozenset[Kind], ...]:
    """Each rank's kinds of action, gathered at C speed."""
    return tuple(frozenset(map(_kind_of, row)) for row in plan.actions)


@lru_cache(maxsize=64)
def _stages_by_rank(stage_to_rank: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Each rank's virtual stages under a placement, worked out once (every pass asks per rank)."""
    by_rank: list[list[int]] = [[] for _ in range(max(stage_to_rank, default=-1) + 1)]
    for s, r in enumerate(stage_to_rank):
        by_rank[r].append(s)
    return tuple(map(tuple, by_rank))


def pipe_microbatches(pipe: int, pipes: int, num_microbatches: int) -> range:
    """The micro-batches pipe ``pipe`` of ``pipes`` carries: its equal share, in order."""
    share = num_microbatches // pipes
    return range(pipe * share, (pipe + 1) * share)


def loop_placement(num_ranks: int, chunks: int) -> tuple[int, ...]:
    """Virtual stage ``c * ranks + r`` runs on rank ``r`` (Megatron's interleaved placement)."""
    return tuple(s % num_ranks for s in range(num_ranks * chunks))


def v_placement(num_ranks: int) -> tuple[int, ...]:
    """Two chunks per rank in a V: rank r holds stages r and 2p - 1 - r, so the last stage comes
    back to rank 0 and the turn (stages p - 1 and p) stays on rank p - 1 (ZB-V, DualPipeV)."""
    p = num_ranks
    return tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))
