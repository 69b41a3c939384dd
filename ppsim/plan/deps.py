"""What a compute action needs, and the ideal timeline of a plan: every action as soon as its rank
is free and its inputs exist, communication free.

The ideal timeline places messages when a plan is lowered (:mod:`ppsim.plan.lower`) and numbers
the unit steps of the grid picture (:mod:`ppsim.plan.grid`); a plan whose dependencies form a
cycle cannot finish and is refused with the grid.
"""

from __future__ import annotations

from collections.abc import Callable

from ppsim.errors import PlanError
from ppsim.plan.action import Action, Kind, Overlap
from ppsim.plan.memo import per_plan
from ppsim.plan.plan import Plan

Duration = Callable[[Action], float]  #: how long a compute action takes (any unit)
Time = tuple[float, int]  #: (time, depth): depth breaks ties so that an output always follows its input
#: an action as a plain (stage, kind, micro-batch) tuple: equal to, and hashed like, the Action
Key = tuple[int, Kind, int | None]

#: relative durations used when no costs are given: a transformer's backward is twice its forward
DEFAULT_WEIGHTS = {Kind.F: 1.0, Kind.B: 2.0, Kind.I: 1.0, Kind.W: 1.0}



def default_duration(a: Action) -> float:
    """The relative weight of ``a``; an overlapped action, the sum of its parts' (nothing hidden)."""
    if a.kind is Kind.OVERLAP_F_B:
        return sum(DEFAULT_WEIGHTS[x.kind] for x in a.parts)
    return DEFAULT_WEIGHTS.get(a.kind, 0.0)


def grad_producers(plan: Plan) -> dict[tuple[int, int | None], Kind]:
    """For every (stage, micro-batch): the kind that produces its input grad (B or I)."""
    B, I, OVERLAP = Kind.B, Kind.I, Kind.OVERLAP_F_B
    out = {(a.stage, a.microbatch): a.kind for r in plan.actions for a in r if a.kind is B or a.kind is I}
    for r in plan.actions:
        for a in r:
            if a.kind is OVERLAP:
                assert isinstance(a, Overlap)  # the one kind of action that is an Overlap
                b = a.backward
                out[(b.stage, b.microbatch)] = b.kind
    return out


_F, _B, _I, _W, _OVERLAP = Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B  # an enum's members, read once


def dependencies(a: Key, per_pipe: int, grads: dict[tuple[int, int | None], Kind]) -> tuple[Key, ...]:
    """The compute actions whose output ``a`` consumes: the previous stage's forward (F), the own
    forward and the next stage's input grad (B, I), the own input grad (W). ``per_pipe``: the
    stages a micro-batch runs through (:attr:`~ppsim.plan.plan.Plan.stages_per_pipe`; a pipe's
    first stage needs no forward, its last no input grad). They come as plain tuples (this runs
    for every action of every pass); ``Action(*d)`` when attributes are wanted. An overlapped
    action needs what either of its parts needs. The rule is :data:`ppsim.plan.rules.NEEDS`,
    written out here for speed (it runs once per action of every timeline); a test holds the two to
    the same answers."""
    s, kind, mb = a
    if kind is _F:
        return ((s - 1, kind, mb),) if s % per_pipe else ()
    if kind is _B or kind is _I:
        if s % per_pipe < per_pipe - 1:
            return (s, _F, mb), (s + 1, grads.get((s + 1, mb), _B), mb)
        return ((s, _F, mb),)
    if kind is _W:
        return ((s, _I, mb),)
    if kind is _OVERLAP:  # (forward, kind, backward): its parts never feed each other (validated)
        # an Overlap unpacks as (forward, kind, backward): s and mb are its parts
        return dependencies(s, per_pipe, grads) + dependencies(mb, per_pipe, grads)  # type: ignore[arg-type]  # Overlap parts
    return ()


#: the delay of the message carrying a compute action's output (given as its key) to another rank
Latency = Callable[[Key], float]


@per_plan(kept=8)
def _needs(plan: Plan) -> tuple[tuple[tuple[tuple[Key, ...], tuple[Action, ...]], ...], ...]:
    """Per rank, for each of its actions in order: its :func:`dependencies` and the plain actions it
    makes (itself; an overlap's two parts). A search times one plan on many cost tables."""
    per_pipe, grads = plan.stages_per_pipe, grad_producers(plan)
    return tuple(tuple((dependencies(a, per_pipe, grads), a.parts) for a in ra) for ra in plan.actions)


def ideal_times(plan: Plan, duration: Duration = default_duration, latency: Latency | None = None
                ) -> tuple[list[list[Time]], list[list[Time]]]:
    """Start and end of every action when each starts as soon as its rank is free and its inputs
    exist, communication being free (or, with ``latency``, each input from another rank arriving
    that long after it was made). Times are (time, depth) pairs compared in order, where every
    action adds its duration and one to the depth, so an action ends strictly after it starts even
    when it takes no time. Raises PlanError with the grid if the plan can never finish (a cycle of
    dependencies)."""
    from ppsim.plan.grid import render_grid

    acts = plan.actions
    needs = _needs(plan)
    zero: Time = (0.0, 0)
    starts: list[list[Time]] = [[zero] * len(r) for r in acts]
    ends: list[list[Time]] = [[zero] * len(r) for r in acts]
    done: dict[Key, Time] = {}
    pos = [0] * len(acts)
    waiting: dict[Key, list[int]] = {}
    work = list(range(len(acts)))
    finished = done.get
    where = plan.stage_to_rank
    took = [[duration(a) for a in ra] for ra in acts]  # each action's time, asked once
    while work:
        r = work.pop()
        n = len(acts[r])
        i = pos[r]
        free = ends[r][i - 1] if i else zero
        rank_starts, rank_ends, rank_needs, rank_took = starts[r], ends[r], needs[r], took[r]
        while i < n:
            start = free
            deps, made = rank_needs[i]
            for d in deps:
                t = finished(d)
                if t is None:  # wait for d: its rank wakes this one when d is done
                    waiting.setdefault(d, []).append(r)
                    break
                if latency is not None and where[d[0]] != r:
                    t = (t[0] + latency(d), t[1])
                if t > start:
                    start = t
            else:
                free = (start[0] + rank_took[i], start[1] + 1)
                rank_starts[i] = start
                rank_ends[i] = free
                i += 1
                for part in made:
                    done[part] = free
                    if waiting:
                        woken = waiting.pop(part, None)
                        if woken:
                            work.extend(woken)
                continue
            break
        pos[r] = i
    marks = {r: pos[r] for r in range(len(acts)) if pos[r] < len(acts[r])}
    if marks:
        stuck = ", ".join(f"rank {r} at {acts[r][i]}" for r, i in marks.items())
        raise PlanError(f"plan {plan.schedule!r} cannot finish: every remaining action waits on another ({stuck})",
                        detail=render_grid(acts, marks))
    return starts, ends


def number_steps(plan: Plan) -> list[list[int]]:
    """The unit step of every action: the ideal timeline when every action takes one step."""
    starts, _ = ideal_times(plan, lambda a: 1.0)
    return [[int(t[0]) for t in r] for r in starts]
