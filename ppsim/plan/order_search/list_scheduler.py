"""A list scheduler under a memory cap: every rank, whenever it is free, runs the ready action it
ranks first, on a timeline of the given durations and message latencies.

- an action is ready once the actions it needs have ended (plus the message's latency when they
  ran on another rank);
- a forward is only started if the rank's activations stay within its cap; a backward (or a
  weight grad, when the backward is split) frees its micro-batch's;
- a stage runs its forwards, its backwards and its weight grads each in micro-batch order, so a
  rank takes new micro-batches in order and the oldest one in flight can always go on: with one
  stage per rank and a cap of at least one micro-batch, the schedule cannot stall;
- among the ready actions a rank runs the one with the smallest ``priority``; with
  ``defer_weight_grads`` weight grads, which nothing waits for, run only when nothing else can
  (or to free memory);
- a rank never idles while it has a ready action it may run (no look-ahead).

It is one family of the ``auto`` search's orders (priority rules x caps, real costs). It returns None
when the cap leaves no rank anything to run (a deadlock of memory), so a caller can try another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ppsim.plan.action import Action, Kind
from ppsim.plan.deps import dependencies
from ppsim.plan.order_search.timeline import Timing

Priority = Callable[[Action], tuple[float, ...]]


def scheduled_needs(a: Action, n_stages: int, grads: dict[tuple[int, int | None], Kind]) -> list[Action]:
    """What ``a`` waits for in the list scheduler: what it consumes (the dependency rule,
    :func:`~ppsim.plan.deps.dependencies`), and the stage's previous action of its kind (micro-batches in order)."""
    s, k, mb = a
    out = [Action(s, k, mb - 1)] if mb else []
    return out + [Action(*d) for d in dependencies(a, n_stages, grads)]


def scheduled_users(a: Action, n_stages: int, m: int, backward: Kind) -> list[Action]:
    """What waits for ``a`` (``backward``: B, or I when the backward is split): the inverse of
    :func:`scheduled_needs`, written out in the order the scheduler learns of them (its ties are
    broken by that order; a test holds the two to each other)."""
    s, k, mb = a
    assert mb is not None  # only compute actions (F, B, I, W) are scheduled
    out = [Action(s, k, mb + 1)] if mb + 1 < m else []
    if k is Kind.F:
        return out + ([Action(s + 1, Kind.F, mb)] if s < n_stages - 1 else []) + [Action(s, backward, mb)]
    if k is Kind.W:
        return out
    if s > 0:
        out.append(Action(s - 1, backward, mb))
    if k is Kind.I:
        out.append(Action(s, Kind.W, mb))
    return out


def list_schedule(num_microbatches: int, stage_to_rank: Sequence[int], split_backward: bool, timing: Timing,
                  cap: Sequence[float], priority: Priority, *, defer_weight_grads: bool = True
                  ) -> tuple[list[list[Action]], float] | None:
    """Per-rank orders and the makespan of the timeline they were built on, or None when the
    memory cap stalls every rank."""
    n_stages, m = len(stage_to_rank), num_microbatches
    p = max(stage_to_rank) + 1
    backward = Kind.I if split_backward else Kind.B
    ends: dict[Action, float] = {}
    waiting_on: dict[Action, int] = {}
    known: list[list[tuple[Action, float]]] = [[] for _ in range(p)]  # actions whose inputs are all scheduled

    # every input grad is a B, or an I
    grads: dict[tuple[int, int | None], Kind] = {(s, mb): backward for s in range(n_stages) for mb in range(m)}

    def needs(a: Action) -> list[Action]:
        return scheduled_needs(a, n_stages, grads)

    def users(a: Action) -> list[Action]:
        return scheduled_users(a, n_stages, m, backward)

    def ready_at(a: Action) -> float:
        assert a.microbatch is not None
        r = stage_to_rank[a.stage]
        t = 0.0
        for d in needs(a):
            lag = 0.0 if stage_to_rank[d.stage] == r else timing.latency[min(d.stage, a.stage)]
            t = max(t, ends[d] + lag)
        return t

    kinds = (Kind.F, Kind.I, Kind.W) if split_backward else (Kind.F, Kind.B)
    total = 0
    for s in range(n_stages):
        for mb in range(m):
            for k in kinds:
                a = Action(s, k, mb)
                waiting_on[a] = len(needs(a))
                total += 1
                if waiting_on[a] == 0:
                    known[stage_to_rank[s]].append((a, 0.0))
    free_at = [0.0] * p
    held = [0.0] * p
    orders: list[list[Action]] = [[] for _ in range(p)]
    frees = Kind.W if split_backward else Kind.B
    inf = float("inf")

    def allowed(r: int, a: Action) -> bool:
        return a.kind is not Kind.F or held[r] + timing.activation[a.stage] <= cap[r] + 1e-9

    def next_start(r: int) -> float:
        """When rank r can next start an action (inf: nothing it may run is known yet)."""
        times = [t for a, t in known[r] if allowed(r, a)]
        return max(free_at[r], min(times)) if times else inf

    # when each rank can next start: only the rank that ran and those that learnt of new actions change
    start_at = [next_start(r) for r in range(p)]
    for _ in range(total):
        t = min(start_at)
        if t == inf:
            return None  # every rank is at its cap with nothing to free
        r = start_at.index(t)
        runnable = [(a, ta) for a, ta in known[r] if ta <= t + 1e-12 and allowed(r, a)]
        urgent = [x for x in runnable if x[0].kind is not Kind.W] if defer_weight_grads else runnable
        chosen = min(urgent or runnable, key=lambda x: priority(x[0]))
        a = chosen[0]
        known[r].remove(chosen)
        end = t + timing.duration(a)
        ends[a] = end
        free_at[r] = end
        orders[r].append(a)
        if a.kind is Kind.F:
            held[r] += timing.activation[a.stage]
        elif a.kind is frees:
            held[r] -= timing.activation[a.stage]
        changed = {r}
        for u in users(a):
            waiting_on[u] -= 1
            if waiting_on[u] == 0:
                ur = stage_to_rank[u.stage]
                known[ur].append((u, ready_at(u)))
                changed.add(ur)
        for q in changed:
            start_at[q] = next_start(q)
    return orders, max(free_at)
