"""``auto``'s search of one stage per rank against the zero-bubble authors' greedy scheduler.

The authors' scheduler (Qi et al., 2024; the initial solution of their repository's scheduler)
runs eight variants of one greedy rule under one memory cap and keeps the one whose longest stage
span is shortest. ppsim's :mod:`~ppsim.plan.order_search.wavefront` is that greedy (its orders
equal the authors' on 432 checks: 54 settings x 8 variants, their code run outside the project).
Here it gets the same costs (each stage's own, not their median) and the same budget as ``auto``,
and both plans are simulated by ppsim. Twelve settings: p = 4 and 8 stages (m = 4p, 3p), even
stages, a heavy last stage (the LM head, x1.5) and a heavy first one (the embedding, x1.3), each
at 1F1B's memory (p micro-batches) and at 1.5p; messages pure latency (F / 10). Prints both step
times, auto's gain, the bound no plan of one stage per rank can beat, what auto picked, and
whether auto was ever behind (it must not be).

    python bench/auto_vs_greedy.py
"""

from __future__ import annotations

import time

from ppsim.inputs.scenario import Scenario, parse_scenario
from ppsim.plan.order_search.bound import lower_bound
from ppsim.plan.order_search.timeline import timeline
from ppsim.plan.order_search.wavefront import VARIANTS, wavefront
from ppsim.plan.schedules.base import make_plan
from ppsim.prediction import Built, predict, scenario_workload
from ppsim.prediction.auto import auto_build, auto_inputs
from ppsim.trace.metrics import summarize

SHAPES = {"even": (1.0, 1.0), "last x1.5 (LM head)": (1.0, 1.5), "first x1.3 (embedding)": (1.3, 1.0)}


def scenario(p: int, m: int, first: float, last: float, budget: float) -> Scenario:
    f = [first] + [1.0] * (p - 2) + [last]
    return parse_scenario({
        "name": "bench-greedy",
        "pipeline": {"stages": p, "microbatches": m, "schedule": "auto", "memory_budget": budget},
        "costs": {"forward_ms": f, "backward_ms": [2 * x for x in f], "weight_grad_ms": list(f), "p2p_ms": 0.1}})


def greedy_step(s: Scenario) -> tuple[float, str]:
    """The authors' pick (the variant whose longest stage span is shortest) simulated, and its name."""
    w = scenario_workload(s)
    timing, budget = auto_inputs(s, w.costs)
    p, m = s.pipeline.stages, s.microbatches
    best = None
    for variant in VARIANTS:
        made = wavefront(p, m, timing, budget, variant)
        if made is None:
            continue
        t = timeline(made[0], timing)
        assert t is not None
        span = max(e[-1] - st[0] for st, e in zip(t.starts, t.ends, strict=True))
        if best is None or span < best[0]:
            best = (span, made[0], variant.words())
    assert best is not None
    plan = make_plan("auto", p, m, 1, best[1])
    return summarize(predict(s, built=Built(s, plan, w)).trace).step_time_ms, best[2]


def main() -> None:
    rows = []
    started = time.perf_counter()
    for p, m in ((4, 16), (8, 24)):
        for shape, (first, last) in SHAPES.items():
            for budget in (float(p), 1.5 * p):
                s = scenario(p, m, first, last, budget)
                greedy, variant = greedy_step(s)
                built = auto_build(s, scenario_workload(s), several_chunks=False)
                ours = summarize(predict(s, built=built).trace).step_time_ms
                search = built.plan.meta["search"]
                timing, caps = auto_inputs(s, built.workload.costs)
                rows.append((f"p={p} m={m} {shape}, budget {budget:g}", greedy, ours,
                             lower_bound(p, m, timing, caps), str(search["chosen"]), variant))
    print(f"{'setting':42} {'greedy ms':>10} {'auto ms':>10} {'gain':>7} {'bound':>8}  auto picked")
    for name, greedy, ours, bound, chosen, _ in rows:
        print(f"{name:42} {greedy:10.3f} {ours:10.3f} {(1 - ours / greedy) * 100:6.2f}% {bound:8.2f}  {chosen}")
    behind = [r[0] for r in rows if r[2] > r[1] + 1e-9]
    gains = [(1 - r[2] / r[1]) * 100 for r in rows]
    print(f"\nauto ahead in {sum(g > 1e-9 for g in gains)} of {len(rows)}, level in "
          f"{sum(abs(g) <= 1e-9 for g in gains)}, behind in {len(behind)}{': ' + ', '.join(behind) if behind else ''}; "
          f"gain {min(gains):.2f} to {max(gains):.2f} % ({time.perf_counter() - started:.1f} s)")
    print("never behind the authors' greedy: " + ("ok" if not behind else "MISSED"))


if __name__ == "__main__":
    main()
