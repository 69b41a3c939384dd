"""One tuner search, from a scenario and what to search to a :class:`~ppsim.search.tune.report.TuneResult`:
what ``ppsim tune`` runs (the command parses, calls this, prints), and what a script calls."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario
from ppsim.search.tune import ExecutorName, executors, space
from ppsim.search.tune.report import TuneResult


@dataclass(frozen=True)
class TuneRequest:
    """What to search: the plans of a scenario's model and batch on ``gpus`` devices."""

    gpus: int
    micro_batches: tuple[int, ...] = space.MICRO_BATCHES  #: micro-batch sizes
    schedules: tuple[str, ...] = space.SCHEDULES
    max_stages: int | None = None
    context_parallel: tuple[int, ...] | None = None  #: context parallel sizes (None: the scenario's)
    #: how many of the best plans must be exact (simulated, not only bounded): those listed or written
    exact: int = 10
    drawn: bool = False  #: a page will draw the search: the plans its curves need are simulated too
    #: an output shows the Pareto front of throughput against memory (a page, ``--json``): the plans
    #: on it are simulated too; the table alone does not show it
    front: bool = True
    exhaustive: bool = False  #: simulate every plan that fits, not only those a bound leaves a chance
    executor: ExecutorName = "local"
    jobs: int | None = None  #: local processes (None: every core)
    ray_address: str | None = None  #: a running Ray cluster (None: start one here)


def search_plans(s: Scenario, request: TuneRequest, *, on_start: Callable[[int], None] | None = None,
                 on_advance: Callable[[int], None] | None = None) -> TuneResult:
    """Search ``request``'s plans of ``s``; ``on_start`` hears how many units of work there are (each
    plan is bounded, then simulated or skipped: two each; one each when exhaustive) and
    ``on_advance`` each that is done. Raises PpsimError when no plan fits in memory, saying what the
    least hungry one needs."""
    from ppsim.search.tune.evaluate import evaluate
    from ppsim.search.tune.prune import search
    from ppsim.search.tune.rank import DRAWN, EXPLAINED

    if request.executor not in executors.EXECUTORS:
        raise PpsimError(f"{request.executor!r} is not an executor; choose {' or '.join(executors.EXECUTORS)}",
                         field="--executor")
    cands = space.candidates(s, space.SearchSpace(gpus=request.gpus, micro_batches=request.micro_batches,
                                                  schedules=request.schedules, max_stages=request.max_stages,
                                                  context_parallel=request.context_parallel))
    base = s.model_dump(exclude_none=True)
    jobs = request.jobs or executors.default_jobs()
    if on_start is not None:
        on_start(len(cands) if request.exhaustive else 2 * len(cands))
    t0 = time.perf_counter()
    pool = (executors.ray_cluster(base, request.ray_address) if request.executor == "ray"
            else executors.local(base, jobs))
    with pool as ex:
        if request.exhaustive:
            evals = ex.map(evaluate, cands, on_advance)
        else:
            # two plans a process at a time: the bar rises with each result taken, so a smaller
            # window simulates fewer plans that the bar would have skipped
            evals = search(ex, cands, top=request.exact, progress=on_advance,
                           groups=EXPLAINED + (DRAWN if request.drawn else ()), window=2 * jobs,
                           front=request.front)
    from ppsim.search.tune.evaluate import own_plan

    own = own_plan(s) if request.gpus == s.devices else None  # the user's plan, where it is one of the search's
    result = TuneResult(s.name, request.gpus, evals, time.perf_counter() - t0,
                        1 if request.executor == "ray" else jobs, request.executor, own,
                        front=request.front or request.exhaustive)
    if not result.ranked:
        raise PpsimError(_nothing_fits(result), field="--gpus")
    return result


def _nothing_fits(result: TuneResult) -> str:
    """Why no plan was ranked, and how close the least hungry one came."""
    evals, n, c = result.evaluations, result.gpus, result.counts()
    least = min((e for e in evals if e.peak_memory_bytes), key=lambda e: e.peak_memory_bytes or 0, default=None)
    hint = (f"; the least memory any plan needs is {(least.peak_memory_bytes or 0) / 2**30:,.1f} GiB "
            f"({least.candidate.label()}) of {(least.memory_capacity_bytes or 0) / 2**30:,.0f} GiB" if least else "")
    return (f"none of the {c.considered:,} plans considered fits in memory on {n} device{'s' * (n != 1)} "
            f"({c.pruned_by_memory:,} pruned by memory, {c.invalid:,} invalid){hint}; use more devices "
            "or a device with more memory")
