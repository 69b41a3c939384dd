"""The timeline of per-rank orders of one stage per rank: every action as soon as its rank is free
and its inputs have arrived (each message its latency), with, for each action, what it waited for.

The search scores and improves orders on it. It reads the dependency rule
(:func:`ppsim.plan.deps.dependencies`) and the :class:`Timing`; it adds no rule of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppsim.plan.action import Action, Kind
from ppsim.plan.deps import dependencies
from ppsim.plan.held import peak_held
from ppsim.plan.plan import Plan
from ppsim.plan.schedules import SEARCHED
from ppsim.plan.schedules.base import make_plan

Orders = Sequence[Sequence[Action]]  #: per rank, the compute actions in the order it runs them
Key = tuple[int, Kind, int | None]  #: an action as a plain tuple (equal to, and hashed like, the Action)


@dataclass(frozen=True)
class Timing:
    """What the search knows of the costs, all in one unit (ms, or unit steps)."""

    forward: Sequence[float]  #: per virtual stage
    backward: Sequence[float]  #: full backward B, per stage
    input_grad: Sequence[float]  #: I, per stage
    weight_grad: Sequence[float]  #: W, per stage
    latency: Sequence[float]  #: per stage boundary (s, s + 1), both directions
    activation: Sequence[float]  #: held from a micro-batch's F to its B (or W), per stage

    @classmethod
    def unit(cls, num_stages: int) -> Timing:
        """F = I = W = 1 (B = 2), free messages, one unit of memory per stage and micro-batch."""
        ones = [1.0] * num_stages
        return cls(ones, [2.0] * num_stages, ones, ones, [0.0] * max(1, num_stages - 1), ones)

    def by_kind(self) -> dict[Kind, Sequence[float]]:
        """Each compute kind's durations, per stage."""
        return {Kind.F: self.forward, Kind.B: self.backward, Kind.I: self.input_grad, Kind.W: self.weight_grad}

    def duration(self, a: Action) -> float:
        return self.by_kind()[a.kind][a.stage]


@dataclass(frozen=True)
class Timeline:
    """Start and end of every action (per rank, in order) and, for each, the action on another rank
    whose message it waited for (None: it started when its rank was free)."""

    starts: list[list[float]]
    ends: list[list[float]]
    waited_for: list[list[Key | None]]

    @property
    def makespan(self) -> float:
        return max((e[-1] for e in self.ends if e), default=0.0)

    def rank_spans(self) -> list[float]:
        """Each rank's end (its first action starts at or after 0)."""
        return [e[-1] if e else 0.0 for e in self.ends]


def timeline(orders: Orders, timing: Timing) -> Timeline | None:
    """The timeline of ``orders`` on one stage per rank, or None when they cannot finish (an action
    waits for one that comes later on its own rank, directly or through other ranks)."""
    p = len(orders)
    grads: dict[tuple[int, int | None], Kind] = {(a.stage, a.microbatch): a.kind for o in orders for a in o
                                                 if a.kind is Kind.B or a.kind is Kind.I}
    took = timing.by_kind()
    latency = timing.latency
    done: dict[Key, float] = {}
    starts: list[list[float]] = [[] for _ in range(p)]
    ends: list[list[float]] = [[] for _ in range(p)]
    waited: list[list[Key | None]] = [[] for _ in range(p)]
    pos = [0] * p
    left = sum(len(o) for o in orders)
    down, up = range(p), range(p - 1, -1, -1)
    sweep = 0
    while left:  # sweeps down and up the ranks in turn: forwards flow down, grads up
        moved = False
        sweep += 1
        for r in (down if sweep % 2 else up):
            order, i, n = orders[r], pos[r], len(orders[r])
            rank_starts, rank_ends, rank_waited = starts[r], ends[r], waited[r]
            free = rank_ends[-1] if i else 0.0
            while i < n:
                a = order[i]
                s = a[0]
                start: float = free
                why: Key | None = None
                for d in dependencies(a, p, grads):
                    t = done.get(d)
                    if t is None:
                        break
                    if d[0] != s:
                        t += latency[d[0] if d[0] < s else s]
                        if t > start:
                            start, why = t, d
                else:
                    end = start + took[a[1]][s]
                    done[a] = end
                    rank_starts.append(start)
                    rank_ends.append(end)
                    rank_waited.append(why)
                    free = end
                    i += 1
                    continue
                break
            if i != pos[r]:
                left -= i - pos[r]
                pos[r] = i
                moved = True
        if not moved:
            return None
    return Timeline(starts, ends, waited)


def as_plan(orders: Orders) -> Plan:
    """The orders as a compute-only plan of one stage per rank (named after the search)."""
    m = sum(1 for a in orders[0] if a.kind is Kind.F) if orders else 0
    return make_plan(SEARCHED, len(orders), m, 1, [list(o) for o in orders])


def fits(orders: Orders, timing: Timing, budget: Sequence[float]) -> bool:
    """Whether every rank's activations stay within its budget (the rule of :mod:`ppsim.plan.held`)."""
    return all(h <= b + 1e-9 for h, b in zip(peak_held(as_plan(orders), timing.activation), budget, strict=True))
