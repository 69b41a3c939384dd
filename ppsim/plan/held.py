"""What a rank holds as its actions run, in any unit per stage and micro-batch (bytes of
activations, micro-batches): a forward takes its micro-batch's share of its stage (in a plan
without backward, only while it runs); the backward frees it (or, when the backward is split, the
weight-grad half does); an overlapped forward and backward takes the forward's at its start and
frees the backward's at its end. A rank runs one
action at a time in plan order, so what it holds after each action, and its peak, depend on that
order alone: the simulator's memory counters and the exact peak without simulating both use this.
"""

from __future__ import annotations

from collections.abc import Sequence

from ppsim.plan.action import BACKWARD_KINDS, Kind
from ppsim.plan.plan import Plan

_TRAINING_KINDS = BACKWARD_KINDS | {Kind.OVERLAP_F_B}


def trains(plan: Plan) -> bool:
    """Whether the plan runs a backward: a forward-only plan keeps no activations past each forward
    (no backward needs them) and no gradients or optimizer state."""
    return not plan.kinds().isdisjoint(_TRAINING_KINDS)


def held_deltas(plan: Plan, per_stage: Sequence[float]) -> dict[tuple[int, Kind], tuple[float, float]]:
    """(held at its start, freed at its end, negative) of each (stage, kind) that computes, when a
    micro-batch of stage s holds ``per_stage[s]`` (bytes, or any unit)."""
    split = {a.stage for r, actions in enumerate(plan.actions) if Kind.W in plan.kinds(r)
             for a in actions if a.kind is Kind.W}  # (a W is never inside an overlap)
    keeps = trains(plan)  # forward-only: a forward's activations are in flight during it only
    out: dict[tuple[int, Kind], tuple[float, float]] = {}
    for st, held in enumerate(per_stage):
        out[(st, Kind.F)] = (held, 0 if keeps else -held)
        out[(st, Kind.B)] = (0, -held)
        out[(st, Kind.I)] = (0, 0 if st in split else -held)
        out[(st, Kind.W)] = (0, -held)
        out[(st, Kind.OPT)] = (0, 0)
    return out


def peak_held(plan: Plan, per_stage: Sequence[float]) -> list[float]:
    """Each rank's most held at once when a micro-batch of stage s holds ``per_stage[s]``."""
    deltas = held_deltas(plan, per_stage)
    peaks = []
    for actions in plan.actions:
        held = peak = 0
        for a in actions:
            if a.kind is Kind.OVERLAP_F_B:  # the forward's activations at its start, the backward's freed at its end
                f, b = a.parts
                op = (deltas[(f.stage, f.kind)][0], deltas[(b.stage, b.kind)][1])
            else:
                op = deltas.get((a.stage, a.kind))  # type: ignore[assignment]
                if op is None:
                    continue
            held += op[0]
            peak = max(peak, held)
            held += op[1]
        peaks.append(peak)
    return peaks
