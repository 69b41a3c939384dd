"""Run the evaluations: in this process, over local processes (all cores), or over a Ray cluster.
Every executor returns the evaluations in the candidates' order, so results never depend on it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ppsim.errors import PpsimError
from ppsim.search.tune.evaluate import Evaluation, evaluate, evaluate_many
from ppsim.search.tune.space import Candidate

Progress = Callable[[int], None]  #: called with how many evaluations just finished
EXECUTORS = ("local", "ray")

_BASE: dict[str, Any] | None = None  # the scenario of a worker process


def _init(base: dict[str, Any]) -> None:
    global _BASE
    _BASE = base


def _work(c: Candidate) -> Evaluation:
    assert _BASE is not None
    return evaluate(_BASE, c)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def run_local(base: dict[str, Any], cands: list[Candidate], jobs: int, progress: Progress | None = None
              ) -> list[Evaluation]:
    """``jobs`` processes (1: this one). Candidates of one shape go to one worker in a row, so the
    cluster routes it remembers are reused."""
    if jobs <= 1 or len(cands) <= 1:
        out = []
        for c in cands:
            out.append(evaluate(base, c))
            if progress:
                progress(1)
        return out
    import multiprocessing as mp

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    chunk = max(1, min(16, len(cands) // (jobs * 8)))
    out = []
    with ctx.Pool(jobs, initializer=_init, initargs=(base,)) as pool:
        for ev in pool.imap(_work, cands, chunksize=chunk):
            out.append(ev)
            if progress:
                progress(1)
    return out


def run_ray(base: dict[str, Any], cands: list[Candidate], address: str | None = None,
            progress: Progress | None = None, batch: int = 32) -> list[Evaluation]:
    """Batches of candidates as Ray tasks on the cluster at ``address`` (None: start a local one)."""
    try:
        import ray
    except ImportError:
        raise PpsimError("--executor ray needs Ray: pip install 'ppsim[ray]' (or use --executor local)",
                         field="--executor") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        remote = ray.remote(evaluate_many)
        base_ref = ray.put(base)
        batches = [cands[i:i + batch] for i in range(0, len(cands), batch)]
        refs = [remote.remote(base_ref, b) for b in batches]
        results: dict[Any, list[Evaluation]] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                results[ref] = ray.get(ref)
                if progress:
                    progress(len(results[ref]))
        return [ev for ref in refs for ev in results[ref]]
    finally:
        if started:
            ray.shutdown()
