"""The shortest per-rank orders of one stage per rank, by branch and bound, for plans small enough.

Orders are what a plan of one stage per rank chooses: each rank's sequence of forwards (F), input
grads (I) and weight grads (W). The search enumerates every such combination once:

- each stage runs each kind in micro-batch order. Micro-batches cost the same, so two of one kind
  on one stage can always trade places without delaying anything (swap their labels on every
  stage): some shortest plan keeps them in order;
- a rank decides its next action when its previous one ends, the earliest such rank first; the
  action starts when its rank is free and its inputs have arrived (the dependency rule of
  :func:`ppsim.plan.deps.dependencies`, written out here on plain integers for speed; the test that
  tries every order of small plans on :mod:`~ppsim.plan.order_search.timeline`, which reads that
  rule, holds the two to the same answers), messages their latency, so a combination of orders has
  exactly one timeline and one path through the search;
- a forward is allowed only while the rank holds fewer micro-batches than its budget allows
  (activations are held from F to the end of W, the rule of :mod:`ppsim.plan.held`).

A branch is cut when a bound says it cannot beat the best found (each rank's work left after the
present moment; a rank's last input grad followed by the ones below it), when its orders can no
longer finish, or when an earlier branch reached the same actions with every time no later
(dominance: any way to finish the later one finishes the earlier one no later). The search
returns the best orders found and whether it proved them shortest; it stops at ``nodes``
decisions without proof.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppsim.plan.action import Action, Kind
from ppsim.plan.order_search.bound import lower_bound
from ppsim.plan.order_search.timeline import Timing

F, I, W = 0, 1, 2  #: a rank's kinds, as indices
_KINDS = (Kind.F, Kind.I, Kind.W)
_NONE = -1.0  #: an end time not known yet


@dataclass(frozen=True)
class Exact:
    """What the exact search found: the best orders (None: none shorter than ``beat``), their
    makespan, whether no orders are shorter (``proven``), and how many decisions it took."""

    orders: list[list[Action]] | None
    makespan: float
    proven: bool
    nodes: int


def exact(p: int, m: int, timing: Timing, budget: Sequence[float], *, beat: float = float("inf"),
          nodes: int = 200_000) -> Exact:
    """The shortest orders of ``p`` ranks (one stage each) and ``m`` micro-batches within ``budget``
    (per rank, in the units of ``timing.activation``) that are shorter than ``beat``, on the
    timeline of :func:`~ppsim.plan.order_search.timeline.timeline`; proven unless ``nodes`` ran out."""
    floor = lower_bound(p, m, timing, budget)
    if beat <= floor * (1 + 1e-9):  # nothing can be shorter than what the caller has
        return Exact(None, beat, True, 0)
    return _Search(p, m, timing, budget, beat, nodes, floor).run()


class _Search:
    """The search's state, changed in place and undone on the way back (one object per search)."""

    def __init__(self, p: int, m: int, timing: Timing, budget: Sequence[float], beat: float, nodes: int,
                 floor: float) -> None:
        self.p, self.m = p, m
        self.took = [[timing.forward[s], timing.input_grad[s], timing.weight_grad[s]] for s in range(p)]
        self.lag = list(timing.latency) + [0.0]
        self.cap = [int(budget[s] / timing.activation[s] + 1e-9) for s in range(p)]
        self.ends = [[[_NONE] * m for _ in range(3)] for _ in range(p)]  # [stage][kind][micro-batch]
        self.est = [[[0.0] * m for _ in range(3)] for _ in range(p)]  # known or earliest ends (the bound's)
        self.count = [[0, 0, 0] for _ in range(p)]  # actions chosen per stage and kind
        self.free = [0.0] * p  # when each rank's last started action ends
        self.pending: list[int] = [-1] * p  # a chosen action waiting for its input (its kind), or -1
        self.left = [m * sum(row) for row in self.took]  # work each rank has not started
        self.best = beat
        self.best_orders: list[list[int]] | None = None
        self.floor = floor  #: no orders are shorter (bound.lower_bound): found it, stop
        self.order: list[list[int]] = [[] for _ in range(p)]  # kinds, in order (micro-batches follow)
        self.budget, self.nodes = nodes, 0
        # after stage s's last input grad: the input grads below it and stage 0's last weight grad
        self.below = [0.0] * p
        for s in range(1, p):
            self.below[s] = self.below[s - 1] + self.lag[s - 1] + self.took[s - 1][I] + (self.took[0][W] if s == 1 else 0)
        self.seen: dict[tuple[int, ...], list[tuple[float, ...]]] = {}
        self.complete = True

    def run(self) -> Exact:
        self._search()
        orders = None
        if self.best_orders is not None:
            orders = [[Action(s, _KINDS[k], mb) for k, mb in _with_microbatches(kinds)]
                      for s, kinds in enumerate(self.best_orders)]
        return Exact(orders, self.best, self.complete, self.nodes)

    # ----- the input an action waits for, and when it arrives ----------------------------------
    def _arrival(self, s: int, k: int, mb: int) -> float:
        """When the input of (s, k, mb) from another rank arrives (_NONE: not produced yet); 0 if none."""
        if k == F:
            if s == 0:
                return 0.0
            e = self.ends[s - 1][F][mb]
            return e + self.lag[s - 1] if e >= 0 else _NONE
        if k == I:
            if s == self.p - 1:
                return 0.0
            e = self.ends[s + 1][I][mb]
            return e + self.lag[s] if e >= 0 else _NONE
        return 0.0  # W waits only for its own I, on its own rank, which ran before it

    def _start(self, s: int, k: int, at: float) -> list[int]:
        """Start rank s's next action of kind k at ``at``; then every waiting action whose input this
        completes, in turn. Returns the stages started, for the undo."""
        started = [s]
        work = [(s, k, at)]
        while work:
            r, kind, t = work.pop()
            mb = self.count[r][kind] - 1
            end = t + self.took[r][kind]
            self.ends[r][kind][mb] = end
            self.free[r] = end
            self.left[r] -= self.took[r][kind]
            self.pending[r] = -1
            # a neighbour waiting for this output starts now
            for q, qk in ((r + 1, F), (r - 1, I)):
                if 0 <= q < self.p and self.pending[q] == qk and kind == qk and self.count[q][qk] - 1 == mb:
                    work.append((q, qk, max(self.free[q], end + self.lag[min(q, r)])))
                    started.append(q)
        return started

    def _undo(self, started: list[int], saved_free: list[float]) -> None:
        for r in reversed(started):
            kind = self.order[r][-1]
            self.ends[r][kind][self.count[r][kind] - 1] = _NONE
            self.left[r] += self.took[r][kind]
            self.pending[r] = kind
        self.free[:] = saved_free

    # ----- the search ------------------------------------------------------------------------
    def _search(self) -> None:
        self.nodes += 1
        if self.nodes > self.budget:
            self.complete = False
            return
        if self.best <= self.floor * (1 + 1e-9):
            return
        deciding = [r for r in range(self.p) if self.pending[r] < 0 and len(self.order[r]) < 3 * self.m]
        if not deciding:
            if any(x >= 0 for x in self.pending):
                return  # every unfinished rank waits for one that waits: these orders cannot finish
            makespan = max(self.free)
            if makespan < self.best - 1e-9:
                self.best, self.best_orders = makespan, [list(o) for o in self.order]
            return
        r = min(deciding, key=lambda q: (self.free[q], q))
        now = self.free[r]
        if (self._bound(now) >= self.best - 1e-9 or self._release_bound(now) >= self.best - 1e-9
                or self._dominated()):
            return
        n = self.count[r]
        options = []
        if n[I] < n[F]:
            options.append(I)
        if n[F] < self.m and n[F] - n[W] < self.cap[r]:
            options.append(F)
        if n[W] < n[I]:
            options.append(W)
        # what can start at once first (no idle), then what waits least: good orders early cut more
        options.sort(key=lambda k: (lambda t: (t < 0, max(t, now)))(self._arrival(r, k, n[k])))
        for k in options:
            mb = n[k]
            n[k] += 1
            self.order[r].append(k)
            arrival = self._arrival(r, k, mb)
            saved = list(self.free)
            if arrival < 0:
                self.pending[r] = k
                self._search()
                self.pending[r] = -1
            else:
                started = self._start(r, k, max(now, arrival))
                self._search()
                self._undo(started[1:], saved)
                self.ends[r][k][mb] = _NONE
                self.left[r] += self.took[r][k]
                self.free[:] = saved
            self.order[r].pop()
            n[k] -= 1
            if self.nodes > self.budget:
                return

    def _bound(self, now: float) -> float:
        """A makespan no completion of this branch can beat."""
        best = 0.0
        for r in range(self.p):
            waiting = self.pending[r]
            begin = max(self.free[r], now)
            left = self.left[r]
            best = max(best, begin + left if left > 0 else self.free[r])
            n = self.count[r]
            grads_left = self.m - n[I] + (1 if waiting == I else 0)
            if r > 0 and grads_left > 0:
                forwards_left = (self.m - n[F] + (1 if waiting == F else 0)) * self.took[r][F]
                best = max(best, begin + forwards_left + grads_left * self.took[r][I] + self.below[r])
        return best

    def _release_bound(self, now: float) -> float:
        """A makespan no completion can beat, sharper and dearer than :meth:`_bound`: the earliest
        each action not started can start (its rank free, its inputs in, the one before it of its
        kind, and for a forward the weight grad that frees its memory), and then on each rank the
        work released at or after any moment, run back to back from that moment."""
        p, m, took, lag, cap, ends, est = self.p, self.m, self.took, self.lag, self.cap, self.ends, self.est
        base = [self.free[r] if self.free[r] > now else now for r in range(p)]
        released: list[list[tuple[float, float]]] = [[] for _ in range(p)]
        # micro-batches before the first with an action not started are all known
        first = min(self.count[s][W] - (self.pending[s] == W) for s in range(p))
        if first > 0:
            for s in range(p):
                for k in (F, I, W):
                    est[s][k][first - 1] = ends[s][k][first - 1]
        for mb in range(first, m):
            for s in range(p):
                e = ends[s][F][mb]
                if e < 0:
                    r0 = base[s]
                    if s > 0 and est[s - 1][F][mb] + lag[s - 1] > r0:
                        r0 = est[s - 1][F][mb] + lag[s - 1]
                    if mb > 0 and est[s][F][mb - 1] > r0:
                        r0 = est[s][F][mb - 1]
                    if mb >= cap[s]:  # the weight grad that frees its memory (before ``first``: known)
                        freed = ends[s][W][mb - cap[s]]
                        if freed < 0:
                            freed = est[s][W][mb - cap[s]]
                        if freed > r0:
                            r0 = freed
                    e = r0 + took[s][F]
                    released[s].append((r0, took[s][F]))
                est[s][F][mb] = e
            for s in range(p - 1, -1, -1):
                e = ends[s][I][mb]
                if e < 0:
                    r0 = base[s]
                    if est[s][F][mb] > r0:
                        r0 = est[s][F][mb]
                    if s < p - 1 and est[s + 1][I][mb] + lag[s] > r0:
                        r0 = est[s + 1][I][mb] + lag[s]
                    if mb > 0 and est[s][I][mb - 1] > r0:
                        r0 = est[s][I][mb - 1]
                    e = r0 + took[s][I]
                    released[s].append((r0, took[s][I]))
                est[s][I][mb] = e
            for s in range(p):
                e = ends[s][W][mb]
                if e < 0:
                    r0 = base[s]
                    if est[s][I][mb] > r0:
                        r0 = est[s][I][mb]
                    if mb > 0 and est[s][W][mb - 1] > r0:
                        r0 = est[s][W][mb - 1]
                    e = r0 + took[s][W]
                    released[s].append((r0, took[s][W]))
                est[s][W][mb] = e
        best = max(self.free)
        for work in released:
            work.sort(reverse=True)
            total = 0.0
            for r0, d in work:
                total += d
                if r0 + total > best:
                    best = r0 + total
        return best

    def _dominated(self) -> bool:
        """Whether an earlier branch reached the same actions with every time that matters no later;
        if not, this one is remembered."""
        key = tuple(c for row in self.count for c in row) + tuple(self.pending)
        times: list[float] = list(self.free)
        for s in range(self.p):  # outputs a later action still needs
            n = self.count[s]
            nxt = self.count[s + 1][F] if s + 1 < self.p else n[F]
            times += self.ends[s][F][nxt:n[F]]
            if s > 0:  # (a rank's own earlier outputs ended before it was free: only its free time matters)
                times += self.ends[s][I][self.count[s - 1][I]:n[I]]
        vec = tuple(times)
        seen = self.seen.setdefault(key, [])
        for old in seen:
            if len(old) == len(vec) and all(a <= b + 1e-12 for a, b in zip(old, vec)):
                return True
        if len(seen) < 64:
            seen.append(vec)
        return False


def _with_microbatches(kinds: list[int]) -> list[tuple[int, int]]:
    """A rank's kinds in order, each with its micro-batch (each kind in micro-batch order)."""
    seen = [0, 0, 0]
    out = []
    for k in kinds:
        out.append((k, seen[k]))
        seen[k] += 1
    return out
