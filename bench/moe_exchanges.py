"""Where an expert-parallel step's all-to-alls spend their time on this machine: one validation of
``scenarios/moe-cpu.yaml`` (one stage over 2 replicas, expert parallelism 2, gloo), then every
exchange of its recorded steps on both ranks' clock (one machine, one clock).

Per exchange: the **arrival gap** (how long the first rank to arrive waits for the other: the
routing's imbalance and every stall of either rank) and the time **after the last arrival** (the
exchange itself), each as median, mean, 90th percentile and maximum, against what the profile's
all-to-all link prices one exchange at. A step adds up all of them, so their means are what it
pays. Printed besides: the prediction, the run, and the prediction again at the run's routing
skew (``ppexec validate``'s row).

    .venv/bin/python bench/moe_exchanges.py                       # profile, run, analyse (~80 s)
    .venv/bin/python bench/moe_exchanges.py --profile moe.profile.yaml --microbatches 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIO = ROOT / "scenarios" / "moe-cpu.yaml"


@dataclass(frozen=True)
class Spread:
    median: float
    mean: float
    p90: float
    max: float

    @classmethod
    def of(cls, xs: list[float]) -> Spread:
        ordered = sorted(xs)
        return cls(statistics.median(xs), statistics.mean(xs), ordered[int(0.9 * (len(xs) - 1))], ordered[-1])

    def __str__(self) -> str:
        return f"median {self.median:.3f}  mean {self.mean:.3f}  p90 {self.p90:.3f}  max {self.max:.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=None, help="a profile of moe-cpu.yaml (default: measure one)")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    from ppexec.measure.profile import measure_profile
    from ppexec.results.prediction_check import validate
    from ppexec.worker.events import exchange_spans, exchanges
    from ppsim.costs.moe import ExpertShard, alltoall_ms
    from ppsim.costs.profiled import profile_link
    from ppsim.inputs.profile import load_profile
    from ppsim.inputs.scenario import DTYPE_BYTES, load

    s = load(SCENARIO).with_overrides(microbatches=args.microbatches)
    profile = load_profile(args.profile) if args.profile else measure_profile(s, runtime="torch")
    with tempfile.TemporaryDirectory(prefix="ppsim-moe-exchanges-") as tmp:
        v = validate(s, profile, Path(tmp) / "run", steps=args.steps, warmup=2, runtime="torch")
    c = v.comparison
    print(f"step: predicted {c.predicted_step_time_ms:.1f} ms, measured {c.measured_step_time_ms:.1f} ms, "
          f"error {100 * c.step_time_error:+.1f} %")
    if v.run_routing is not None:
        print(f"with the run's routing: {v.run_routing.describe()}")
    gaps, after, per_step = [], [], []
    for k in range(len(v.run.states[0].steps)):
        g, a = exchange_spans([exchanges(st.steps[k].marks) for st in v.run.states])
        gaps += g
        after += a
        per_step.append(len(g))
    m = s.model
    assert m is not None and m.moe is not None  # moe-cpu.yaml has experts
    link = profile_link(profile.collectives["alltoall"])
    priced = alltoall_ms(ExpertShard(m.moe).dispatch_bytes(m.seq_len * s.training.micro_batch, m.hidden,
                                                         DTYPE_BYTES[m.dtype]),
                         s.expert_parallel, link)
    print(f"{len(gaps)} exchanges ({statistics.median(per_step):.0f} a step); the profile prices one at {priced:.3f} ms")
    print(f"arrival gap          {Spread.of(gaps)}")
    print(f"after the last one   {Spread.of(after)}")
    n = statistics.median(per_step)
    print(f"a step's exchanges at their means: {n * statistics.mean(gaps):.1f} ms waiting, "
          f"{n * statistics.mean(after):.1f} ms exchanging (priced {n * priced:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
