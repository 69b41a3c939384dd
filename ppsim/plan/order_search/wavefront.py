"""Wavefront orders: micro-batch by micro-batch, a forward wave down the stages and an input-grad
wave back up, with weight grads placed in the gaps the waves leave or where memory needs them.

This is the greedy of the zero-bubble paper's authors (Qi et al., 2024; their scheduler's initial
solution), written here from how it behaves, on ppsim's costs: a latency per stage boundary
instead of one for all, and activations held from a forward to its weight grad. Three choices
make its eight variants (:data:`VARIANTS`):

- ``late_warmup``: in the warm-up a stage may run a forward that ends after its first grad arrives;
- ``grads_first``: a stage two or more forwards ahead of the next one skips its forward when the
  next one's grad is due soon;
- ``fill_small_gaps``: a weight grad fills a gap before an input even when the gap is smaller
  than the idle time the worst stage has had so far.

Each round runs at most one forward and exactly one input grad per stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

from ppsim.plan.action import Action, Kind
from ppsim.plan.order_search.timeline import Timing


@dataclass(frozen=True)
class Variant:
    late_warmup: bool
    grads_first: bool
    fill_small_gaps: bool

    def words(self) -> str:
        said = [w for w, on in (("late warm-up", self.late_warmup), ("grads first", self.grads_first),
                                ("small gaps filled", self.fill_small_gaps)) if on]
        return ", ".join(said) or "plain"


VARIANTS = tuple(Variant(*flags) for flags in product((True, False), repeat=3))


class _Stuck(Exception):
    """The variant cannot finish these sizes: a stage's input grad comes before its forward."""


class _Waves:
    """The orders being built: what each stage has run, when it is free, what it holds."""

    def __init__(self, p: int, m: int, timing: Timing, budget: Sequence[float]) -> None:
        self.p, self.m, self.timing, self.budget = p, m, timing, budget
        self.count = {Kind.F: [0] * p, Kind.I: [0] * p, Kind.W: [0] * p}
        self.free = [0.0] * p
        self.held = [0.0] * p
        self.idle = [0.0] * p  #: time a stage waited for an input since its first forward
        #: when each (kind, stage, micro-batch) ends
        self.end = {k: [[0.0] * m for _ in range(p)] for k in (Kind.F, Kind.I, Kind.W)}
        self.took = timing.by_kind()
        self.orders: list[list[Action]] = [[] for _ in range(p)]

    def arrival(self, s: int, kind: Kind) -> float:
        """When the input of stage s's next action of ``kind`` arrives from the neighbouring stage
        (0 when it comes from the stage itself)."""
        mb = self.count[kind][s]
        if kind is Kind.F and s > 0:
            return self.end[kind][s - 1][mb] + self.timing.latency[s - 1]
        if kind is Kind.I and s < self.p - 1:
            return self.end[kind][s + 1][mb] + self.timing.latency[s]
        return 0.0

    def run(self, s: int, kind: Kind) -> None:
        mb = self.count[kind][s]
        if kind is Kind.I and self.count[Kind.F][s] <= mb:
            raise _Stuck  # a round skipped a forward that this grad needs
        took = self.took[kind][s]
        end = max(self.free[s], self.arrival(s, kind)) + took
        if self.count[Kind.F][s]:
            self.idle[s] += end - (self.free[s] + took)  # as ends, so that equal gaps compare equal
        self.free[s] = self.end[kind][s][mb] = end
        self.count[kind][s] = mb + 1
        if kind is Kind.F:
            self.held[s] += self.timing.activation[s]
        elif kind is Kind.W:
            self.held[s] -= self.timing.activation[s]
        self.orders[s].append(Action(s, kind, mb))

    def owed(self, s: int) -> int:
        """Weight grads stage s may run now (their input grads have run)."""
        return self.count[Kind.I][s] - self.count[Kind.W][s]

    def room_for_forward(self, s: int) -> bool:
        """Run weight grads until a forward fits stage s's budget; False if it cannot."""
        need = self.timing.activation[s]
        while self.held[s] + need > self.budget[s] + 1e-9:
            if not self.owed(s):
                return False
            self.run(s, Kind.W)
        return True

    def fill_gap(self, s: int, kind: Kind, fill_small: bool) -> None:
        """Weight grads in the gap before the input of stage s's next ``kind`` arrives: those that
        end before it does, then one more unless the gap is small and small gaps stay open."""
        due = self.arrival(s, kind)
        w = self.timing.weight_grad[s]
        while self.owed(s) and self.free[s] + w <= due:
            self.run(s, Kind.W)
        if self.owed(s) and self.free[s] < due:
            small = due - self.free[s] <= max(self.idle) - self.idle[s]
            if fill_small or not small:
                self.run(s, Kind.W)


def wavefront(p: int, m: int, timing: Timing, budget: Sequence[float], variant: Variant
              ) -> tuple[list[list[Action]], float] | None:
    """The per-rank orders (one stage per rank, split backward) of one variant and the makespan of
    the timeline they were built on, or None when a forward cannot fit a rank's budget."""
    waves = _Waves(p, m, timing, budget)
    try:
        if not _warm_up(waves, variant) or not _rounds(waves, variant):
            return None
    except _Stuck:
        return None
    if any(n < m for n in waves.count[Kind.F]):
        return None  # the rounds skipped forwards they never ran
    for s in range(p):
        while waves.owed(s):
            waves.run(s, Kind.W)
    return waves.orders, max(waves.free)


def _rounds(waves: _Waves, variant: Variant) -> bool:
    """A round per micro-batch after the first: the forwards that go, then a wave of input grads
    up the stages; False when a forward cannot fit."""
    p, m = waves.p, waves.m
    for _ in range(1, m):
        for s in _forwarding(waves, variant):
            if not waves.room_for_forward(s):
                return False
            if s > 0:
                waves.fill_gap(s, Kind.F, variant.fill_small_gaps)
            waves.run(s, Kind.F)
        for s in reversed(range(p)):
            if s < p - 1:
                waves.fill_gap(s, Kind.I, variant.fill_small_gaps)
            if s == 0 and waves.count[Kind.F][0] == m:
                while waves.owed(0):
                    waves.run(0, Kind.W)
            waves.run(s, Kind.I)
    return True


def _warm_up(waves: _Waves, variant: Variant) -> bool:
    """Micro-batch 0's forward wave, the extra forwards each stage runs before its first input
    grad arrives (fewer on each later stage), then micro-batch 0's input-grad wave."""
    p, m, timing = waves.p, waves.m, waves.timing
    for s in range(p):
        if timing.activation[s] > waves.budget[s] + 1e-9:
            return False
        waves.run(s, Kind.F)
    extra = [0] * p
    grad_end = waves.end[Kind.F][p - 1][0] + timing.input_grad[p - 1]
    for s in reversed(range(p - 1)):
        due = grad_end + timing.latency[s]
        t, held = waves.free[s], waves.held[s]
        while 1 + extra[s] < m and held + timing.activation[s] <= waves.budget[s] + 1e-9:
            if (t + timing.forward[s] > due) if variant.late_warmup else (t >= due):
                break
            t += timing.forward[s]
            held += timing.activation[s]
            extra[s] += 1
        grad_end = max(t, due) + timing.input_grad[s]
    for s in range(1, p):
        while extra[s] > 0 and extra[s] >= extra[s - 1] and 1 + extra[s] < m:
            extra[s] -= 1
    for s in range(p):
        for _ in range(extra[s]):
            waves.run(s, Kind.F)
    for s in reversed(range(p)):
        waves.run(s, Kind.I)
    return True


def _forwarding(waves: _Waves, variant: Variant) -> list[int]:
    """The stages that run a forward this round: those that want one, and only where the next
    stage runs one too."""
    p, m = waves.p, waves.m
    forwards = waves.count[Kind.F]
    want = [forwards[s] < m for s in range(p)]
    if variant.grads_first:
        for s in range(p - 1):
            if want[s] and forwards[s] >= forwards[s + 1] + 2:
                want[s] = _forward_before_grad(waves, s)
    for s in reversed(range(p - 1)):
        want[s] = want[s] and want[s + 1]
    return [s for s in range(p) if want[s]]


def _forward_before_grad(waves: _Waves, s: int) -> bool:
    """Whether stage s, ahead of stage s + 1, runs a forward before the grad stage s + 1 will send
    next: yes if it (with the weight grads that make room for it) ends before that grad can
    arrive, or if waiting would leave a gap larger than the worst stage's idle time so far."""
    timing, free = waves.timing, waves.free
    nxt = s + 1
    soon = free[nxt] + timing.forward[nxt] + timing.input_grad[nxt] + timing.latency[s]
    if free[s] >= soon:
        return False
    over = waves.held[s] + timing.activation[s] - waves.budget[s]
    freed, w_cost = 0, 0.0
    while over > 1e-9 and freed < waves.owed(s):  # weight grads that must run first, for memory
        over -= timing.activation[s]
        w_cost += timing.weight_grad[s]
        freed += 1
    if free[s] + timing.forward[s] + w_cost <= soon:
        return True
    return soon - free[s] > max(waves.idle) - waves.idle[s]
