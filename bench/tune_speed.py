"""How fast ``ppsim tune`` evaluates plans: GPT-3 175B on 1024 GPUs (scenarios/megatron-gpt3-175b.yaml).

Takes 1000 plans spread evenly over the whole search space (evenly spaced candidates), evaluates them
serially (the baseline) and on every core, and prints plans per second for each, how many were
pruned by the exact memory check and how many simulated, and the speed-up. Target: 1000 plans in
under 60 s on a 2-core machine. The evaluations of both runs must be identical.

    python bench/tune_speed.py [--plans N] [--jobs J]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ppsim.inputs.scenario import load
from ppsim.search.tune.executors import default_jobs, run_local
from ppsim.search.tune.space import SearchSpace, candidates

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "megatron-gpt3-175b.yaml"
TARGET_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=default_jobs())
    args = ap.parse_args()
    s = load(SCENARIO)
    every = candidates(s, SearchSpace(gpus=1024))
    n = min(args.plans, len(every))
    cands = [every[i * len(every) // n] for i in range(n)]  # evenly over the space
    base = s.model_dump(exclude_none=True)
    print(f"{s.name}: {len(every)} plans in the space on 1024 GPUs; timing {len(cands)} spread evenly over it")
    results = {}
    for jobs in (1, args.jobs):
        t0 = time.perf_counter()
        evals = run_local(base, cands, jobs)
        dt = time.perf_counter() - t0
        results[jobs] = (dt, evals)
        pruned = sum(1 for e in evals if e.error is None and not e.fits)
        simulated = sum(1 for e in evals if e.simulated)
        print(f"jobs={jobs}: {len(evals)} plans in {dt:6.1f} s = {len(evals) / dt:6.1f} plans/s "
              f"({pruned} pruned by the exact memory check, {simulated} simulated, "
              f"{len(evals) - pruned - simulated} invalid)")
        if jobs == args.jobs:
            break
    serial, parallel = results[1][0], results[args.jobs][0]
    if args.jobs != 1:
        assert results[1][1] == results[args.jobs][1], "parallel evaluations differ from serial ones"
        print(f"speed-up on {args.jobs} jobs: {serial / parallel:.2f}x (evaluations identical)")
    verdict = "met" if parallel < TARGET_S * len(cands) / 1000 else "MISSED"
    print(f"target: 1000 plans in < {TARGET_S:.0f} s -> {parallel * 1000 / len(cands):.1f} s per 1000 plans: {verdict}")


if __name__ == "__main__":
    main()
