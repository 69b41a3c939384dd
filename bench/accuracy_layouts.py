"""Predicted against measured for the parallel layouts and memory savers ppexec runs beyond a plain
pipeline: activation recomputation (full, selective), ZeRO-1 over 2 data-parallel replicas, and
2-way tensor parallelism, each next to the plain 2-stage pipeline measured in the same batch.

Every case uses 2 ranks (this machine's 2 cores), one profile per model measured first
(``ppexec profile``: it times what recomputation adds to a block, a block split over the two
ranks, and the all-reduce and all-gather), then for each case a prediction with that profile, a
real run (``ppexec validate``) and the comparison of the median step. The plain pipeline runs
first and again last: how far apart its two measurements land is the noise of this machine in the
batch, the floor no prediction can beat.

    .venv/bin/python bench/accuracy_layouts.py                  # small model, all cases (~6 min)
    .venv/bin/python bench/accuracy_layouts.py --models small,medium --microbatches 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from accuracy import MODELS, spread  # noqa: E402

from ppsim.inputs.scenario import Scenario, parse_scenario  # noqa: E402

#: name -> what changes from the plain 2-stage pipeline (always 2 ranks)
LAYOUTS: dict[str, dict] = {
    "pipeline": {},
    "recompute full": {"training": {"recompute": "full"}},
    "recompute selective": {"training": {"recompute": "selective"}},
    "data parallel 2": {"pipeline": {"stages": 1}, "data_parallel": 2},
    "zero-1 dp 2": {"pipeline": {"stages": 1}, "data_parallel": 2, "training": {"zero_stage": 1}},
    "tensor parallel 2": {"pipeline": {"stages": 1}, "tensor_parallel": 2},
}


def scenario(model: str, layout: str, m: int) -> Scenario:
    change = LAYOUTS[layout]
    return parse_scenario({
        "name": f"layouts-{model}",
        "model": MODELS[model],
        "training": {"micro_batch": 4, **change.get("training", {})},
        "pipeline": {"stages": 2, "microbatches": m, "schedule": "1f1b", "comm": "rendezvous", "partition": "balanced",
                     **change.get("pipeline", {})},
        "data_parallel": change.get("data_parallel", 1),
        "tensor_parallel": change.get("tensor_parallel", 1),
        "hardware": {"device": "cpu"},
    }, source=f"bench case {model} {layout}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="small", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated: " + ", ".join(LAYOUTS))
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    from ppexec.measure.profile import measure_profile
    from ppexec.results.prediction_check import validate
    from ppsim.trace.metrics import step_time_ms

    layouts = args.layouts.split(",")
    bad = [x for x in layouts if x not in LAYOUTS] + [m for m in args.models.split(",") if m not in MODELS]
    if bad:
        ap.error(f"unknown {bad}; layouts: {list(LAYOUTS)}, models: {list(MODELS)}")
    print(f"{'model':6} {'layout':20} {'pred ms':>9} {'meas ms':>9} {'error':>8} {'spread':>7}", flush=True)
    errors: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ppsim-layouts-") as tmp:
        for model in args.models.split(","):
            t0 = time.perf_counter()
            profile = measure_profile(scenario(model, "pipeline", args.microbatches))
            print(f"# {model}: profiled in {time.perf_counter() - t0:.0f} s", flush=True)
            plain: list[float] = []
            for k, layout in enumerate([*layouts, "pipeline"] if "pipeline" in layouts else layouts):
                v = validate(scenario(model, layout, args.microbatches), profile,
                             Path(tmp) / f"{model}-{k}", steps=args.steps, warmup=args.warmup)
                c = v.comparison
                again = layout == "pipeline" and bool(plain)
                if layout == "pipeline":
                    plain.append(c.measured_step_time_ms)
                if not again:
                    errors.append(c.step_time_error)
                print(f"{model:6} {layout:20} {c.predicted_step_time_ms:9.2f} {c.measured_step_time_ms:9.2f} "
                      f"{100 * c.step_time_error:+7.2f}% {100 * spread([step_time_ms(t) for t in v.run.traces]):6.1f}%"
                      + ("  (again)" if again else ""), flush=True)
            if len(plain) == 2:
                print(f"# {model}: the plain pipeline measured {plain[0]:.1f} and {plain[1]:.1f} ms, "
                      f"{100 * abs(plain[1] - plain[0]) / statistics.median(plain):.1f}% apart (this batch's noise)")
    print(f"\ncases: {len(errors)}   median |step-time error| {100 * statistics.median(map(abs, errors)):.2f}%   "
          f"max {100 * max(map(abs, errors)):.2f}%   median signed {100 * statistics.median(errors):+.2f}%   "
          f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
