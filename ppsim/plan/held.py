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
from ppsim.plan.memo import per_plan
from ppsim.plan.plan import Plan

_TRAINING_KINDS = BACKWARD_KINDS | {Kind.OVERLAP_F_B}


def trains(plan: Plan) -> bool:
    """Whether the plan runs a backward: a forward-only plan keeps no activations past each forward
    (no backward needs them) and no gradients or optimizer state."""
    return not plan.kinds().isdisjoint(_TRAINING_KINDS)


@per_plan
def _split(plan: Plan) -> frozenset[int]:
    """The stages whose backward is split: their input grad keeps the activations for the weight grad."""
    return frozenset(a.stage for r, actions in enumerate(plan.actions) if Kind.W in plan.kinds(r)
                     for a in actions if a.kind is Kind.W)  # (a W is never inside an overlap)


def held_deltas(plan: Plan, per_stage: Sequence[float]) -> dict[tuple[int, Kind], tuple[float, float]]:
    """(held at its start, freed at its end, negative) of each (stage, kind) that computes, when a
    micro-batch of stage s holds ``per_stage[s]`` (bytes, or any unit)."""
    split = _split(plan)
    keeps = trains(plan)  # forward-only: a forward's activations are in flight during it only
    out: dict[tuple[int, Kind], tuple[float, float]] = {}
    for st, held in enumerate(per_stage):
        out[(st, Kind.F)] = (held, 0 if keeps else -held)
        out[(st, Kind.B)] = (0, -held)
        out[(st, Kind.I)] = (0, 0 if st in split else -held)
        out[(st, Kind.W)] = (0, -held)
        out[(st, Kind.OPT)] = (0, 0)
    return out


Counts = tuple[int, ...]  #: micro-batches held per stage of a rank, in the order of plan.stages_of_rank


@per_plan
def _peak_counts(plan: Plan) -> tuple[tuple[Counts, ...], ...]:
    """Per rank, the micro-batches of each of its stages held at every moment that could be its peak
    (right after a forward allocates), less those another such moment holds as many or more of in
    every stage: whatever each stage's micro-batch holds, the peak is one of these."""
    deltas = held_deltas(plan, [1] * plan.num_stages)
    out = []
    for r, actions in enumerate(plan.actions):
        index = {s: i for i, s in enumerate(plan.stages_of_rank(r))}
        held = [0] * len(index)
        moments: set[Counts] = set()
        for a in actions:
            if a.kind is Kind.OVERLAP_F_B:  # the forward's activations at its start, the backward's freed at its end
                f, b = a.parts
                grow, shrink = (f.stage, deltas[(f.stage, f.kind)][0]), (b.stage, deltas[(b.stage, b.kind)][1])
            else:
                op = deltas.get((a.stage, a.kind))
                if op is None:
                    continue
                grow, shrink = (a.stage, op[0]), (a.stage, op[1])
            if grow[1]:
                held[index[grow[0]]] += grow[1]
                moments.add(tuple(held))
            if shrink[1]:
                held[index[shrink[0]]] += shrink[1]
        out.append(_undominated(moments) or ((0,) * len(index),))
    return tuple(out)


def _undominated(moments: set[Counts]) -> tuple[Counts, ...]:
    """The moments no other holds as many or more of in every stage (one stage: the largest)."""
    if not moments:
        return ()
    if len(next(iter(moments))) == 1:
        return (max(moments),)
    kept: list[Counts] = []
    for m in sorted(moments, key=sum, reverse=True):  # a dominating moment has the larger sum: it comes first
        if not any(all(x >= y for x, y in zip(o, m)) for o in kept):
            kept.append(m)
    return tuple(kept)


def peak_held(plan: Plan, per_stage: Sequence[float]) -> list[float]:
    """Each rank's most held at once when a micro-batch of stage s holds ``per_stage[s]``."""
    peaks = []
    for r, moments in enumerate(_peak_counts(plan)):
        sizes = [per_stage[s] for s in plan.stages_of_rank(r)]
        peaks.append(max(sum(n * size for n, size in zip(m, sizes)) for m in moments))
    return peaks
