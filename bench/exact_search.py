"""The exact search of orders of one stage per rank against the heuristics it runs after.

For random uneven stages (seeded: each stage's forward 0.5-1.5 ms in steps of 0.1, input grad
1.1x and weight grad 0.7x its forward, messages 0.05 ms) at a few sizes and activation caps,
``auto``'s candidates are found twice in one run, alternating: with the exact search off (the
list scheduler, the zero-bubble authors' greedy, the local search) and on. Prints per size the
cases the exact search shortened, by how much (median and largest, on the search's timeline:
durations and latencies), how often it proved its answer shortest, and the seconds each way.

    python bench/exact_search.py [--cases 12]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from ppsim.plan.order_search import candidates as search
from ppsim.plan.order_search.timeline import Timing

SIZES = [(4, 8), (4, 16), (8, 8), (8, 12)]  #: (ranks, micro-batches); 8 x 16 is past EXACT_ACTIONS


def uneven(p: int, rng: random.Random) -> Timing:
    forward = [round(rng.uniform(0.5, 1.5), 1) for _ in range(p)]
    grad = [1.1 * f for f in forward]
    weight = [0.7 * f for f in forward]
    return Timing(forward, [g + w for g, w in zip(grad, weight, strict=True)], grad, weight, [0.05] * (p - 1),
                  [1.0] * p)


def best(p: int, m: int, timing: Timing, budget: list[float], exact_on: bool) -> tuple[float, bool, float]:
    """(the best candidate's makespan, whether it is proven shortest, seconds)."""
    saved = search.EXACT_ACTIONS
    search.EXACT_ACTIONS = saved if exact_on else 0
    try:
        t0 = time.perf_counter()
        found = search.candidates(p, m, timing, budget)
        return found[0].makespan, found[0].proven, time.perf_counter() - t0
    finally:
        search.EXACT_ACTIONS = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=12, help="random cases per size")
    args = ap.parse_args()
    print(f"exact search: plans of at most {search.EXACT_ACTIONS} actions, {search.EXACT_WORK:,} decisions x actions")
    print(f"{'p':>2s} {'m':>3s} {'cap':>4s} {'shortened':>10s} {'median':>7s} {'largest':>8s} {'proven':>7s} "
          f"{'s off':>6s} {'s on':>6s}")
    rng = random.Random(2026)
    for p, m in SIZES:
        for cap in (p - 1, p, 2 * p - 1):  # below 1F1B's memory, at it, at ZB-H2's
            gains, proven, off_s, on_s = [], 0, 0.0, 0.0
            for case in range(args.cases):
                timing = uneven(p, rng)
                budget = [float(cap)] * p
                runs = [(False, True), (True, False)][case % 2]  # alternate which runs first
                got = {on: best(p, m, timing, budget, on) for on in runs}
                (off_ms, _, t_off), (on_ms, is_proven, t_on) = got[False], got[True]
                off_s, on_s = off_s + t_off, on_s + t_on
                gains.append((off_ms - on_ms) / off_ms)
                proven += is_proven
            shortened = [g for g in gains if g > 1e-9]
            print(f"{p:2d} {m:3d} {cap:4d} {len(shortened):4d} of {len(gains):<3d} "
                  f"{100 * statistics.median(shortened) if shortened else 0:6.2f}% "
                  f"{100 * max(gains):7.2f}% {proven:3d}/{len(gains):<3d} {off_s:6.2f} {on_s:6.2f}")
            assert min(gains) >= -1e-12, "the exact search never lengthens the best plan"


if __name__ == "__main__":
    main()
