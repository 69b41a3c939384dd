"""``auto`` against the hand-written schedules at the same activation budget.

For each case (even and uneven stages, fast and slow links, few and many micro-batches) and each
budget from p / 2 to 2p micro-batches per rank, prints the predicted step time and the most
micro-batches a rank holds for every hand-written schedule (one stage per rank: 1F1B, ZB-H1,
ZB-H2; two: ZB-V, V-Half, V-Min, DualPipeV, interleaved zero bubble) and auto, side by side. A
schedule whose peak exceeds the budget is shown but marked ``*`` (not a fair comparison there),
one that cannot run the case ``-``. auto must never be slower than a schedule that fits; then come
its gain over the best one that fits, how far the passes of auto's best plan of one stage per rank
end above a bound no such plan can beat (``order_search.bound.lower_bound``, or the shortest such a plan
can have where the exact search proved it; the step less its fixed end:
clipping's all-reduce, the optimizer), and what it picked. The costs are explicit milliseconds
per rank (F, full backward, weight grad; a rank's two chunks share them), messages pure latency.

    python bench/auto_schedule.py [--comm async|rendezvous]
"""

from __future__ import annotations

import argparse
import time

from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.plan import schedules
from ppsim.prediction import predict, scenario_workload
from ppsim.prediction.auto import auto_build
from ppsim.trace.metrics import summarize

HEAVY_LAST = [1.0] * 7 + [1.6]  #: the LM head's stage
CASES: dict[str, tuple[int, int, object, float, float]] = {  # p, m, forward (one or per stage), W share, p2p ms
    "even, fast links": (8, 32, 1.0, 0.5, 0.0),
    "even, slow links (p2p = F / 2)": (8, 32, 1.0, 0.5, 0.5),
    "last stage x1.6 (LM head)": (8, 32, HEAVY_LAST, 0.5, 0.1),
    "first x1.4 and last x1.6": (8, 32, [1.4] + [1.0] * 6 + [1.6], 0.5, 0.1),
    "middle stage x1.5": (8, 32, [1.0] * 3 + [1.5] + [1.0] * 4, 0.5, 0.1),
    "stages slowing down 1.7 -> 1.0": (8, 32, [1.7 - 0.1 * i for i in range(8)], 0.5, 0.1),
    "few micro-batches (m = p)": (8, 8, 1.0, 0.5, 0.2),
    "m = 1.5 p": (8, 12, 1.0, 0.5, 0.2),
}
SCHEDULES = ("1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev", "interleaved-zb", "auto")


def scenario(p: int, m: int, forward: object, w_share: float, p2p: float, schedule: str, budget: float,
             comm: str) -> Scenario:
    f = forward if isinstance(forward, list) else [forward] * p
    return parse_scenario({
        "name": "bench-auto",
        "pipeline": {"stages": p, "microbatches": m, "schedule": schedule, "memory_budget": budget, "comm": comm,
                     "chunks": schedules.describe(schedule).chunks.default},
        "costs": {"forward_ms": f, "backward_ms": [2 * x for x in f], "weight_grad_ms": [2 * w_share * x for x in f],
                  "p2p_ms": p2p}})


def one_stage_gap(s: Scenario) -> float:
    """How far the passes of auto's best plan of one stage per rank end above the bound (or above the
    shortest such plan, where the exact search proved it)."""
    search = auto_build(s, scenario_workload(s), several_chunks=False).plan.meta["search"]
    return max(0.0, search["passes_ms"] / max(search["bound_ms"], search.get("shortest_ms", 0.0)) - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comm", choices=("async", "rendezvous"), default="async")
    args = ap.parse_args()
    width = 12
    head = (f"{'case':31s} {'budget':>6s} " + " ".join(f"{n[:width]:>{width}s}" for n in SCHEDULES)
            + "   gain  1-stage gap  picked")
    print(f"step time ms (peak micro-batches held per rank; * over the budget, - cannot run); comm {args.comm}\n{head}")
    gains, gaps = [], []
    t0 = time.perf_counter()
    for name, (p, m, forward, w_share, p2p) in CASES.items():
        for budget in (p / 2, p, 1.5 * p, 2 * p):
            cells, fitting = [], []
            for sched in SCHEDULES:
                try:
                    pred = predict(scenario(p, m, forward, w_share, p2p, sched, budget, args.comm))
                except PpsimError:
                    cells.append("-".rjust(width))
                    continue
                s = summarize(pred.trace)
                held = max(r.peak_activation_microbatches for r in s.per_rank)
                fits = held <= budget + 1e-9
                cells.append(f"{s.step_time_ms:.1f} ({held:g}){'' if fits else '*'}".rjust(width))
                if sched == "auto":
                    auto_ms, picked = s.step_time_ms, pred.plan.meta["search"]["chosen"]
                    assert fits, f"auto exceeded the budget in {name}"
                elif fits:
                    fitting.append(s.step_time_ms)
            gain = (min(fitting) - auto_ms) / min(fitting) if fitting else 0.0
            gap = one_stage_gap(scenario(p, m, forward, w_share, p2p, "auto", budget, args.comm))
            gains.append(gain)
            gaps.append(gap)
            print(f"{name:31s} {budget:6.1f} " + " ".join(cells) + f"  {100 * gain:+5.1f}%  {100 * gap:+7.2f}%  {picked}")
    print(f"\n{len(gains)} cases in {time.perf_counter() - t0:.1f} s: auto beats the best hand-written schedule "
          f"that fits in {sum(g > 1e-9 for g in gains)}, ties in {sum(abs(g) <= 1e-9 for g in gains)}; "
          f"largest gain {100 * max(gains):.2f}%, smallest {100 * min(gains):+.2f}%")
    print("never slower than a hand-written schedule at the same budget:", "yes" if min(gains) >= -1e-9 else "NO")
    print(f"auto's best plan of one stage per rank ends its passes at the bound or the proven shortest (no such "
          f"plan can be faster) in "
          f"{sum(g < 5e-4 for g in gaps)} of {len(gaps)} cases; at most {100 * max(gaps):.2f}% above it")


if __name__ == "__main__":
    main()
