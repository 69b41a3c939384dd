"""How fast ppsim plans and simulates, against baselines measured in the same run (issue 19's targets).

1. 1F1B at three sizes (p=32 m=256, p=64 m=512, p=128 m=1024): build the schedule, lower it
   (sends, receives, end of step) and simulate it with timing, link bandwidth and activation
   memory, posted sends on static links. Prints each part, the cost per action (flat when the
   cost is linear in the plan) and the ratio to the floor: a minimal dependency-driven heap list
   scheduler written here (compute actions and a latency per message: no bandwidth, no memory,
   no trace), on the same 1F1B order.
2. Interleaved 1F1B p=32 m=256 v=2 against torch.distributed.pipelining's own generator with
   communication (``get_schedule_ops(..., with_comms=True)``, no notion of time), when torch is here.
3. GPT-3 175B on 1,024 GPUs (scenarios/megatron-gpt3-175b.yaml, network model on): ``ppsim run``
   as a whole process; in a fresh process, the first prediction, then a TUI plan key (the same
   scenario on 8 stages: a plan the process has not predicted, so nothing of it is remembered).
4. With ``--tune``: ``ppsim tune scenarios/gpt.yaml --gpus 64`` as a whole process.

Parts 1-2 allow ppsim to pause the garbage collector around its passes, as the ``ppsim`` command
does (``ppsim.allow_gc_pauses()``); a library call in a process that has not allowed it leaves the
collector alone, and part 1 ends with the middle case timed that way too.

Each figure is the best of N repeats, timed until the call returns (what it returned is freed
after the clock stops). The machine is shared: compare figures of one run only. The processes
timed have their bytecode cached, as an installed package does.

    python bench/sim_speed.py [--repeats N] [--tune]
"""

from __future__ import annotations

import argparse
import heapq
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from ppsim.costs import CostTable, Link, StageCost
from ppsim.gc_pause import allow_gc_pauses
from ppsim.plan import lower, schedules
from ppsim.sim import compute_ms, simulate

ROOT = Path(__file__).resolve().parent.parent
F_MS, B_MS, LATENCY_MS = 1.0, 2.0, 0.005


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """The least time ``fn()`` took to return. What it returned is freed after the clock stops
    (freeing 800k spans is the interpreter's work, not the simulator's; the whole-process
    figures include it)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        del result
    return best


def costs_for(num_stages: int, chunks: int) -> CostTable:
    """A GPT-like stage: F 1 ms, B 2 ms per stage; 16 MiB activations over a 25 GB/s, 5 us link."""
    stage = StageCost(forward_ms=F_MS / chunks, backward_ms=B_MS / chunks, weight_grad_ms=1.0 / chunks,
                      optimizer_ms=0.5, activation_bytes=1 << 26)
    return CostTable(stages=(stage,) * num_stages, message_bytes=1 << 24, links=(Link.from_gb_s(25.0, 5.0),))


def ppsim_case(name: str, p: int, m: int, v: int, repeats: int) -> tuple[float, float, float, int]:
    """(build s, build + lower s, build + lower + simulate s, actions simulated)."""
    costs = costs_for(p * v, v)

    def built() -> object:
        return schedules.get(name).build(p, m, v, remembered=False)  # not the remembered plan: built every time

    def lowered() -> object:
        return lower(built(), 1, compute_ms(costs), rendezvous=False)  # type: ignore[arg-type]

    n = lowered().num_actions()  # type: ignore[attr-defined]
    return (best_of(repeats, built), best_of(repeats, lowered),
            best_of(repeats, lambda: simulate(lowered(), costs, "async")), n)  # type: ignore[arg-type]


def one_f_one_b_order(p: int, m: int) -> list[list[tuple[int, str, int]]]:
    """The floor's own 1F1B order: warm-up forwards, then one forward one backward, then cool-down."""
    orders = []
    for r in range(p):
        warm = min(p - r - 1, m)
        seq = [(r, "F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                seq.append((r, "F", f))
                f += 1
            seq.append((r, "B", b))
            b += 1
        orders.append(seq)
    return orders


def heap_floor(p: int, m: int) -> float:
    """A minimal list scheduler: each rank runs its order; an action starts when its rank is free
    and its inputs (previous stage's forward, next stage's backward, plus a message latency) are
    done; ranks wait in a heap keyed by when they could next start. Returns the step time."""
    orders = one_f_one_b_order(p, m)
    done: dict[tuple[int, str, int], float] = {}
    pos, free = [0] * p, [0.0] * p
    waiting: dict[tuple[int, str, int], list[int]] = {}
    heap = [(0.0, r) for r in range(p)]
    while heap:
        _, r = heapq.heappop(heap)
        if pos[r] == len(orders[r]):
            continue
        s, k, mb = orders[r][pos[r]]
        deps = [(s - 1, "F", mb)] if k == "F" and s > 0 else []
        if k == "B":
            deps = [(s, "F", mb)] + ([(s + 1, "B", mb)] if s < p - 1 else [])
        start = free[r]
        for d in deps:
            t = done.get(d)
            if t is None:
                waiting.setdefault(d, []).append(r)
                break
            start = max(start, t + (LATENCY_MS if d[0] != s else 0.0))
        else:
            end = start + (F_MS if k == "F" else B_MS)
            done[(s, k, mb)] = free[r] = end
            pos[r] += 1
            heapq.heappush(heap, (end, r))
            for w in waiting.pop((s, k, mb), []):
                heapq.heappush(heap, (end, w))
    return max(free)


def torch_case(p: int, m: int, v: int, repeats: int) -> float | None:
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    except ImportError:
        return None
    warnings.filterwarnings("ignore")
    return best_of(repeats, lambda: get_schedule_ops("Interleaved1F1B", p, m, v, with_comms=True))


def _process_env() -> dict[str, str]:
    """The environment of the timed processes: modules' bytecode cached (in a folder of its own), as
    an installed package has it; a machine that sets PYTHONDONTWRITEBYTECODE would otherwise time
    the compiling of every ppsim module on every start."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "COLUMNS": "200", "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "ppsim-bench-pycache")}


def whole_process(args: list[str], repeats: int) -> float:
    exe = [sys.executable, "-m", "ppsim.cli", *args]
    env = _process_env()
    subprocess.run(exe, cwd=ROOT, env=env, check=True, capture_output=True)  # writes the bytecode once, untimed
    return best_of(repeats, lambda: subprocess.run(exe, cwd=ROOT, env=env, check=True, capture_output=True))


#: in a fresh process: time predicting the scenario (what the TUI shows first), then a key press as
#: the TUI's state runs it (the scenario on 8 stages, predicted and summarised: a plan not predicted
#: before, so nothing of it is remembered; drawing the window is not timed)
_FRESH = """
import sys, time
from ppsim.gc_pause import allow_gc_pauses
allow_gc_pauses()  # as the ppsim command does
from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.views.tui.state import TuiState
s = load(sys.argv[1])
t = time.perf_counter(); predict(s); cold = time.perf_counter() - t
state = TuiState.from_scenario(s, lambda scenario: predict(scenario).trace)
t = time.perf_counter(); state.change_stages(8 - s.pipeline.stages); pressed = time.perf_counter() - t
assert state.scenario.pipeline.stages == 8, state.message
print(cold, pressed)
"""


def fresh_predictions(scenario: Path, repeats: int) -> tuple[float, float]:
    """(the first prediction in a process, a plan key's prediction after it), best of ``repeats``
    fresh processes: what ``ppsim run`` and a TUI key pay, with no plan of theirs remembered."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _FRESH, str(scenario)], cwd=ROOT, check=True, capture_output=True,
                             text=True, env=_process_env()).stdout.split()
        runs.append((float(out[0]), float(out[1])))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def verdict(value: float, target: float, more_is_better: bool = False) -> str:
    ok = value >= target if more_is_better else value <= target
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tune", action="store_true", help="also time `ppsim tune scenarios/gpt.yaml --gpus 64`")
    args = parser.parse_args()
    allow_gc_pauses()  # as the ppsim command does
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")

    print("\n1F1B, posted sends, static links: build + lower + simulate (s), against the heap floor")
    print(f"{'case':<16} {'actions':>8} {'build':>7} {'+lower':>7} {'+sim':>7} {'us/action':>10} {'floor':>7} {'x floor':>8}")
    totals = {}
    for p, m in ((32, 256), (64, 512), (128, 1024)):
        t_build, t_lower, t_total, n = ppsim_case("1f1b", p, m, 1, args.repeats)
        floor = best_of(args.repeats, lambda p=p, m=m: heap_floor(p, m))
        totals[(p, m)] = t_total
        print(f"p={p} m={m:<9} {n:>8} {t_build:>7.3f} {t_lower:>7.3f} {t_total:>7.3f} {1e6 * t_total / n:>10.2f} "
              f"{floor:>7.3f} {t_total / floor:>8.1f}")
    for (p, m), target in (((64, 512), 0.25), ((128, 1024), 1.1)):
        print(f"1f1b p={p} m={m}: {totals[(p, m)]:.3f} s (target <= {target} s): {verdict(totals[(p, m)], target)}")
    allow_gc_pauses(False)
    plain = ppsim_case("1f1b", 64, 512, 1, args.repeats)[2]
    allow_gc_pauses(True)
    print(f"1f1b p=64 m=512 in a process that did not allow ppsim to pause its collector (a library call's "
          f"default): {plain:.3f} s, {plain / totals[(64, 512)]:.1f}x the paused figure")

    t_build, t_lower, t_total, n = ppsim_case("interleaved-1f1b", 32, 256, 2, args.repeats)
    t_torch = torch_case(32, 256, 2, args.repeats)
    print(f"\ninterleaved-1f1b p=32 m=256 v=2: {n} actions, ppsim build + lower + simulate {t_total:.3f} s")
    if t_torch is None:
        print("torch not installed: no comparison with torch.distributed.pipelining")
    else:
        ratio = t_torch / t_total
        print(f"torch get_schedule_ops(with_comms) {t_torch:.3f} s: ppsim {ratio:.1f}x faster (target >= 10x): "
              f"{verdict(ratio, 10, more_is_better=True)}")

    from ppsim.inputs.scenario import load

    gpt3 = ROOT / "scenarios" / "megatron-gpt3-175b.yaml"
    s = load(gpt3)
    t_run = whole_process(["run", str(gpt3)], args.repeats)
    t_predict, t_key = fresh_predictions(gpt3, args.repeats)
    t_start = whole_process(["--help"], args.repeats)
    print(f"\nGPT-3 175B on 1,024 GPUs ({s.pipeline.stages} stages, {s.pipeline.chunks} chunks, network model):")
    print(f"  ppsim run, whole process {t_run:.3f} s (target <= 0.5 s): {verdict(t_run, 0.5)}; "
          f"of which starting ppsim ({t_start:.3f} s for --help)")
    print(f"  the first prediction in a process {t_predict:.3f} s; then a TUI plan key (stages 8, a plan not "
          f"predicted before; predicted and summarised as the TUI does) {t_key:.3f} s (target <= 0.1 s): "
          f"{verdict(t_key, 0.1)}")

    if args.tune:
        gpt = ROOT / "scenarios" / "gpt.yaml"
        t_tune = whole_process(["tune", str(gpt), "--gpus", "64", "--json"], 1)
        print(f"\nppsim tune scenarios/gpt.yaml --gpus 64: {t_tune:.1f} s on {os.cpu_count()} cores "
              f"(target <= 20 s): {verdict(t_tune, 20)}")


if __name__ == "__main__":
    main()
