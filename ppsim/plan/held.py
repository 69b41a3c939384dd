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
from typing import TypeVar

from ppsim.plan.action import Kind
from ppsim.plan.memo import per_plan
from ppsim.plan.plan import Plan
from ppsim.plan.rules import is_training

#: the unit of what a micro-batch holds: micro-batches (int) or bytes (int or float)
Unit = TypeVar("Unit", int, float)


def trains(plan: Plan) -> bool:
    """Whether the plan runs a backward: a forward-only plan keeps no activations past each forward
    (no backward needs them) and no gradients or optimizer state."""
    return is_training(plan.kinds())


@per_plan
def _split(plan: Plan) -> frozenset[int]:
    """The stages whose backward is split: their input grad keeps the activations for the weight grad."""
    W = Kind.W
    return frozenset(a[0] for r, actions in enumerate(plan.actions) if W in plan.kinds(r)
                     for a in actions if a[1] is W)  # (a W is never inside an overlap)


def held_deltas(plan: Plan, per_stage: Sequence[Unit]) -> dict[tuple[int, Kind], tuple[Unit, Unit]]:
    """(held at its start, freed at its end, negative) of each (stage, kind) that computes, when a
    micro-batch of stage s holds ``per_stage[s]`` (bytes, or any unit)."""
    split = _split(plan)
    keeps = trains(plan)  # forward-only: a forward's activations are in flight during it only
    out: dict[tuple[int, Kind], tuple[Unit, Unit]] = {}
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
    OVERLAP = Kind.OVERLAP_F_B
    out: list[tuple[Counts, ...]] = []
    for r, actions in enumerate(plan.actions):
        stages = plan.stages_of_rank(r)
        # per (stage, kind): (the stage's place on the rank, held at its start, freed at its end)
        steps = {key: (stages.index(key[0]), grow, shrink) for key, (grow, shrink) in deltas.items()
                 if key[0] in stages}
        if len(stages) == 1 and OVERLAP not in plan.kinds(r):  # one counter: the peak is its largest value
            by_kind = {k: (grow, shrink) for (_, k), (_, grow, shrink) in steps.items()}
            held = most = 0
            for a in actions:
                op = by_kind.get(a[1])
                if op is not None:
                    grow, shrink = op
                    if grow:
                        held += grow
                        if held > most:
                            most = held
                    held += shrink
            out.append(((most,),))
            continue
        counts = [0] * len(stages)
        moments: set[Counts] = set()
        for a in actions:
            if a[1] is OVERLAP:  # the forward's activations at its start, the backward's freed at its end
                f, b = a.parts
                at, grow, _ = steps[(f[0], f[1])]
                if grow:
                    counts[at] += grow
                    moments.add(tuple(counts))
                at, _, shrink = steps[(b[0], b[1])]
                counts[at] += shrink
                continue
            step = steps.get((a[0], a[1]))
            if step is None:
                continue
            at, grow, shrink = step
            if grow:
                counts[at] += grow
                moments.add(tuple(counts))
            counts[at] += shrink
        out.append(_undominated(moments) or ((0,) * len(stages),))
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
