"""The rules every pass over a plan follows, written once.

- **What a compute action needs and makes** (the dependency rule). A forward (F) needs the previous
  stage's forward of its micro-batch; a backward, whole (B) or its input-grad half (I), needs its own
  forward and the next stage's input grad; a weight grad (W) needs its own I. A forward makes its
  activations; a B makes its input grad; an I makes its input grad and lets its W run.
- **Which message carries what**: an output another rank needs goes in a send right after the
  action that made it and a receive right before the action that needs it (activations forward,
  input grads backward).
- **How the passes number these facts**: three blocks of flags, one per :class:`Fact`, each indexed
  ``stage * microbatches + microbatch`` (:class:`FlagLayout`); a message is known by the flag of what
  it carries.
- **Whether a plan trains**: it runs some backward piece.

The hot loops of lowering (:mod:`ppsim.plan.posted`) keep their arithmetic written out for the plain
kinds, at C speed; their general paths, :func:`~ppsim.plan.deps.dependencies`, the list scheduler
and the checks read these tables, and tests hold the written-out paths to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from ppsim.plan.action import BACKWARD_KINDS, Kind


class Fact(IntEnum):
    """What a compute action makes that another waits for (the block of its flag)."""

    FORWARD = 0  #: the stage's forward of the micro-batch is done: its activations exist
    INPUT_GRAD = 1  #: its input-grad half (I) is done: its weight grad may run
    GRAD_MADE = 2  #: the grad of its input exists (made by a B or an I): the previous stage's backward may run


#: per compute kind, what it needs: (the stage's offset, the fact there); a stage out of range needs nothing
NEEDS: dict[Kind, tuple[tuple[int, Fact], ...]] = {
    Kind.F: ((-1, Fact.FORWARD),),
    Kind.B: ((0, Fact.FORWARD), (+1, Fact.GRAD_MADE)),
    Kind.I: ((0, Fact.FORWARD), (+1, Fact.GRAD_MADE)),
    Kind.W: ((0, Fact.INPUT_GRAD),),
}
#: per compute kind, what it makes
MAKES: dict[Kind, tuple[Fact, ...]] = {
    Kind.F: (Fact.FORWARD,),
    Kind.B: (Fact.GRAD_MADE,),
    Kind.I: (Fact.INPUT_GRAD, Fact.GRAD_MADE),
    Kind.W: (),
}
#: a fact another stage needs travels in a message: its send and receive kinds, and which way it
#: goes (+1: to the next stage; activations forward, input grads backward)
MESSAGES: dict[Fact, tuple[Kind, Kind, int]] = {Fact.FORWARD: (Kind.SEND_F, Kind.RECV_F, +1),
                                                Fact.GRAD_MADE: (Kind.SEND_B, Kind.RECV_B, -1)}
#: per compute kind, the receives right before it: (receive kind, the sending stage's offset, the fact it carries)
RECEIVES: dict[Kind, tuple[tuple[Kind, int, Fact], ...]] = {
    kind: tuple((MESSAGES[fact][1], offset, fact) for offset, fact in needs if offset) for kind, needs in NEEDS.items()}
#: per compute kind, the sends right after it: (send kind, the receiving stage's offset, the fact it carries)
SENDS: dict[Kind, tuple[tuple[Kind, int, Fact], ...]] = {
    kind: tuple((MESSAGES[fact][0], MESSAGES[fact][2], fact) for fact in makes if fact in MESSAGES)
    for kind, makes in MAKES.items()}
#: the kinds that make a plan a training step (a forward-only plan runs none)
TRAINING_KINDS = BACKWARD_KINDS | {Kind.OVERLAP_F_B}


def is_training(kinds: Iterable[Kind]) -> bool:
    """Whether a plan running ``kinds`` trains (runs a backward)."""
    return not TRAINING_KINDS.isdisjoint(kinds)


@dataclass(frozen=True)
class FlagLayout:
    """The flags of a plan's facts: block ``fact`` holds one per (stage, micro-batch)."""

    stages: int
    microbatches: int

    @property
    def size(self) -> int:
        """Flags in one block."""
        return self.stages * self.microbatches

    @property
    def total(self) -> int:
        """Flags in all blocks."""
        return len(Fact) * self.size

    def block(self, fact: Fact) -> int:
        """The first flag of ``fact``'s block."""
        return int(fact) * self.size

    def flag(self, fact: Fact, stage: int, microbatch: int) -> int:
        """The flag of ``fact`` of ``stage``'s ``microbatch``."""
        return int(fact) * self.size + stage * self.microbatches + microbatch
