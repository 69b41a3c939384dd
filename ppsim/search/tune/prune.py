"""Branch and bound: simulate only the plans that could change what the search reports.

First every candidate is bounded (:func:`~ppsim.search.tune.evaluate.bound`: exact memory, and a
step time no simulation can beat). Then the plans that fit are taken in the order of their
bounds; a plan that could still matter is bounded again by its own order
(:func:`~ppsim.search.tune.evaluate.evaluate_gated`, a pass over the plan) and simulated if it
still could. Both phases keep every worker busy: a task goes out as soon as one is free, never
waiting for a batch to finish. A plan is skipped once its bound shows it cannot be any of:

- one of the ``top`` fastest plans;
- the fastest plan of a group the report names (each stage count, schedule, recompute mode, ZeRO
  stage, pure data parallelism; with a page, each point of its lines);
- on the Pareto front of throughput against memory (no simulated plan needs as little memory and
  is faster than its bound), when an output shows the front (``front``: ``--json``, a page).

What was skipped could not have been reported, so the report is the exhaustive search's (a test
compares them). Every threshold only tightens as plans are simulated, so a plan skipped once
stays skippable.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from ppsim.plan import schedules
from ppsim.search.tune.evaluate import Evaluation, Gated, bound, evaluate_gated
from ppsim.search.tune.executors import Executor, Progress
from ppsim.search.tune.rank import Group
from ppsim.search.tune.space import Candidate


class Frontier:
    """What the simulated plans so far set as the bar: the ``top`` fastest steps, the fastest of
    each group, and (with ``front``) the staircase of the fastest step at or under each memory."""

    def __init__(self, top: int, groups: Sequence[Group], front: bool = True) -> None:
        self.top, self.groups, self.front = top, tuple(groups), front
        self.steps: list[float] = []  # fastest first
        self.best: dict[tuple[int, Hashable], float] = {}
        self.stair: list[tuple[float, float]] = []  # (memory, step): memory rising, step falling

    def could_matter(self, e: Evaluation) -> bool:
        """Whether the plan's bound leaves it a chance to be reported."""
        lower = e.step_time_bound_ms
        return lower is None or lower <= self.threshold(e)

    def threshold(self, e: Evaluation) -> float:
        """The longest step at which the plan could still be reported: one of the ``top``
        fastest, the fastest of one of its groups, or (with ``front``) not beaten on both
        throughput and memory."""
        inf = float("inf")
        bars = [inf if len(self.steps) < self.top else self.steps[self.top - 1]]
        for i, group in enumerate(self.groups):
            key = group(e.candidate)
            if key is not None:
                bars.append(self.best.get((i, key), inf))
        if self.front:
            i = bisect_right(self.stair, (e.peak_memory_bytes or 0.0, inf))
            bars.append(self.stair[i - 1][1] if i > 0 else inf)  # the fastest needing no more memory
        return max(bars)

    def _dominated(self, memory: float, lower: float) -> bool:
        """Some simulated plan needs no more memory and is faster than ``lower``."""
        i = bisect_right(self.stair, (memory, float("inf")))
        return i > 0 and self.stair[i - 1][1] < lower

    def add(self, e: Evaluation) -> None:
        if not e.ranked or e.step_time_ms is None:
            return
        step = e.step_time_ms
        insort(self.steps, step)
        for i, group in enumerate(self.groups):
            key = group(e.candidate)
            if key is not None and step < self.best.get((i, key), float("inf")):
                self.best[(i, key)] = step
        if not self.front:
            return
        memory = e.peak_memory_bytes or 0.0
        if self._dominated(memory, step) or any(m == memory and s <= step for m, s in self.stair):
            return
        # drop the entries this plan beats on both counts, then place it
        self.stair = [(m, s) for m, s in self.stair if not (m >= memory and s >= step)]
        insort(self.stair, (memory, step))


def search(ex: Executor, cands: list[Candidate], *, top: int, groups: Sequence[Group],
           progress: Progress | None = None, window: int = 8, front: bool = True) -> list[Evaluation]:
    """Every candidate's evaluation, in the candidates' order: simulated where it could matter,
    else bounded only (``skipped``). ``progress`` advances twice per candidate: once bounded, once
    simulated or skipped. ``front``: the Pareto front of throughput against memory is reported
    (without it, a slow plan that needs little memory is simulated only for a group).
    ``window``: how many tasks run at once (:func:`_simulated_in_turn`, which the results depend on)."""
    out = _bounded(ex, cands, progress, window)
    order = sorted((i for i, e in enumerate(out) if e.fits), key=lambda i: (out[i].step_time_bound_ms or 0.0, cands[i]))
    if progress:
        progress(len(cands) - len(order))  # what does not fit (or cannot run) is done with
    _simulated_in_turn(ex, cands, order, out, Frontier(top, groups, front), progress, window)
    return out


def _simulated_in_turn(ex: Executor, cands: list[Candidate], order: list[int], out: list[Evaluation],
                       frontier: Frontier, progress: Progress | None, window: int) -> None:
    """The plans of ``order`` (indices into ``cands``, bounded in ``out``) simulated where the
    frontier lets them matter, ``window`` at a time, each as soon as a worker is free. Each is
    bounded again by its own order where it is simulated, and simulated only if that bound leaves
    it under what the frontier lets it reach. The frontier takes the results in the order the plans
    were sent, and the plan sent n-th is weighed against the first n - ``window`` results exactly,
    however the workers' times fall: the same plans are simulated on every run of the same window."""
    sent: deque[tuple[int, int]] = deque()  # (task number, index into cands), in the order sent
    finished: dict[int, Evaluation] = {}  # by task number: done, not yet taken by the frontier
    k = 0
    while k < len(order) or sent:
        if k < len(order) and len(sent) < window:
            i = order[k]
            k += 1
            if frontier.could_matter(out[i]):
                gated = Gated(cands[i], frontier.threshold(out[i]), out[i].step_time_bound_ms)
                sent.append((ex.submit(evaluate_gated, [gated]), i))
            elif progress:
                progress(1)
            continue
        task, i = sent.popleft()  # the window is full (or nothing is left to send): take the oldest
        while task not in finished:
            n, evs = ex.next_done()
            finished[n] = evs[0]
        out[i] = finished.pop(task)
        frontier.add(out[i])
        if progress:
            progress(1)


def _bounded(ex: Executor, cands: list[Candidate], progress: Progress | None, window: int = 8) -> list[Evaluation]:
    """Every candidate bounded, in the candidates' order, but sent to the workers in
    :func:`_order`, a run of plans that share their costs in one task, so that a worker builds each
    set of costs once and each plan once while it remembers them; ``window`` tasks at a time. A
    candidate with a lighter twin (:func:`_lighter_twin`) needs at least the twin's memory, so it
    is bounded only where that twin fits: it waits for its twin, and goes before the plans not yet
    sent once the twin is done (its plan is the twin's, still remembered). The evaluations do not
    depend on the order in which the workers finish."""
    index = {c: i for i, c in enumerate(cands)}
    twin_of = {i: j for i, c in enumerate(cands) if (j := _lighter_twin(c, index)) is not None}
    waiting: dict[int, list[int]] = {}  # a twin's index: the plans that wait for it
    for i, j in twin_of.items():
        waiting.setdefault(j, []).append(i)
    out: list[Evaluation | None] = [None] * len(cands)
    todo = deque(_tasks([i for i in sorted(range(len(cands)), key=lambda i: _order(cands[i])) if i not in twin_of],
                        cands))
    running: dict[int, list[int]] = {}  # task number: its indices into cands

    def settle(i: int, ready: list[int]) -> None:
        """``out[i]`` is known: the plans waiting for it are ready to bound, or skipped (with
        theirs in turn) where it does not fit."""
        twin = out[i]
        assert twin is not None
        for j in waiting.pop(i, ()):
            if twin.fits or twin.error is not None:
                ready.append(j)
            else:  # more memory than a plan that does not fit
                out[j] = Evaluation(cands[j], memory_capacity_bytes=twin.memory_capacity_bytes)
                if progress:
                    progress(1)
                settle(j, ready)

    while todo or running:
        while todo and len(running) < window:
            task = todo.popleft()
            running[ex.submit(bound, [cands[i] for i in task])] = task
        n, evs = ex.next_done()
        ready: list[int] = []
        for i, e in zip(running.pop(n), evs, strict=True):
            out[i] = e
            if progress:
                progress(1)
            settle(i, ready)
        todo.extendleft(reversed(_tasks(sorted(ready, key=lambda i: _order(cands[i])), cands)))
    assert not waiting, "a twin never bounded"
    return [e for e in out if e is not None]


def _tasks(ordered: list[int], cands: list[Candidate], size: int = 8) -> list[list[int]]:
    """``ordered`` (indices into ``cands``, in :func:`_order`) cut into tasks: runs of plans that
    share their costs (all but the schedule alike) kept whole, joined while a task holds fewer than
    ``size`` plans of one size (stages, micro-batches, chunks: the plans a worker remembers)."""
    tasks: list[list[int]] = []
    last: tuple[Any, ...] = ()  # no key matches it: the first plan starts a task
    for i in ordered:
        key = _order(cands[i])
        if key[:-1] == last[:-1] or (key[:3] == last[:3] and len(tasks[-1]) < size):
            tasks[-1].append(i)  # the same costs, or a small task of the same size
        else:
            tasks.append([i])
        last = key
    return tasks


def _lighter_twin(c: Candidate, index: dict[Candidate, int]) -> int | None:
    """The candidate that holds no more memory than ``c`` on every rank, where the search has one
    (tests/search/test_tune.py checks each):

    - a plan without ZeRO: the same plan with ZeRO-1, its optimizer states sharded over the
      replicas, the same partition, weights, gradients and activations;
    - a plan that keeps each expert whole (ETP 1) beside tensor parallelism: the same plan with
      ETP t, the experts' weights and gradients t times smaller, their optimizer state and the
      activations the same;
    - a plan of several copies of the model (DualPipe): the same plan on one copy (its schedule's
      ``folded``, DualPipeV), whose ranks hold half the layers and no more activations."""
    if c.zero_stage == 0 and (sharded := index.get(replace(c, zero_stage=1))) is not None:
        return sharded
    if c.expert_tensor == 1 and c.tensor_parallel > 1:
        split = index.get(replace(c, expert_tensor=c.tensor_parallel))
        if split is not None:
            return split
    folded = schedules.describe(c.schedule).folded
    return index.get(replace(c, schedule=folded)) if folded else None


def _order(c: Candidate) -> tuple[int, int, int, tuple[int, ...], int, Candidate, str]:
    """Stages, micro-batches and chunks (what the plans depend on, with the schedule: the few
    schedules of one size are remembered at once), then the placement of the virtual stages and
    the copies of the model they form, then the rest with the schedule last: the schedules of one
    placement and copies share their costs, so they come in a row."""
    info = schedules.describe(c.schedule)
    placement = info.stage_to_rank(c.stages, c.chunks)
    return c.stages, c.microbatches, c.chunks, placement, info.pipes, replace(c, schedule=""), c.schedule
