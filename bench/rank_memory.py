"""One rank of a plan run alone (``ppexec rank``, issue 35) against ppsim's prediction of it, for
every rank of small CPU plans of several schedules: the peak memory predicted against measured by
the allocator (torch's profiler memory events on a CPU: the same bytes on any machine), the action
at which each is reached, the model states, and compute per action kind (this machine's times
against datasheet costs: a calibrated profile is what makes those agree, see docs/calibration.md).

    python bench/rank_memory.py [--steps N]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import torch

from ppexec.rank.check import as_built, check_rank
from ppsim.api import predict
from ppsim.inputs.scenario import load

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
PLANS: list[tuple[str, dict[str, Any]]] = [
    ("tiny-cpu", {"schedule": "1f1b"}),
    ("tiny-cpu", {"schedule": "gpipe"}),
    ("tiny-cpu", {"schedule": "interleaved-1f1b", "chunks": 2}),
    ("tiny-cpu", {"schedule": "zb-h1"}),
    ("tiny-cpu", {"schedule": "dualpipev", "chunks": 2}),
    ("tiny-cpu", {"schedule": "1f1b", "recompute": "full"}),
    ("tiny-cpu", {"schedule": "1f1b", "recompute": "selective"}),
    ("tiny-cpu", {"schedule": "1f1b", "training.flash_attention": True}),
    ("small-cpu", {"training.flash_attention": True}),
    ("small-cpu", {}),
]


def variant(s: Any, plan: dict[str, Any]) -> Any:
    """``s`` with plan options and ``section.key`` settings laid over it."""
    from ppsim.inputs.scenario import parse_scenario

    options = {k: v for k, v in plan.items() if "." not in k}
    s = s.with_overrides(**options) if options else s
    keys = {k: v for k, v in plan.items() if "." in k}
    if not keys:
        return s
    data = s.model_dump(exclude_none=True)
    for key, value in keys.items():
        section, name = key.split(".")
        data.setdefault(section, {})[name] = value
    return parse_scenario(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="timed steps per rank (the first not counted)")
    args = ap.parse_args()
    torch.manual_seed(0)
    print(f"{'plan':<40} {'rank':>4} {'pred. MiB':>10} {'at':>6} {'meas. MiB':>10} {'at':>6} {'error':>7} "
          f"{'in-action':>10} {'states':>7}  compute per kind, predicted/measured ms")
    errors: list[float] = []
    for name, plan in PLANS:
        s = load(ROOT / "scenarios" / f"{name}.yaml")
        s = as_built(variant(s, plan))[0]  # ppexec's blocks have no dropout
        prediction = predict(s)
        label = f"{name} " + " ".join(f"{k}={v}" for k, v in plan.items())
        for r in range(prediction.plan.num_ranks):
            c = check_rank(s, prediction, r, torch.device("cpu"), steps=args.steps, waits=False)
            err = (c.predicted_peak_bytes - c.measured_between_bytes) / c.measured_between_bytes
            errors.append(err)
            exact = all(p == m for p, m in c.model_states.values())
            kinds = " ".join(f"{k} {p:.1f}/{m:.1f}" for k, (p, m) in c.kinds.items())
            print(f"{label:<40} {r:>4} {c.predicted_peak_bytes / MIB:10.2f} {c.predicted_peak_at or '-':>6} "
                  f"{c.measured_between_bytes / MIB:10.2f} {c.measured_between_at:>6} {err:+7.1%} "
                  f"{c.measured_peak_bytes / MIB:10.2f} {'exact' if exact else 'DIFFER':>7}  {kinds}")
    print(f"\npeak memory (between actions), predicted against measured, {len(errors)} ranks: median error "
          f"{statistics.median(errors):+.1%}, median |error| {statistics.median(map(abs, errors)):.1%}, "
          f"largest |error| {max(map(abs, errors)):.1%}")


if __name__ == "__main__":
    main()
