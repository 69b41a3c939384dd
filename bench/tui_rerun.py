"""How long a plan key in ``ppsim tui`` takes: rerun the simulation (predict + summarize) and draw
the timeline at 160 columns, for every scenario in scenarios/; then the same key pressed in the app
(Textual's pilot, headless, 160 x 45), from the press to the end of the screen's redraw, and what of
that is the TUI's own (the press less its simulation). The issue's target: typical scenarios well
under 100 ms. The draw's share is printed against the simulation measured in the same run.
Cluster routes are remembered per (stages, data, tensor parallel) shape, so the repeats time a key
that keeps that shape (schedule, micro-batches); the first run of a shape also routes the cluster.

    python bench/tui_rerun.py [--repeats N] [--scenario NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize
from ppsim.views.tui.state import TuiState
from ppsim.views.tui.timeline import draw

PRESSES = ["m", "M"]  #: halve, double the micro-batches: a plan key that keeps the cluster's shape

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 100.0


def median_ms(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def press_ms(state: TuiState, repeats: int) -> tuple[float, float]:
    """Medians of a plan key pressed in the app: (press to redrawn screen, of it the TUI's own)."""
    from textual.screen import Screen

    from ppsim.views.tui.app import PpsimTui

    redrawn: list[float] = []
    refresh = Screen._compositor_refresh  # textual is pinned: the end of a screen update

    def timed(self: Screen) -> None:
        refresh(self)
        redrawn.append(time.perf_counter())

    async def drive() -> tuple[list[float], list[float]]:
        app = PpsimTui(state, show_timing=False)
        totals, own = [], []
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause()
            for i in range(repeats):
                redrawn.clear()
                t0 = time.perf_counter()
                await pilot.press(PRESSES[i % 2])
                await pilot.pause(0.05)
                total = (redrawn[-1] - t0) * 1e3
                totals.append(total)
                own.append(total - (state.rerun_ms or 0.0))
        return totals, own

    Screen._compositor_refresh = timed  # type: ignore[method-assign]
    try:
        totals, own = asyncio.run(drive())
    finally:
        Screen._compositor_refresh = refresh  # type: ignore[method-assign]
    return statistics.median(totals), statistics.median(own)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--scenario", default="", help="only the scenarios whose file name holds this")
    args = ap.parse_args()
    print(f"{'scenario':<28} {'spans':>7} {'simulate ms':>12} {'draw ms':>8} {'key ms':>8} {'draw/sim':>9}  "
          f"{'press ms':>9} {'TUI ms':>7}  target")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        if args.scenario and args.scenario not in path.stem:
            continue
        s = load(path)
        state = TuiState.from_scenario(s, lambda s: predict(s).trace)
        trace = state.shown[0].trace
        sim = median_ms(args.repeats, lambda s=s: summarize(predict(s).trace))
        w = state.window
        drawn = median_ms(args.repeats, lambda trace=trace, w=w: draw(trace, w.start, w.end, 151))
        key = sim + drawn
        press, own = press_ms(state, args.repeats)
        verdict = "ok" if key < TARGET_MS else "over"
        print(f"{s.name:<28} {len(trace.spans):>7} {sim:>12.1f} {drawn:>8.1f} {key:>8.1f} {drawn / sim:>9.2f}  "
              f"{press:>9.1f} {own:>7.1f}  {verdict} (< {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
