"""How fast ppsim plans a mixture of experts on 2,048 GPUs (issue 33's targets), as whole processes.

1. ``ppsim run scenarios/deepseek-v3.yaml`` (PP16 DualPipeV, EP64, 2,048 H800s): target <= 1 s.
2. ``ppsim tune scenarios/deepseek-v3.yaml`` over every plan of the 2,048 GPUs, expert parallelism
   included (its count of plans printed): target <= 60 s on every core of the machine.

Baseline, timed in the same run between the others: ``ppsim run scenarios/gpt.yaml`` (8 stages of a
dense model), so that a slow machine shows as a slow baseline. Each ``run`` figure is the median of
N repeats, alternating with the baseline; ``tune`` runs once (it takes most of a minute). The
machine is shared: compare figures of one run only. The processes write and reuse their bytecode
as an installed ppsim does, even where the environment sets PYTHONDONTWRITEBYTECODE.

    python bench/moe_speed.py [--repeats N] [--no-tune]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOE = ROOT / "scenarios" / "deepseek-v3.yaml"
DENSE = ROOT / "scenarios" / "gpt.yaml"
RUN_TARGET_S, TUNE_TARGET_S = 1.0, 60.0


#: the processes' environment: this one's, but allowed to write bytecode, so that the first call
#: caches it as an installed package's is (PYTHONDONTWRITEBYTECODE would have every run compile
#: ppsim's modules again, a cost no installed ppsim pays)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(*args: str) -> tuple[float, str]:
    """Wall seconds of ``ppsim ARGS`` as a whole process, and its last line of output."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ppsim.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=ENV)
    dt = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"ppsim {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return dt, done.stdout


def verdict(seconds: float, target: float) -> str:
    return "met" if seconds <= target else "MISSED"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-tune", action="store_true", help="time ppsim run only")
    args = ap.parse_args()
    timed("run", str(DENSE))  # bytecode written and cached, files in the page cache
    moe, dense = [], []
    for _ in range(args.repeats):  # alternate A and B
        moe.append(timed("run", str(MOE))[0])
        dense.append(timed("run", str(DENSE))[0])
    run_s, base_s = statistics.median(moe), statistics.median(dense)
    print(f"ppsim run {MOE.name}: median {run_s:.2f} s (min {min(moe):.2f}, max {max(moe):.2f}) over {args.repeats}; "
          f"target <= {RUN_TARGET_S:.0f} s: {verdict(run_s, RUN_TARGET_S)}")
    print(f"baseline ppsim run {DENSE.name}: median {base_s:.2f} s (min {min(dense):.2f}, max {max(dense):.2f}); "
          f"ratio {run_s / base_s:.2f}x")
    if args.no_tune:
        return
    tune_s, out = timed("tune", str(MOE))
    counts = next((line for line in out.splitlines() if "plans considered" in line), "").strip()
    print(f"ppsim tune {MOE.name}: {tune_s:.1f} s ({tune_s / base_s:.0f}x the baseline run); "
          f"target <= {TUNE_TARGET_S:.0f} s: {verdict(tune_s, TUNE_TARGET_S)}")
    print(f"  {counts}")


if __name__ == "__main__":
    main()
