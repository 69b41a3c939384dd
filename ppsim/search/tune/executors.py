"""Run the evaluations: in this process, over local processes (all cores), or over a Ray cluster.
An executor maps a piece of work (:func:`~ppsim.search.tune.evaluate.bound` or
:func:`~ppsim.search.tune.evaluate.evaluate`) over candidates and returns the evaluations in the
candidates' order, so results never depend on it. It stays open across maps, so a search that
maps many small batches starts its processes once."""

from __future__ import annotations

import logging
import os
import queue
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, get_args

from ppsim.errors import PpsimError
from ppsim.gc_pause import allow_gc_pauses
from ppsim.search.tune import ExecutorName
from ppsim.search.tune.evaluate import Evaluation, Work, evaluate, evaluate_many
from ppsim.search.tune.space import Candidate

Progress = Callable[[int], None]  #: called with how many evaluations just finished
EXECUTORS: tuple[ExecutorName, ...] = get_args(ExecutorName)

_BASE: dict[str, Any] | None = None  # the scenario of a worker process


class Executor(Protocol):
    def map(self, work: Work, cands: Sequence[Any], progress: Progress | None = None) -> list[Evaluation]: ...

    def submit(self, work: Work, items: Sequence[Any]) -> int:
        """Start ``work`` over ``items``, one after the other in one worker (what they share built
        once); returns the task's number, counting from 0 in the order of submission."""
        ...

    def next_done(self) -> tuple[int, list[Evaluation]]:
        """A submitted task that has finished, waiting for one: its number and its evaluations."""
        ...


def _init(base: dict[str, Any]) -> None:
    """A pool process of ppsim's own: the scenario to evaluate candidates of, and leave to pause its
    collector around each plan's passes (nothing else runs in it). It leaves Ctrl-C to the search's
    process, which ends the pool: a worker's own KeyboardInterrupt printed a half traceback."""
    import signal

    global _BASE
    _BASE = base
    allow_gc_pauses()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _work(task: tuple[Work, Any]) -> Evaluation:
    assert _BASE is not None
    work, c = task
    return work(_BASE, c)


def _work_many(work: Work, items: Sequence[Any]) -> list[Evaluation]:
    assert _BASE is not None
    return evaluate_many(_BASE, items, work)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class _Serial:
    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self._done: deque[tuple[int, list[Evaluation]]] = deque()
        self._submitted = 0

    def submit(self, work: Work, items: Sequence[Any]) -> int:
        """Run the task now; :meth:`next_done` hands its evaluations back in turn."""
        n, self._submitted = self._submitted, self._submitted + 1
        self._done.append((n, evaluate_many(self.base, items, work)))
        return n

    def next_done(self) -> tuple[int, list[Evaluation]]:
        return self._done.popleft()

    def map(self, work: Work, cands: Sequence[Any], progress: Progress | None = None) -> list[Evaluation]:
        out = []
        for c in cands:
            out.append(work(self.base, c))
            if progress:
                progress(1)
        return out


class _Pool:
    def __init__(self, pool: Any, jobs: int) -> None:
        self.pool, self.jobs = pool, jobs
        # (number, evaluations, error) of each finished task, put by the pool's result thread
        self._done: queue.SimpleQueue[tuple[int, list[Evaluation] | None, BaseException | None]] = queue.SimpleQueue()
        self._submitted = 0

    def submit(self, work: Work, items: Sequence[Any]) -> int:
        n, self._submitted = self._submitted, self._submitted + 1
        self.pool.apply_async(_work_many, (work, list(items)),
                              callback=lambda evs: self._done.put((n, evs, None)),
                              error_callback=lambda exc: self._done.put((n, None, exc)))
        return n

    def next_done(self) -> tuple[int, list[Evaluation]]:
        n, evs, exc = self._done.get()
        if exc is not None:
            raise exc
        assert evs is not None
        return n, evs

    def map(self, work: Work, cands: Sequence[Any], progress: Progress | None = None) -> list[Evaluation]:
        """Candidates of one shape go to one worker in a row, so the cluster routes it remembers are reused."""
        chunk = max(1, min(16, len(cands) // (self.jobs * 8)))
        out = []
        for ev in self.pool.imap(_work, [(work, c) for c in cands], chunksize=chunk):
            out.append(ev)
            if progress:
                progress(1)
        return out


@contextmanager
def local(base: dict[str, Any], jobs: int) -> Iterator[Executor]:
    """``jobs`` processes (1: this one)."""
    if jobs <= 1:
        yield _Serial(base)
        return
    import multiprocessing as mp

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(jobs, initializer=_init, initargs=(base,)) as pool:
        yield _Pool(pool, jobs)


class _Ray:
    def __init__(self, ray: Any, base: dict[str, Any], batch: int) -> None:
        self.ray, self.batch = ray, batch
        self.remote = ray.remote(evaluate_many)
        self.base_ref = ray.put(base)
        self._pending: dict[Any, int] = {}  # a submitted task's object ref: its number
        self._submitted = 0

    def submit(self, work: Work, items: Sequence[Any]) -> int:
        n, self._submitted = self._submitted, self._submitted + 1
        self._pending[self.remote.remote(self.base_ref, list(items), work)] = n
        return n

    def next_done(self) -> tuple[int, list[Evaluation]]:
        done, _ = self.ray.wait(list(self._pending), num_returns=1)
        return self._pending.pop(done[0]), self.ray.get(done[0])

    def map(self, work: Work, cands: Sequence[Any], progress: Progress | None = None) -> list[Evaluation]:
        """Batches of candidates as Ray tasks."""
        ray = self.ray
        batches = [cands[i:i + self.batch] for i in range(0, len(cands), self.batch)]
        refs = [self.remote.remote(self.base_ref, b, work) for b in batches]
        results: dict[Any, list[Evaluation]] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[ref] = ray.get(ref)
                if progress:
                    progress(len(results[ref]))
        return [ev for ref in refs for ev in results[ref]]


@contextmanager
def ray_cluster(base: dict[str, Any], address: str | None = None, batch: int = 32) -> Iterator[Executor]:
    """The Ray cluster at ``address`` (None: start a local one, and stop it afterwards)."""
    try:
        import ray
    except ImportError:
        raise PpsimError("--executor ray needs Ray: pip install 'ppsim[ray]' (or use --executor local)",
                         field="--executor") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield _Ray(ray, base, batch)
    finally:
        if started:
            ray.shutdown()


def run_local(base: dict[str, Any], cands: list[Candidate], jobs: int, progress: Progress | None = None
              ) -> list[Evaluation]:
    """Every candidate simulated (when it fits) on ``jobs`` local processes: the exhaustive search."""
    with local(base, jobs) as ex:
        return ex.map(evaluate, cands, progress)


def run_ray(base: dict[str, Any], cands: list[Candidate], address: str | None = None,
            progress: Progress | None = None, batch: int = 32) -> list[Evaluation]:
    """Every candidate simulated (when it fits) on a Ray cluster: the exhaustive search."""
    with ray_cluster(base, address, batch) as ex:
        return ex.map(evaluate, cands, progress)
