"""``auto`` against the hand-written schedules at the same activation budget.

For each case (even and uneven stages, fast and slow links, few and many micro-batches) and each
budget from p to 2p micro-batches per rank, prints the predicted step time and the most
micro-batches a rank holds for 1F1B, ZB-H1, ZB-H2 and auto, side by side. A hand-written schedule
whose peak exceeds the budget is shown but marked ``over`` (it is not a fair comparison there).
auto must never be slower than a hand-written schedule that fits; then comes its gain over the
best one that fits, and how far the end of its passes (the step less its fixed end: clipping's
all-reduce, the optimizer) lies above a bound no plan can beat (``auto.lower_bound``), and what
it picked. The costs are explicit milliseconds per stage (F, full backward, weight grad),
messages pure latency, communication non-blocking.

    python bench/auto_schedule.py [--comm async|rendezvous]
"""

from __future__ import annotations

import argparse
import time

from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.predict import predict
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
SCHEDULES = ("1f1b", "zb-h1", "zb-h2", "auto")


def scenario(p: int, m: int, forward: object, w_share: float, p2p: float, schedule: str, budget: float,
             comm: str) -> Scenario:
    f = forward if isinstance(forward, list) else [forward] * p
    return parse_scenario({
        "name": "bench-auto",
        "pipeline": {"stages": p, "microbatches": m, "schedule": schedule, "memory_budget": budget, "comm": comm},
        "costs": {"forward_ms": f, "backward_ms": [2 * x for x in f], "weight_grad_ms": [2 * w_share * x for x in f],
                  "p2p_ms": p2p}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comm", choices=("async", "rendezvous"), default="async")
    args = ap.parse_args()
    head = (f"{'case':32s} {'budget':>6s} " + " ".join(f"{n:>15s}" for n in SCHEDULES)
            + "   auto gain  to bound  picked")
    print(f"step time ms (peak micro-batches held per rank); comm {args.comm}\n{head}")
    worst_gain = float("inf")
    gains, gaps = [], []
    t0 = time.perf_counter()
    for name, (p, m, forward, w_share, p2p) in CASES.items():
        for budget in (p, 1.5 * p, 2 * p):
            cells, fitting = [], []
            picked = ""
            for sched in SCHEDULES:
                pred = predict(scenario(p, m, forward, w_share, p2p, sched, budget, args.comm))
                s = summarize(pred.trace)
                held = max(r.peak_activation_microbatches for r in s.per_rank)
                fits = held <= budget + 1e-9
                cells.append(f"{s.step_time_ms:8.2f} ({held:>2g}){'' if fits else ' over'}".rjust(15))
                if sched == "auto":
                    auto_ms = s.step_time_ms
                    search = pred.plan.meta["search"]
                    picked = search["chosen"]
                    gap = max(0.0, search["passes_ms"] / search["bound_ms"] - 1)
                    assert fits, f"auto exceeded the budget in {name}"
                elif fits:
                    fitting.append(s.step_time_ms)
            best = min(fitting)
            gain = (best - auto_ms) / best
            worst_gain = min(worst_gain, gain)
            gains.append(gain)
            gaps.append(gap)
            print(f"{name:32s} {budget:6.1f} " + " ".join(cells) + f"   {100 * gain:+6.2f}%  {100 * gap:+7.2f}%  {picked}")
    print(f"\n{len(gains)} cases in {time.perf_counter() - t0:.1f} s: auto beats the best hand-written schedule "
          f"that fits in {sum(g > 1e-9 for g in gains)}, ties in {sum(abs(g) <= 1e-9 for g in gains)}; "
          f"largest gain {100 * max(gains):.2f}%, smallest {100 * worst_gain:+.2f}%")
    print("never slower than a hand-written schedule at the same budget:", "yes" if worst_gain >= -1e-9 else "NO")
    print(f"auto's passes end at the bound (no plan can be faster) in {sum(g < 5e-4 for g in gaps)} of {len(gaps)} "
          f"cases; at most {100 * max(gaps):.2f}% above it")


if __name__ == "__main__":
    main()
