"""One rank of a ppexec run: ``python -m ppexec.worker RUN_DIR``.

Any launcher can start it (ppexec's local launcher, ``deepspeed``, ``torchrun``, Slurm's ``srun``):
it reads RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT from the environment and the
run from ``RUN_DIR/run.json`` (``ppexec.worker.run_spec``). The runtime the run names builds the
rank (``ppexec.runtimes``); this module runs the step loop the runtimes share, and reports to the
launcher with typed events (``ppexec.worker.events``): ``Ready``, a ``Step`` per recorded step,
``Measure`` when profiling, ``Failure`` (naming the action it was in) and ``Done``; a background
thread beats its heartbeat throughout (``ppexec.worker.heartbeat``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

from ppexec.runtimes.base import RankContext, runtimes
from ppexec.worker.clock import ActionClock
from ppexec.worker.events import Done, EventLog, Failure, Measure, Ready, Step, events_path
from ppexec.worker.heartbeat import start_beating
from ppexec.worker.run_spec import RunSpec


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(f"environment variable {name} is not set: start the worker with a launcher")
        return default
    return int(value)


def run_rank(run_dir: Path) -> int:
    """Run this rank (RANK in the environment) of the run in ``run_dir``; its exit code."""
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    start_beating(run_dir, rank)
    log = EventLog(events_path(run_dir, rank))
    clock = ActionClock()
    try:
        spec = RunSpec.read(run_dir)
        _pin_threads()
        # NCCL runs on GPUs, whose kernels the clock waits for; gloo here runs on the CPU
        clock = ActionClock.for_device("cuda" if spec.backend == "nccl" else "cpu")
        return _train(RankContext(spec, rank, world, run_dir, clock), log)
    except BaseException as exc:  # report every failure, then exit non-zero
        log.write(Failure(rank=rank, action=clock.current, error=f"{type(exc).__name__}: {exc}",
                          traceback=traceback.format_exc(limit=8)))
        return 1


def _pin_threads() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    bind = os.environ.get("PPEXEC_BIND_CORE")
    if bind:
        os.sched_setaffinity(0, {int(bind)})


def _train(ctx: RankContext, log: EventLog) -> int:
    import torch.distributed as dist

    from ppexec.runtimes.experts import EXCHANGES, RECEIVED, ROUTED
    from ppexec.runtimes.model import FORWARDS, synthetic_batch

    spec = ctx.spec
    plan, scenario = spec.plan, spec.scenario
    p, d, t = plan.num_ranks, scenario.data_parallel, scenario.tensor_parallel
    if ctx.world != p * d * t:
        raise RuntimeError(f"WORLD_SIZE is {ctx.world}, the plan needs stages x data_parallel x tensor_parallel = "
                           f"{p} x {d} x {t} = {p * d * t}")
    program = runtimes()[spec.runtime].start(ctx)
    model, micro = spec.model, scenario.training.micro_batch
    if spec.profiling:  # every rank times the layers at once, as they contend in training
        from ppexec.measure.microbench import layer_times, recompute_times

        dist.barrier()
        log.write(Measure(name="layers", data=layer_times(model, micro, spec.seed)))
        log.write(Measure(name="recompute", data=recompute_times(model, micro, spec.seed, runtime=spec.runtime)))
    dist.barrier()
    log.write(Ready(rank=ctx.rank, pipe_rank=program.pipe_rank, replica=program.replica, tp_rank=program.tp_rank,
                    host=socket.gethostname(), clock_ns=time.perf_counter_ns(), pid=os.getpid(), backend=spec.backend,
                    runtime=spec.runtime))
    clock = ctx.clock
    for step in range(spec.warmup + spec.steps):
        clock.reset()
        FORWARDS.update(dict.fromkeys(FORWARDS, 0))
        EXCHANGES.clear()
        RECEIVED.clear()
        ROUTED.clear()
        loss = program.train_step(
            lambda mb, step=step: synthetic_batch(model, micro, spec.seed, step, program.replica, mb))  # type: ignore[misc]  # mypy#15459: a lambda with a default
        if step >= spec.warmup:
            marks = sorted(clock.marks + [m for t0, t1 in EXCHANGES for m in (("alltoall", t0), ("alltoall_end", t1))],
                           key=lambda m: m[1])
            log.write(Step(step=step - spec.warmup, loss=loss, spans=clock.spans, marks=marks, memory=clock.memory,
                           memory_source=clock.memory_source, forwards=dict(FORWARDS), received=list(RECEIVED),
                           routed=list(ROUTED)))
    if spec.profiling and p == 2:
        _measure_machine(ctx, log)
    log.write(Measure(name="optimizer", data=program.optimizer_state()))
    if spec.save_params:
        import torch

        torch.save(program.saved_state(), ctx.run_dir / "ranks" / f"params-{ctx.rank}.pt")
    log.write(Done(rank=ctx.rank))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _measure_machine(ctx: RankContext, log: EventLog) -> None:
    """What a profiling rank measures after its steps: the link, the collectives and a block split
    over the two ranks."""
    from ppexec.measure.microbench import (
        COLLECTIVE_FACTORS,
        alltoall_times,
        collective_times,
        message_sizes,
        ping_pong,
        tensor_parallel_times,
    )
    from ppexec.runtimes.model import parameter_count
    from ppexec.runtimes.tensor_parallel import make_groups
    from ppsim.api import DTYPE_BYTES, ExpertShard

    spec = ctx.spec
    model, micro = spec.model, spec.scenario.training.micro_batch
    message = model.seq_len * micro * model.hidden * DTYPE_BYTES[model.dtype]
    log.write(Measure(name="link", data=ping_pong(ctx.rank, 1 - ctx.rank, message_sizes(message))))
    grads = parameter_count(model) * DTYPE_BYTES[model.dtype] // spec.plan.num_ranks  # a stage's gradients, about
    log.write(Measure(name="collectives", data=collective_times(message_sizes(grads, COLLECTIVE_FACTORS))))
    if model.moe is not None:  # a dispatch's all-to-all: each rank's k copies of its tokens
        dispatch = int(ExpertShard(model.moe).dispatch_bytes(model.seq_len * micro, model.hidden, DTYPE_BYTES[model.dtype]))
        log.write(Measure(name="alltoall", data=alltoall_times(message_sizes(dispatch, COLLECTIVE_FACTORS))))
    pair = make_groups(ctx.world, 2, ctx.rank, timedelta(seconds=spec.timeout_s))  # the two ranks as one TP group
    if pair is not None:
        log.write(Measure(name="tensor_parallel", data=tensor_parallel_times(model, micro, spec.seed, pair)))


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m ppexec.worker RUN_DIR", file=sys.stderr)
        raise SystemExit(2)
    code = run_rank(Path(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    # leave without the interpreter's teardown: the process group's C++ threads can abort there
    # ("terminate called without an active exception") after everything was recorded
    os._exit(code)


if __name__ == "__main__":
    main()
