"""How much of a prediction is the profile's noise: N fresh profiles of one scenario, one plan predicted from each.

Each profile (``ppexec profile``: 2 ranks, the runtime's own overheads) predicts the same plans
(``ppsim run --profile`` with the runtime's send semantics; by default GPipe and 1F1B with 5
micro-batches). Printed per profile: the predicted step of each plan and its *within-profile*
spread, the estimate ``ppexec validate`` prints beside a step-time error (half the range of the
steps predicted with every timing of that profile at its lower and upper quartile, over the
prediction). Then, per plan, the *profile-to-profile* spread of the N predictions: their median,
their range over the median and half their inter-quartile range over the median. Where the
within-profile estimate is close to the profile-to-profile spread, one profile's figure says how
far apart fresh profiles land; where it is much smaller, the machine drifts between profiles by
more than a profile's repetitions show.

Figures only: nothing here passes or fails. The machine's load average is printed before and
after: compare only figures measured together.

    .venv/bin/python bench/profile_spread.py                       # 5 profiles of tiny-cpu (~2-3 min)
    .venv/bin/python bench/profile_spread.py --profiles 3 --schedules gpipe --microbatches 8
    .venv/bin/python bench/profile_spread.py --json spread.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()[0]:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "tiny-cpu.yaml")
    ap.add_argument("--profiles", type=int, default=5, help="fresh profiles to measure, one after the other")
    ap.add_argument("--runtime", default="deepspeed", choices=("deepspeed", "torch"))
    ap.add_argument("--schedules", default="gpipe,1f1b", help="comma-separated: the plans predicted from each profile")
    ap.add_argument("--microbatches", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = ap.parse_args()
    if args.profiles < 1:
        ap.error("--profiles must be at least 1")
    from ppexec.measure.profile import measure_profile
    from ppexec.measure.stats import quartiles
    from ppexec.results.prediction_check import predict_as_run, profile_spread
    from ppsim.inputs.scenario import load

    base = load(args.scenario)
    schedules = args.schedules.split(",")
    cases = {name: base.with_overrides(schedule=name, microbatches=args.microbatches) for name in schedules}
    print(f"# {args.scenario.name}, {args.runtime} runtime, 2 ranks; plans: "
          + ", ".join(f"{name} m={args.microbatches}" for name in schedules))
    print(f"# before: {uptime()}")
    head = f"{'profile':>7} {'secs':>5} {'block F':>8} {'block B':>8}"
    for name in schedules:
        head += f" {name + ' ms':>12} {'within':>7}"
    print(head, flush=True)
    rows: list[dict] = []
    for k in range(args.profiles):
        t0 = time.perf_counter()
        profile = measure_profile(base, runtime=args.runtime)
        seconds = time.perf_counter() - t0
        row: dict = {"profile": k + 1, "seconds": seconds, "block_forward_ms": profile.block.forward_ms,
                     "block_backward_ms": profile.block.backward_ms, "plans": {}}
        line = f"{k + 1:>7} {seconds:>5.0f} {profile.block.forward_ms:>8.3f} {profile.block.backward_ms:>8.3f}"
        for name, s in cases.items():
            _, _, prediction = predict_as_run(s, profile, args.runtime)
            spread = profile_spread(prediction, profile)
            assert spread is not None  # a fresh profile records its quartiles
            row["plans"][name] = {"predicted_ms": spread.predicted_ms, "low_ms": spread.low_ms,
                                  "high_ms": spread.high_ms, "within": spread.relative}
            line += f" {spread.predicted_ms:>12.2f} {100 * spread.relative:>6.1f}%"
        rows.append(row)
        print(line, flush=True)
    print(f"# after: {uptime()}")
    summary = {}
    print(f"\n{'plan':10} {'median ms':>10} {'range/med':>10} {'halfIQR/med':>12}   {'within: median':>15} "
          f"{'min':>6} {'max':>6}")
    for name in schedules:
        preds = [r["plans"][name]["predicted_ms"] for r in rows]
        within = [r["plans"][name]["within"] for r in rows]
        q1, med, q3 = quartiles(preds)
        rng = (max(preds) - min(preds)) / med
        half_iqr = (q3 - q1) / 2 / med
        summary[name] = {"predictions_ms": preds, "median_ms": med, "range": rng, "half_iqr": half_iqr,
                         "within": within}
        print(f"{name:10} {med:>10.2f} {100 * rng:>9.1f}% {100 * half_iqr:>11.1f}%   {100 * statistics.median(within):>14.1f}% "
              f"{100 * min(within):>5.1f}% {100 * max(within):>5.1f}%")
    print("\nrange/med, halfIQR/med: the spread of the predictions from profile to profile; within: the spread each "
          "profile estimates\nfrom its own quartiles (ppexec validate's 'profile spread'), as a median and range "
          "over the profiles")
    if args.json:
        args.json.write_text(json.dumps({"scenario": str(args.scenario), "runtime": args.runtime,
                                         "microbatches": args.microbatches, "profiles": rows, "summary": summary},
                                        indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
