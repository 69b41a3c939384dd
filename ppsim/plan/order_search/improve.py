"""A local search that improves per-rank orders of one stage per rank on their own timeline.

It looks at the critical path (the chain of actions, each waiting for the one before it on its
rank or for its message, that ends last) and tries the moves that can shorten it: two neighbours
on the path that run on the same rank swap places (two different kinds: a stage's actions of one
kind stay in micro-batch order). A move is kept when the orders still finish, every rank stays
within its budget, and the step gets shorter — or as short, with the ranks ending earlier in sum
(which lets a later move shorten the step). It stops when no move helps or after ``tries``
timelines; deterministic, so the same orders always improve the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from ppsim.plan.action import Action
from ppsim.plan.order_search.timeline import Orders, Timeline, Timing, fits, timeline

Score = tuple[float, float]  #: (makespan, the ranks' ends summed)


def score(t: Timeline) -> Score:
    return t.makespan, sum(t.rank_spans())


def critical_pairs(t: Timeline, orders: Orders) -> list[tuple[int, int]]:
    """(rank, i): actions i - 1 and i of the rank are neighbours on the critical path, latest
    first."""
    ends = t.ends
    r = max(range(len(ends)), key=lambda q: ends[q][-1] if ends[q] else -1.0)
    i = len(ends[r]) - 1
    where = {a: (q, j) for q, o in enumerate(orders) for j, a in enumerate(o)}
    out = []
    while i >= 0:
        why = t.waited_for[r][i]
        if why is not None:
            r, i = where[Action(*why)]
            continue
        if i == 0 or t.starts[r][i] > t.ends[r][i - 1] + 1e-12:
            break
        out.append((r, i))
        i -= 1
    return out


def _swapped(orders: Orders, r: int, i: int) -> list[list[Action]] | None:
    """The orders with rank r's actions i - 1 and i swapped, or None when that breaks a stage's
    micro-batch order within a kind (or puts an action before its own input on the stage)."""
    a, b = orders[r][i - 1], orders[r][i]
    if a.kind is b.kind or a.microbatch == b.microbatch:
        return None
    out = [list(o) for o in orders]
    out[r][i - 1], out[r][i] = b, a
    return out


def improve(orders: Orders, timing: Timing, budget: Sequence[float], tries: int = 400
            ) -> tuple[list[list[Action]], Timeline, int]:
    """The improved orders, their timeline and how many moves were kept."""
    best = [list(o) for o in orders]
    now = timeline(best, timing)
    if now is None:
        raise ValueError("orders that cannot finish cannot be improved")
    kept = 0
    while tries > 0:
        current = score(now)
        for r, i in critical_pairs(now, best):
            moved = _swapped(best, r, i)
            if moved is None or not fits(moved, timing, budget):
                continue
            tries -= 1
            after = timeline(moved, timing)
            if after is not None and better(score(after), current):
                best, now, kept = moved, after, kept + 1
                break
            if tries <= 0:
                break
        else:
            break  # no move on the path helps
    return best, now, kept


def better(a: Score, b: Score) -> bool:
    """Whether ``a`` is a shorter step than ``b``, or as short with the ranks ending earlier in sum
    (by more than rounding)."""
    tol, sum_tol = 1e-9 * max(1.0, b[0]), 1e-9 * max(1.0, b[1])
    return a[0] < b[0] - tol or (a[0] <= b[0] + tol and a[1] < b[1] - sum_tol)
