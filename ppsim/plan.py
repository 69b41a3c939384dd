"""Action and Plan: the contract between schedule builders, the simulator and the executor.

An :class:`Action` is an immutable value ``(stage, kind, microbatch)`` where ``stage`` is the
*virtual* stage index (``chunk * ranks + rank`` for the usual loop placement). Its text form,
``2F0`` or ``3RECV_B5`` or ``1OPT``, parses back to the same Action.

A :class:`Plan` maps every pipeline rank to its ordered actions. It is pure data: it knows no
costs and no hardware, and is serialised to JSON (and to the CSV layout torch uses).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple


class Kind(str, Enum):
    """What an action does. Compute kinds first, then communication, then end-of-step."""

    F = "F"  #: forward
    B = "B"  #: full backward (input grad and weight grad together)
    I = "I"  #: backward, input grad only  # noqa: E741
    W = "W"  #: backward, weight grad only
    SEND_F = "SEND_F"  #: send activations to the next stage
    RECV_F = "RECV_F"  #: receive activations from the previous stage
    SEND_B = "SEND_B"  #: send input grads to the previous stage
    RECV_B = "RECV_B"  #: receive grads from the next stage
    REDUCE_GRAD = "REDUCE_GRAD"  #: all-reduce of weight grads across data-parallel replicas
    CLIP = "CLIP"  #: gradient clipping: the gradient norm all-reduced over the pipeline's stages
    OPT = "OPT"  #: optimizer step

    # str's own C hash instead of Enum's Python-level one: Actions are hashed in every pass
    __hash__ = str.__hash__

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    def __repr__(self) -> str:
        return f"Kind.{self.name}"


COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W})
BACKWARD_KINDS = frozenset({Kind.B, Kind.I, Kind.W})
SEND_KINDS = frozenset({Kind.SEND_F, Kind.SEND_B})
RECV_KINDS = frozenset({Kind.RECV_F, Kind.RECV_B})
COMM_KINDS = SEND_KINDS | RECV_KINDS
STEP_KINDS = frozenset({Kind.REDUCE_GRAD, Kind.CLIP, Kind.OPT})

#: the lane of the timeline each kind occupies
LANE_OF_KIND: dict[Kind, str] = {
    Kind.F: "compute",
    Kind.B: "compute",
    Kind.I: "compute",
    Kind.W: "compute",
    Kind.OPT: "compute",
    Kind.SEND_F: "send",
    Kind.SEND_B: "send",
    Kind.RECV_F: "recv",
    Kind.RECV_B: "recv",
    Kind.REDUCE_GRAD: "collective",
    Kind.CLIP: "collective",
}

_ACTION_RE = re.compile(r"^(\d+)([A-Z_]+?)(\d*)$")


class Action(NamedTuple):
    """One step of one stage: ``stage`` is the virtual stage, ``microbatch`` is None for step-level kinds."""

    stage: int
    kind: Kind
    microbatch: int | None = None

    def __str__(self) -> str:
        mb = "" if self.microbatch is None else str(self.microbatch)
        return f"{self.stage}{self.kind.value}{mb}"

    @property
    def lane(self) -> str:
        return LANE_OF_KIND[self.kind]

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse the text form (``2F0``, ``0SEND_B3``, ``1OPT``) back into an Action."""
        m = _ACTION_RE.match(text.strip())
        if not m:
            raise ValueError(f"not an action: {text!r} (expected e.g. '2F0', '0SEND_B3', '1OPT')")
        stage, kind_text, mb = m.groups()
        try:
            kind = Kind(kind_text)
        except ValueError:
            raise ValueError(
                f"not an action: {text!r}: unknown kind {kind_text!r} "
                f"(known: {', '.join(k.value for k in Kind)})"
            ) from None
        needs_mb = kind not in STEP_KINDS
        if needs_mb and mb == "":
            raise ValueError(f"not an action: {text!r}: kind {kind_text} needs a micro-batch index")
        if not needs_mb and mb != "":
            raise ValueError(f"not an action: {text!r}: kind {kind_text} takes no micro-batch index")
        return cls(int(stage), kind, int(mb) if mb else None)


@dataclass(frozen=True)
class Plan:
    """Per-rank ordered actions for one training step of one data-parallel replica.

    ``stage_to_rank[s]`` is the rank that runs virtual stage ``s``; ``chunks`` virtual stages run on
    every rank. ``lowered`` says whether communication and end-of-step actions were added.
    """

    schedule: str
    num_ranks: int
    num_microbatches: int
    chunks: int
    stage_to_rank: tuple[int, ...]
    actions: tuple[tuple[Action, ...], ...]
    lowered: bool = False
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_stages(self) -> int:
        """Number of virtual stages (ranks x chunks)."""
        return len(self.stage_to_rank)

    def stages_of_rank(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]

    def num_actions(self) -> int:
        return sum(len(a) for a in self.actions)

    def with_actions(self, actions: Sequence[Sequence[Action]], *, lowered: bool | None = None) -> Plan:
        return Plan(
            schedule=self.schedule,
            num_ranks=self.num_ranks,
            num_microbatches=self.num_microbatches,
            chunks=self.chunks,
            stage_to_rank=self.stage_to_rank,
            actions=tuple(tuple(a) for a in actions),
            lowered=self.lowered if lowered is None else lowered,
            meta=dict(self.meta),
        )

    # ----- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "ppsim-plan",
            "version": 1,
            "schedule": self.schedule,
            "num_ranks": self.num_ranks,
            "num_microbatches": self.num_microbatches,
            "chunks": self.chunks,
            "stage_to_rank": list(self.stage_to_rank),
            "lowered": self.lowered,
            "meta": self.meta,
            "actions": [[str(a) for a in rank] for rank in self.actions],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if data.get("format") != "ppsim-plan":
            raise ValueError("not a ppsim plan: the 'format' field must be 'ppsim-plan'")
        try:
            return cls(
                schedule=str(data["schedule"]),
                num_ranks=int(data["num_ranks"]),
                num_microbatches=int(data["num_microbatches"]),
                chunks=int(data["chunks"]),
                stage_to_rank=tuple(int(r) for r in data["stage_to_rank"]),
                actions=tuple(tuple(Action.parse(t) for t in rank) for rank in data["actions"]),
                lowered=bool(data.get("lowered", False)),
                meta=dict(data.get("meta", {})),
            )
        except KeyError as exc:
            raise ValueError(f"plan JSON lacks the field {exc.args[0]!r}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

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


def loop_placement(num_ranks: int, chunks: int) -> tuple[int, ...]:
    """Virtual stage ``c * ranks + r`` runs on rank ``r`` (Megatron's interleaved placement)."""
    return tuple(s % num_ranks for s in range(num_ranks * chunks))
