"""Action: one thing one stage does, ``(stage, kind, microbatch)``, with a text form that parses back.

``stage`` is the *virtual* stage; its text form is ``2F0``, ``3RECV_B5`` or ``1OPT``. An
:class:`Overlap` is one compute action holding a forward and a backward of two micro-batches
(DualPipe's overlapped chunk), written as torch writes it: ``(0F3;3B1)OVERLAP_F_B``. Besides the
kinds, this module holds the facts every consumer of a plan shares about communication actions:
which stage is at the other end, and which action matches a send or a receive.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import partial
from typing import Literal, NamedTuple

from ppsim.errors import PlanError


class Kind(str, Enum):
    """What an action does. Compute kinds first, then communication, then end-of-step."""

    F = "F"  #: forward
    B = "B"  #: full backward (input grad and weight grad together)
    I = "I"  #: backward, input grad only
    W = "W"  #: backward, weight grad only
    SEND_F = "SEND_F"  #: send activations to the next stage
    RECV_F = "RECV_F"  #: receive activations from the previous stage
    SEND_B = "SEND_B"  #: send input grads to the previous stage
    RECV_B = "RECV_B"  #: receive grads from the next stage
    REDUCE_GRAD = "REDUCE_GRAD"  #: all-reduce of weight grads across data-parallel replicas
    CLIP = "CLIP"  #: gradient clipping: the gradient norm all-reduced over the pipeline's stages
    OPT = "OPT"  #: optimizer step
    OVERLAP_F_B = "OVERLAP_F_B"  #: a forward and a backward of two micro-batches as one action (:class:`Overlap`)

    # str's own C hash instead of Enum's Python-level one: Actions are hashed in every pass
    __hash__ = str.__hash__

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    def __repr__(self) -> str:
        return f"Kind.{self.name}"


COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B})
BACKWARD_KINDS = frozenset({Kind.B, Kind.I, Kind.W})
SEND_KINDS = frozenset({Kind.SEND_F, Kind.SEND_B})
RECV_KINDS = frozenset({Kind.RECV_F, Kind.RECV_B})
COMM_KINDS = SEND_KINDS | RECV_KINDS
STEP_KINDS = frozenset({Kind.REDUCE_GRAD, Kind.CLIP, Kind.OPT})

#: the lanes of a timeline: where a rank's work, its messages out and in, and its collectives go
Lane = Literal["compute", "send", "recv", "collective"]
#: the lane of the timeline each kind occupies
LANE_OF_KIND: dict[Kind, Lane] = {
    Kind.F: "compute",
    Kind.B: "compute",
    Kind.I: "compute",
    Kind.W: "compute",
    Kind.OPT: "compute",
    Kind.OVERLAP_F_B: "compute",
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
    def lane(self) -> Lane:
        return LANE_OF_KIND[self.kind]

    @property
    def parts(self) -> tuple[Action, ...]:
        """The plain actions this one runs: itself (an :class:`Overlap`, used wherever an Action is, runs two)."""
        return (self,)

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse the text form (``2F0``, ``0SEND_B3``, ``1OPT``) back into an Action, or the compound
        form (``(0F3;3B1)OVERLAP_F_B``) into an :class:`Overlap`; PlanError if it is neither."""
        if isinstance(text, str) and text.strip().startswith("("):
            return Overlap.parse(text)  # type: ignore[return-value]  # an Overlap stands in for an Action
        m = _ACTION_RE.match(text.strip()) if isinstance(text, str) else None
        if not m:
            raise PlanError(f"not an action: {text!r} (expected e.g. '2F0', '0SEND_B3', '1OPT')")
        stage, kind_text, mb = m.groups()
        try:
            kind = Kind(kind_text)
        except ValueError:
            raise PlanError(
                f"not an action: {text!r}: unknown kind {kind_text!r} (known: {', '.join(k.value for k in Kind)})"
            ) from None
        needs_mb = kind not in STEP_KINDS
        if needs_mb and mb == "":
            raise PlanError(f"not an action: {text!r}: kind {kind_text} needs a micro-batch index")
        if not needs_mb and mb != "":
            raise PlanError(f"not an action: {text!r}: kind {kind_text} takes no micro-batch index")
        if kind is Kind.OVERLAP_F_B:
            raise PlanError(f"not an action: {text!r}: an overlapped action is written (F;B)OVERLAP_F_B, e.g. "
                            "'(0F3;3B1)OVERLAP_F_B'")
        return cls(int(stage), kind, int(mb) if mb else None)


_OVERLAP_RE = re.compile(r"^\(([^;()]+);([^;()]+)\)OVERLAP_F_B$")


#: ``new_action((stage, kind, microbatch))``: an Action from a tuple without NamedTuple's Python-level
#: ``__new__`` (for the passes that make hundreds of thousands of them)
new_action = partial(tuple.__new__, Action)


class Overlap(NamedTuple):
    """A forward and a backward of two micro-batches run as one compute action on one rank
    (DualPipe, DualPipeV): each part's communication can hide under the other's compute. Its
    fields are ordered so that it unpacks like an Action: ``forward, kind, backward = a``."""

    forward: Action  #: an F
    kind: Kind  #: always Kind.OVERLAP_F_B
    backward: Action  #: a B or an I

    @classmethod
    def of(cls, forward: Action, backward: Action) -> Overlap:
        if forward.kind is not Kind.F or backward.kind not in (Kind.B, Kind.I):
            raise PlanError(f"an overlapped action holds a forward and a backward (B or I), got {forward} and "
                            f"{backward}")
        return cls(forward, Kind.OVERLAP_F_B, backward)

    @property
    def stage(self) -> int:
        """The forward's stage (both parts run on one rank)."""
        return self.forward.stage

    @property
    def microbatch(self) -> None:
        return None

    @property
    def parts(self) -> tuple[Action, Action]:
        return self.forward, self.backward

    @property
    def lane(self) -> Lane:
        return "compute"

    def __str__(self) -> str:
        return f"({self.forward};{self.backward}){Kind.OVERLAP_F_B.value}"

    @classmethod
    def parse(cls, text: str) -> Overlap:
        m = _OVERLAP_RE.match(text.strip())
        if not m:
            raise PlanError(f"not an action: {text!r} (an overlapped action is written e.g. '(0F3;3B1)OVERLAP_F_B')")
        return cls.of(Action.parse(m.group(1)), Action.parse(m.group(2)))


# ----- communication: the two ends of a message ------------------------------------------------
_MATCHING_KIND = {Kind.SEND_F: Kind.RECV_F, Kind.RECV_F: Kind.SEND_F, Kind.SEND_B: Kind.RECV_B,
                  Kind.RECV_B: Kind.SEND_B}


def message_kinds(producer: Action) -> tuple[Kind, Kind]:
    """(send kind, receive kind) of the message carrying ``producer``'s output to another stage."""
    return (Kind.SEND_F, Kind.RECV_F) if producer.kind is Kind.F else (Kind.SEND_B, Kind.RECV_B)


def peer_stage(a: Action) -> int:
    """The stage at the other end of a communication action."""
    if a.kind is Kind.SEND_F or a.kind is Kind.RECV_B:
        return a.stage + 1
    return a.stage - 1


def matching(a: Action) -> Action:
    """The other end of a send or receive."""
    return Action(peer_stage(a), _MATCHING_KIND[a.kind], a.microbatch)
