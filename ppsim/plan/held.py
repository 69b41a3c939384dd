"""What a rank holds as its actions run, in any unit per stage and micro-batch (bytes of
activations, micro-batches): a forward takes its micro-batch's share of its stage (in a plan
without backward, only while it runs); the backward frees it (or, when the backward is split, the
weight-grad half does, or, through a weight-gradient store, the input-grad half); a split
backward's input grad takes besides what the weight grad reads from it (a second size per stage:
the weight ops' output gradients, or the store's inputs and gradients), which the weight grad frees;
an overlapped forward and backward takes the forward's at its start and
frees the backward's at its end. A rank runs one
action at a time in plan order, so what it holds after each action, and its peak, depend on that
order alone: the simulator's memory counters and the exact peak without simulating both use this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from ppsim.plan.action import Action, Kind
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
    """The stages whose backward is split into an input grad and a weight grad."""
    W = Kind.W
    return frozenset(a[0] for r, actions in enumerate(plan.actions) if W in plan.kinds(r)
                     for a in actions if a[1] is W)  # (a W is never inside an overlap)


def held_deltas(plan: Plan, per_stage: Sequence[Unit], pending: Sequence[Unit] | None = None,
                frees: bool = False) -> dict[tuple[int, Kind], tuple[Unit, Unit]]:
    """(held at its start, freed at its end, negative) of each (stage, kind) that computes, when a
    micro-batch of stage s holds ``per_stage[s]`` (bytes, or any unit) from its forward to its
    backward, and ``pending[s]`` more from a split backward's input grad to its weight grad (with
    ``frees``, the input grad frees the forward's share at its end)."""
    return {key: (sum(grow for _, grow, _ in parts), sum(shrink for _, _, shrink in parts))
            for key, parts in _slot_steps(plan, per_stage, pending, frees).items()}


#: per (stage, kind): (counter, held at its start, freed at its end) of each counter it moves
Steps = dict[tuple[int, Kind], tuple[tuple[int, Unit, Unit], ...]]
UnitSteps = Steps[int]  #: in micro-batches (the counts of :func:`_peak_counts`)


def _slot_steps(plan: Plan, per_stage: Sequence[Unit], pending: Sequence[Unit] | None = None,
                frees: bool = False) -> Steps[Unit]:
    """What each (stage, kind) does to two counters per stage: 2s, its micro-batches' activations
    (``per_stage[s]`` each), and 2s + 1, what a split backward's input grad leaves for its weight
    grad (``pending[s]`` each; none unless the stage's backward is split). With ``frees`` (a
    weight-gradient store) the input grad frees the activations, else the weight grad does."""
    split = _split(plan)
    keeps = trains(plan)  # forward-only: a forward's activations are in flight during it only
    out: Steps[Unit] = {}
    for st, held in enumerate(per_stage):
        left = pending[st] if pending is not None and st in split else 0
        acts, grads = 2 * st, 2 * st + 1
        out[(st, Kind.F)] = ((acts, held, 0 if keeps else -held),)
        out[(st, Kind.B)] = ((acts, 0, -held),)
        kept = 0 if frees else -held  # what the weight grad frees of the forward's share
        out[(st, Kind.I)] = ((acts, 0, -held - kept), (grads, left, 0)) if st in split else ((acts, 0, -held),)
        out[(st, Kind.W)] = ((acts, 0, kept), (grads, 0, -left))
        out[(st, Kind.OPT)] = ((acts, 0, 0),)
    return out


Counts = tuple[int, ...]  #: micro-batches on each counter of a rank (two per stage, plan.stages_of_rank's order)


@per_plan
def _peak_counts(plan: Plan, frees: bool = False, layerwise: bool = False) -> tuple[tuple[Counts, ...], ...]:
    """Per rank, the micro-batches on each of its counters (two per stage: activations, and the
    gradients between a split backward's halves) at every moment that could be its peak (right
    after an action takes memory), less those another such moment holds as many or more of on
    every counter: whatever each counter's micro-batch holds, the peak is one of these. An
    overlapped forward and backward takes the forward's at its start and frees the backward's at
    its end, or (``layerwise``) turns the one into the other through the action: only its end counts."""
    ones = [1] * plan.num_stages
    steps_of = _slot_steps(plan, ones, ones, frees)
    OVERLAP = Kind.OVERLAP_F_B
    out: list[tuple[Counts, ...]] = []
    for r, actions in enumerate(plan.actions):
        stages = plan.stages_of_rank(r)
        place = {2 * st + half: 2 * i + half for i, st in enumerate(stages) for half in (0, 1)}
        # per (stage, kind): (the counter's place on the rank, held at its start, freed at its end) of each
        steps = {key: tuple((place[slot], grow, shrink) for slot, grow, shrink in parts)
                 for key, parts in steps_of.items() if key[0] in stages}
        if len(stages) == 1 and OVERLAP not in plan.kinds(r) and stages[0] not in _split(plan):
            out.append(((_most_held(actions, steps), 0),))  # one counter moves: the peak is its largest value
            continue
        counts = [0] * (2 * len(stages))
        moments: set[Counts] = set()
        for a in actions:
            if a[1] is OVERLAP and layerwise:  # both passes' changes at its end
                f, b = a.parts
                for at, grow, shrink in steps[(f[0], f[1])] + steps[(b[0], b[1])]:
                    counts[at] += grow + shrink
                moments.add(tuple(counts))
                continue
            if a[1] is OVERLAP:  # the forward's activations at its start, the backward's freed at its end
                f, b = a.parts
                parts = steps[(f[0], f[1])] + tuple((at, grow, 0) for at, grow, _ in steps[(b[0], b[1])])
                released = tuple((at, 0, shrink) for at, _, shrink in steps[(b[0], b[1])])
            else:
                parts = steps.get((a[0], a[1]), ())
                released = ()
            grew = False
            for at, grow, _ in parts:
                if grow:
                    counts[at] += grow
                    grew = True
            if grew:
                moments.add(tuple(counts))
            for at, _, shrink in parts + released:
                counts[at] += shrink
        out.append(_undominated(moments) or ((0,) * len(counts),))
    return tuple(out)


def _most_held(actions: Sequence[Action], steps: UnitSteps) -> int:
    """The largest value of a rank's one moving counter (its one stage's activations)."""
    held = most = 0
    for a in actions:
        for _, grow, shrink in steps.get((a[0], a[1]), ()):
            if grow:
                held += grow
                most = max(most, held)
            held += shrink
    return most


def _undominated(moments: set[Counts]) -> tuple[Counts, ...]:
    """The moments no other holds as many or more of on every counter."""
    if not moments:
        return ()
    kept: list[Counts] = []
    for m in sorted(moments, key=sum, reverse=True):  # a dominating moment has the larger sum: it comes first
        if not any(all(x >= y for x, y in zip(o, m)) for o in kept):
            kept.append(m)
    return tuple(kept)


def peak_held(plan: Plan, per_stage: Sequence[float], pending: Sequence[float] | None = None,
              frees: bool = False, layerwise: bool = False) -> list[float]:
    """Each rank's most held at once when a micro-batch of stage s holds ``per_stage[s]`` from its
    forward to its backward, and ``pending[s]`` more between a split backward's two halves (with
    ``frees``, the input grad frees the forward's share; ``layerwise``: overlapped passes
    interleave layer by layer, :func:`_peak_counts`)."""
    peaks = []
    for r, moments in enumerate(_peak_counts(plan, frees, layerwise)):
        sizes = [size for s in plan.stages_of_rank(r) for size in (per_stage[s], pending[s] if pending else 0.0)]
        peaks.append(max(sum(n * size for n, size in zip(m, sizes)) for m in moments))
    return peaks
