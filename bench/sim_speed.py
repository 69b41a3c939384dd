"""How fast ppsim plans and simulates, against torch.distributed.pipelining's schedule generator.

Prints, for 1F1B p=64 m=512 and interleaved 1F1B p=32 m=256 v=2: the wall time of building the
schedule, lowering it (sends, receives, end of step) and simulating it with timing, link bandwidth
and activation memory; simulated actions per second. When torch is installed, it also times
torch's own generation of the same interleaved schedule with communication
(``_schedule_visualizer.get_schedule_ops(..., with_comms=True)``, which has no notion of time,
bandwidth or memory) in the same run, and prints the ratio. Each figure is the best of N repeats.

    python bench/sim_speed.py [--repeats N]
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

from ppsim.costs import CostTable, Link, StageCost
from ppsim.plan import lower, schedules
from ppsim.sim import compute_ms, simulate


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def costs_for(num_stages: int, chunks: int) -> CostTable:
    """A GPT-like stage: F 1 ms, B 2 ms per stage; 16 MiB activations over a 25 GB/s, 5 us link."""
    stage = StageCost(forward_ms=1.0 / chunks, backward_ms=2.0 / chunks, weight_grad_ms=1.0 / chunks,
                      optimizer_ms=0.5, activation_bytes=1 << 26)
    return CostTable(stages=(stage,) * num_stages, message_bytes=1 << 24, links=(Link.from_gb_s(25.0, 5.0),))


def ppsim_case(name: str, p: int, m: int, v: int, comm: str, repeats: int) -> tuple[float, float, int]:
    costs = costs_for(p * v, v)
    rendezvous = comm == "rendezvous"

    def plan_only() -> object:
        return lower(schedules.build(name, p, m, v), 1, compute_ms(costs), rendezvous=rendezvous)

    lowered = lower(schedules.build(name, p, m, v), 1, compute_ms(costs), rendezvous=rendezvous)
    t_plan = best_of(repeats, plan_only)
    t_total = best_of(repeats, lambda: simulate(plan_only(), costs, comm))  # type: ignore[arg-type]
    return t_plan, t_total, lowered.num_actions()


def torch_case(p: int, m: int, v: int, repeats: int) -> float | None:
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    except ImportError:
        return None
    warnings.filterwarnings("ignore")
    return best_of(repeats, lambda: get_schedule_ops("Interleaved1F1B", p, m, v, with_comms=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':<36} {'comm':<11} {'actions':>8} {'plan s':>8} {'plan+sim s':>11} {'actions/s':>11}")
    results = {}
    for name, p, m, v in (("1f1b", 64, 512, 1), ("interleaved-1f1b", 32, 256, 2)):
        for comm in ("async", "rendezvous"):
            t_plan, t_total, n = ppsim_case(name, p, m, v, comm, args.repeats)
            results[(name, comm)] = t_total
            label = f"{name} p={p} m={m} v={v}"
            print(f"{label:<36} {comm:<11} {n:>8} {t_plan:>8.3f} {t_total:>11.3f} {n / t_total:>11,.0f}")
    target = results[("1f1b", "async")]
    print(f"\n1f1b p=64 m=512 end to end (async): {target:.3f} s (target < 1 s): {'ok' if target < 1 else 'MISSED'}")
    t_torch = torch_case(32, 256, 2, args.repeats)
    if t_torch is None:
        print("torch not installed: no comparison with torch.distributed.pipelining")
        return
    for comm in ("async", "rendezvous"):
        ours = results[("interleaved-1f1b", comm)]
        ratio = t_torch / ours
        print(
            f"interleaved p=32 m=256 v=2: torch get_schedule_ops(with_comms) {t_torch:.3f} s, "
            f"ppsim plan+simulate ({comm}) {ours:.3f} s: ppsim {ratio:.1f}x faster (target >= 5x): "
            f"{'ok' if ratio >= 5 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
