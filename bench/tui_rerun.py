"""How long a plan key in ``ppsim tui`` takes: rerun the simulation (predict + summarize) and draw
the timeline at 160 columns, for every scenario in scenarios/. The issue's target: typical scenarios
well under 100 ms. The draw's share is printed against the simulation measured in the same run.
Cluster routes are remembered per (stages, data, tensor parallel) shape, so the repeats time a key
that keeps that shape (schedule, micro-batches); the first run of a shape also routes the cluster.

    python bench/tui_rerun.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize
from ppsim.views.tui.state import TuiState
from ppsim.views.tui.timeline import draw

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 100.0


def median_ms(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(f"{'scenario':<28} {'spans':>7} {'simulate ms':>12} {'draw ms':>8} {'key ms':>8} {'draw/sim':>9}  target")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        s = load(path)
        state = TuiState.from_scenario(s)
        trace = state.shown[0].trace
        sim = median_ms(args.repeats, lambda s=s: summarize(predict(s).trace))
        w = state.window
        drawn = median_ms(args.repeats, lambda trace=trace, w=w: draw(trace, w.start, w.end, 151))
        key = sim + drawn
        verdict = "ok" if key < TARGET_MS else "over"
        print(f"{s.name:<28} {len(trace.spans):>7} {sim:>12.1f} {drawn:>8.1f} {key:>8.1f} {drawn / sim:>9.2f}  "
              f"{verdict} (< {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
