"""Step-time overhead of ppexec's runtimes against the frameworks' own unprofiled steps.

What is compared. Both sides train the same GPT (ppexec.runtimes.model), cut at the same exact partition,
with the same weights, optimizer (AdamW) and synthetic data.

``--runtime deepspeed`` (target < 2 %):
- stock: DeepSpeed's own ``PipelineEngine`` running its own 1F1B ``TrainSchedule``, fed by a plain
  iterator of (ids, labels) micro-batches in micro-batch order;
- timed: ppexec's ``TimedPipelineEngine`` running ppsim's lowered 1F1B plan for the scenario
  (``ppexec.launch.prepare`` + ``plan_schedule``) and recording one span per plan action.
So the measured overhead is everything ppexec adds: the span recording, the per-micro-batch loss
bookkeeping, one buffer per micro-batch and ppsim's order of sends and receives in place of
DeepSpeed's.

``--runtime torch`` (target < 5 %), for ``--schedule 1f1b`` or ``interleaved-1f1b`` (2 chunks):
- stock: torch.distributed.pipelining's own schedule class (``Schedule1F1B`` /
  ``ScheduleInterleaved1F1B``), unprofiled, then the same clipping and optimizer steps;
- timed: ppexec's torch runtime (``TorchProgram``) running ppsim's lowered plan of that schedule
  and timing every action, clipping and optimizer steps included.
So the overhead is ppexec's timing, its waiting for each receive in the receive, and ppsim's
order of sends and receives in place of torch's.

Method. The script starts 2 local ranks itself (pipeline of 2 stages, gloo, one torch thread each,
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in the environment, like ``ppexec.launch.local.run_local``).
Each rank builds BOTH engines in one process, on the same process group; their steps are then
ALTERNATED: iteration i runs one step of each engine, the stock one first on even i and the timed one
first on odd i, so slow drifts of the machine (frequency, other load, caches) hit both alike. Before
every step both ranks run ``gc.collect()`` and meet on a ``torch.distributed.barrier()``; the step is
timed with ``time.perf_counter_ns`` (CLOCK_MONOTONIC, one clock for both processes of this machine)
around ``train_batch()``, and the step time is from the earliest start to the latest end over the
ranks. Both engines get micro-batch data of step i in iteration i, so their losses must agree
(printed as a check that they really do the same work). The first W iterations are warm-up.

Estimate. For every measured iteration, ratio_i = timed_i / stock_i (paired, same iteration). The
overhead is median(timed) / median(stock) - 1, with a 95 % bootstrap interval that resamples
iterations (keeping pairs together). Printed beside it: the median of the paired ratios and the ratios
of the lower quartiles and of the minimums (other load on the machine only ever adds time, so the low
quantiles are the least disturbed). 'ok' when the estimate is under the target (2 %), 'MISSED'
otherwise; a machine busy with other work widens the interval far beyond 2 % (the load average is
printed at the end), so judge the verdict together with the interval. Each rank also records its
CPU time (``time.process_time_ns``) per step; the sum over ranks is printed as a second, less
load-sensitive figure that sees the added computation but not any added waiting.

Run it (2 cores are enough; more ranks would share cores and distort the timing):

    .venv/bin/python bench/exec_overhead.py                        # defaults: ~200 ms steps, ~50 s
    .venv/bin/python bench/exec_overhead.py --steps 80 --warmup 10
    .venv/bin/python bench/exec_overhead.py --layers 0 --hidden 0 --seq-len 0 --micro-batch 0   # tiny-cpu as is

Model flags (--layers, --hidden, --heads, --seq-len, --micro-batch; 0 keeps the scenario's value) scale
the scenario's model; the defaults make tiny-cpu large enough for a step of about 200 ms on one core
per rank, so fixed per-step costs do not dominate.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from ppexec.launch.local import free_port, local_rank_env  # noqa: E402
from ppexec.launch.watch import stop_processes  # noqa: E402
from ppsim.inputs.scenario import Scenario, load, parse_scenario  # noqa: E402
from ppsim.plan import Plan  # noqa: E402

WORLD = 2  #: pipeline ranks = processes; 2 cores on the reference machine
TARGETS = {"deepspeed": 0.02, "torch": 0.05}  #: overhead targets
ENGINES = ("stock", "timed")
TORCH_SCHEDULES = {"1f1b": ("Schedule1F1B", 1), "interleaved-1f1b": ("ScheduleInterleaved1F1B", 2)}


# ----------------------------------------------------------------------------------------------
# scenario
# ----------------------------------------------------------------------------------------------
def bench_scenario(args: argparse.Namespace) -> tuple[Scenario, Plan, list[int]]:
    """The scenario as benchmarked (model flags applied, 2 ranks, the schedule), its lowered plan and partition."""
    from ppexec.launch.prepare import prepare

    s = load(args.scenario)
    data = s.model_dump(exclude_none=True)
    if "model" not in data:
        raise SystemExit(f"{args.scenario} has no 'model' section: the benchmark needs a real network")
    for flag, key in (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("seq_len", "seq_len")):
        if getattr(args, flag):
            data["model"][key] = getattr(args, flag)
    if args.micro_batch:
        data.setdefault("training", {})["micro_batch"] = args.micro_batch
    data.setdefault("training", {}).pop("global_batch", None)
    data["model"].pop("ffn_hidden", None)
    data["data_parallel"] = 1
    schedule = args.schedule if args.runtime == "torch" else "1f1b"
    chunks = TORCH_SCHEDULES[schedule][1] if args.runtime == "torch" else 1
    data.setdefault("pipeline", {}).update(stages=WORLD, schedule=schedule, chunks=chunks, partition="balanced")
    s = parse_scenario(data, source="bench/exec_overhead.py flags")
    s = s.with_overrides(microbatches=args.microbatches)
    prepared = prepare(s, runtime=args.runtime)
    return prepared.scenario, prepared.plan, prepared.partition


# ----------------------------------------------------------------------------------------------
# one rank
# ----------------------------------------------------------------------------------------------
def worker(args: argparse.Namespace, out: Path) -> None:
    """One rank: build both sides, alternate their steps, write this rank's step times to ``out``."""
    import torch

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    runs, stage, spans = (torch_pair if args.runtime == "torch" else deepspeed_pair)(args, rank)
    # per iteration: [start_ns, end_ns, cpu_ns] (cpu: this process's CPU time, all its threads)
    times: dict[str, list[list[int]]] = {name: [] for name in ENGINES}
    losses: dict[str, list[float]] = {name: [] for name in ENGINES}
    clock, cpu = time.perf_counter_ns, time.process_time_ns
    for i in range(args.warmup + args.steps):
        order = ENGINES if i % 2 == 0 else ENGINES[::-1]
        for name in order:
            gc.collect()
            torch.distributed.barrier()
            t0, c0 = clock(), cpu()
            loss = runs[name](i)
            t1, c1 = clock(), cpu()
            times[name].append([t0, t1, c1 - c0])
            losses[name].append(float(loss) if loss is not None else float("nan"))
    result = {"rank": rank, "stage": stage, "times": times, "losses": losses, "spans_per_step": spans(),
              "warmup": args.warmup}
    (out / f"rank-{rank}.json").write_text(json.dumps(result))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def torch_pair(args: argparse.Namespace, rank: int) -> tuple[dict[str, Callable[[int], Any]], int, Callable[[], int]]:
    """torch's own schedule class and ppexec's torch runtime, on the same process group and weights."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as torch_schedules

    from ppexec.runtimes.base import RankContext
    from ppexec.runtimes.model import loss_fn, synthetic_batch
    from ppexec.runtimes.torch_pipelining.program import TorchProgram, clip_over_pipeline
    from ppexec.worker.clock import ActionClock
    from ppexec.worker.run_spec import RunSpec

    s, plan, partition = bench_scenario(args)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    spec = RunSpec(scenario=s, plan=plan, partition=partition, runtime="torch", world_size=WORLD, seed=args.seed,
                   lr=1e-3, timeout_s=args.timeout)
    clock = ActionClock()
    timed = TorchProgram(RankContext(spec, rank, WORLD, Path("."), clock))
    # the stock side: the same stages built again (the same weights, drawn from the same seeds)
    stock_program = TorchProgram(RankContext(spec, rank, WORLD, Path("."), ActionClock()))
    modules = stock_program.modules
    m, micro = plan.num_microbatches, s.training.micro_batch
    name, _ = TORCH_SCHEDULES[args.schedule]
    stages = [PipelineStage(modules[k], k, plan.num_stages, torch.device("cpu")) for k in sorted(modules)]
    scaled = lambda logits, labels: loss_fn(logits, labels) / m  # noqa: E731 - as the runtime's
    cls = getattr(torch_schedules, name)
    stock = cls(stages if len(stages) > 1 else stages[0], m, loss_fn=scaled, scale_grads=False)

    def batch(step: int, mb: int) -> tuple[Any, Any]:
        return synthetic_batch(s.model, micro, args.seed, step, 0, mb)

    def stock_step(step: int) -> Any:
        for o in stock_program.optimizers.values():
            o.zero_grad(set_to_none=True)
        parts = [batch(step, mb) for mb in range(m)]
        losses: list[Any] = []
        if stock_program.first_here and stock_program.last_here:
            stock.step(torch.cat([x for x, _ in parts]), target=torch.cat([y for _, y in parts]), losses=losses)
        elif stock_program.first_here:
            stock.step(torch.cat([x for x, _ in parts]))
        else:
            stock.step(target=torch.cat([y for _, y in parts]), losses=losses)
        clip_over_pipeline(list(modules.values()), s.training.grad_clip, None)
        for o in stock_program.optimizers.values():
            o.step()
        return sum(x.item() for x in losses) if losses else None

    def timed_step(step: int) -> Any:
        clock.reset()
        return timed.train_step(lambda mb: batch(step, mb))

    return {"stock": stock_step, "timed": timed_step}, timed.pipe_rank, lambda: len(clock.spans)


def deepspeed_pair(args: argparse.Namespace, rank: int) -> tuple[dict[str, Callable[[int], Any]], int, Callable[[], int]]:
    """DeepSpeed's stock PipelineEngine and ppexec's timed engine, on the same process group and weights."""
    import deepspeed
    import deepspeed.ops
    import torch
    from deepspeed.pipe import LayerSpec, PipelineModule

    from ppexec.runtimes.deepspeed_pipe.engine import engine_class, pipeline_engine
    from ppexec.runtimes.deepspeed_pipe.translate import plan_schedule
    from ppexec.runtimes.model import TORCH_DTYPES, layer_factories, loss_fn, stage_boundaries, synthetic_batch
    from ppexec.worker.clock import ActionClock

    s, plan, partition = bench_scenario(args)
    model = s.model
    assert model is not None
    m, micro = plan.num_microbatches, s.training.micro_batch
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # no 35 s JIT build of an unused op
    deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=args.timeout), verbose=False)
    parts = stage_boundaries(partition)

    class PlannedPipelineModule(PipelineModule):
        """A PipelineModule cut exactly where ppsim's partition says (as ppexec's DeepSpeed runtime cuts it)."""

        def _partition_layers(self, method: str = "uniform") -> None:
            self.parts = parts
            stage_id = self._topo.get_coord(self.global_rank).pipe
            self._set_bounds(start=parts[stage_id], stop=parts[stage_id + 1])

    dtype = TORCH_DTYPES[model.dtype]
    config = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": m,
        "train_batch_size": micro * m,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": dtype is torch.bfloat16},
        "fp16": {"enabled": dtype is torch.float16},
    }

    def build(engine_cls: type | None) -> Any:
        specs = [LayerSpec(cls, *a) for cls, a in layer_factories(model, args.seed)]
        module = PlannedPipelineModule(layers=specs, num_stages=WORLD, loss_fn=loss_fn, partition_method="uniform")
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3, weight_decay=0.0)
        if engine_cls is None:
            engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        else:
            with pipeline_engine(engine_cls):
                engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        return engine

    stock = build(None)
    timed = build(engine_class())
    if type(stock) is type(timed):
        raise RuntimeError("both engines have the same class: the stock engine was not restored")
    stage = timed.stage_id
    timed.ppexec_schedule = plan_schedule(plan, stage)
    clock = ActionClock()
    timed.ppexec_clock = clock

    def batch(step: int, mb: int) -> tuple[Any, Any]:
        return synthetic_batch(model, micro, args.seed, step, 0, mb)

    def stock_step(step: int) -> Any:
        data: Iterator[tuple[Any, Any]] = (batch(step, mb) for mb in range(m))
        return stock.train_batch(data_iter=data)

    def timed_step(step: int) -> Any:
        timed.ppexec_batch = lambda mb: batch(step, mb)
        clock.reset()
        return timed.train_batch()

    return {"stock": stock_step, "timed": timed_step}, stage, lambda: len(clock.spans)


# ----------------------------------------------------------------------------------------------
# launcher
# ----------------------------------------------------------------------------------------------
def launch(argv: list[str], out: Path, deadline_s: float) -> list[dict[str, Any]]:
    """Start the ranks (this script with --worker), wait for all of them; on any failure or past the
    deadline, stop every rank and raise with the failing rank's log."""
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    # the ranks run in their own sessions: turn a SIGTERM of this process into an exit that stops them
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for r in range(WORLD):
            env = local_rank_env(r, WORLD, port)
            with (out / f"rank-{r}.log").open("wb") as log:
                procs.append(subprocess.Popen([sys.executable, __file__, *argv, "--worker", str(out)], env=env,
                                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        start = time.monotonic()
        while True:
            codes = [p.poll() for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                time.sleep(0.5)  # let a peer's own error land in its log too
                r = failed[0]
                raise RuntimeError(f"rank {r} exited with code {codes[r]}; its log:\n{tail(out / f'rank-{r}.log')}")
            if all(c == 0 for c in codes):
                break
            if time.monotonic() - start > deadline_s:
                raise RuntimeError(f"the ranks did not finish within {deadline_s:.0f} s and were stopped; rank 0 log:\n"
                                   f"{tail(out / 'rank-0.log')}")
            time.sleep(0.1)
    finally:
        stop_processes(procs)
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(WORLD)]


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------------------------------------
# statistics and report
# ----------------------------------------------------------------------------------------------
def step_times_ms(results: list[dict[str, Any]], name: str) -> list[float]:
    """Measured step times of one engine: earliest start to latest end over the ranks, warm-up dropped."""
    warmup = results[0]["warmup"]
    per_rank = [r["times"][name] for r in results]
    steps = zip(*per_rank)
    return [(max(t[1] for t in spans) - min(t[0] for t in spans)) / 1e6 for spans in steps][warmup:]


def cpu_times_ms(results: list[dict[str, Any]], name: str) -> list[float]:
    """CPU time of one engine's steps, summed over the ranks, warm-up dropped."""
    warmup = results[0]["warmup"]
    per_rank = [r["times"][name] for r in results]
    return [sum(t[2] for t in spans) / 1e6 for spans in zip(*per_rank)][warmup:]


def bootstrap_overhead(stock: list[float], timed: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of median(timed) / median(stock) - 1, resampling iterations as pairs."""
    rng = random.Random(seed)
    n = len(stock)
    estimates = []
    for _ in range(rounds):
        idx = [rng.randrange(n) for _ in range(n)]
        estimates.append(statistics.median(timed[i] for i in idx) / statistics.median(stock[i] for i in idx) - 1)
    estimates.sort()
    return estimates[int(0.025 * rounds)], estimates[int(0.975 * rounds) - 1]


def report(s: Scenario, plan: Plan, partition: list[int], results: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """Print the table; True when the overhead estimate is under the target."""
    model = s.model
    assert model is not None
    stock, timed = step_times_ms(results, "stock"), step_times_ms(results, "timed")
    target = TARGETS[args.runtime]
    print(f"exec overhead, {args.runtime} runtime: {s.name or args.scenario} | layers {model.layers}, hidden "
          f"{model.hidden}, heads {model.heads}, seq {model.seq_len}, vocab {model.vocab}, {model.dtype} | micro-batch "
          f"{s.training.micro_batch} x {plan.num_microbatches} micro-batches | 2 ranks x {plan.chunks} chunk(s), "
          f"partition {partition}, {plan.schedule}")
    print(f"{args.steps} alternated iterations after {args.warmup} warm-up (order swapped every iteration); "
          f"the timed side records {results[0]['spans_per_step']}/{results[1]['spans_per_step']} spans per step "
          f"on rank 0/1\n")
    print(f"{'engine':<8}{'median ms':>11}{'mean ms':>10}{'min ms':>9}{'p90 ms':>9}{'stdev ms':>10}")
    for name, xs in (("stock", stock), ("timed", timed)):
        p90 = statistics.quantiles(xs, n=10)[-1] if len(xs) > 1 else xs[0]
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        print(f"{name:<8}{statistics.median(xs):>11.2f}{statistics.mean(xs):>10.2f}{min(xs):>9.2f}{p90:>9.2f}{sd:>10.2f}")
    ratio_medians = statistics.median(timed) / statistics.median(stock)
    ratio_means = statistics.mean(timed) / statistics.mean(stock)
    paired = statistics.median(t / b for t, b in zip(timed, stock))
    ratio_min = min(timed) / min(stock)
    ratio_q1 = statistics.quantiles(timed, n=4)[0] / statistics.quantiles(stock, n=4)[0] if len(stock) > 1 else ratio_min
    lo, hi = bootstrap_overhead(stock, timed) if len(stock) > 1 else (ratio_medians - 1, ratio_medians - 1)
    overhead = ratio_medians - 1
    print()
    print(f"ratio timed/stock: medians {ratio_medians:.4f}, means {ratio_means:.4f}, "
          f"median of paired ratios {paired:.4f}, lower quartiles {ratio_q1:.4f}, minimums {ratio_min:.4f}")
    ok = overhead < target
    verdict = "ok" if ok else "MISSED"
    note = ""
    if lo < target <= hi:
        note = " (inconclusive: the interval spans the target; rerun on a quiet machine or with more --steps)"
    print(f"overhead: {overhead * 100:+.2f} % (95 % bootstrap interval {lo * 100:+.2f} .. {hi * 100:+.2f} %), "
          f"target < {target * 100:.0f} %: {verdict}{note}")
    cs, ct = cpu_times_ms(results, "stock"), cpu_times_ms(results, "timed")
    print(f"CPU time per step, both ranks (less sensitive to other load, blind to waiting): stock "
          f"{statistics.median(cs):.2f} ms, timed {statistics.median(ct):.2f} ms (medians), ratio "
          f"{statistics.median(ct) / statistics.median(cs):.4f}")
    last = next(r for r in results if r["losses"]["timed"] and r["losses"]["timed"][0] == r["losses"]["timed"][0])
    ls, lt = last["losses"]["stock"], last["losses"]["timed"]
    diff = max(abs(a - b) for a, b in zip(ls, lt))
    print(f"same work check: losses of the two engines differ by at most {diff:.2e} over {len(ls)} steps "
          f"(first {ls[0]:.4f}, last stock {ls[-1]:.4f} / timed {lt[-1]:.4f})")
    return ok


# ----------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", choices=tuple(TARGETS), default="deepspeed", help="which runtime to measure")
    ap.add_argument("--schedule", choices=tuple(TORCH_SCHEDULES), default="interleaved-1f1b",
                    help="with --runtime torch: the schedule both sides run")
    ap.add_argument("--steps", type=int, default=40, help="measured iterations (one step of each side)")
    ap.add_argument("--warmup", type=int, default=5, help="iterations run first and not measured")
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "tiny-cpu.yaml")
    ap.add_argument("--microbatches", type=int, default=8, help="micro-batches per step m")
    ap.add_argument("--layers", type=int, default=4, help="transformer blocks (0: the scenario's)")
    ap.add_argument("--hidden", type=int, default=128, help="model width (0: the scenario's)")
    ap.add_argument("--heads", type=int, default=0, help="attention heads (0: the scenario's)")
    ap.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (0: the scenario's)")
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per micro-batch (0: the scenario's)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a rank may wait on its peer")
    ap.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be at least 1 and --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker is not None:
        worker(args, args.worker)
        return 0
    s, plan, partition = bench_scenario(args)  # fail here, before starting ranks, on a bad scenario
    deadline = 120 + 2 * args.timeout + 10 * (args.steps + args.warmup)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="exec-overhead-") as tmp:
        try:
            results = launch(argv, Path(tmp), deadline)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    report(s, plan, partition, results, args)
    print(f"machine: {os.cpu_count()} cores, 1-min load average {load_before:.2f} before the run, "
          f"{os.getloadavg()[0]:.2f} after (anything above ~2 besides this run makes the timing noisy)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
