"""A plain torch.distributed.pipelining job, profiled as a user of it would: no ppsim, no ppexec.

Two ranks train four stages of a small MLP with one of torch's own multi-stage schedules —
ScheduleInterleaved1F1B by default (loop placement: rank r holds stages r and r + 2), or
ScheduleDualPipeV (V placement: rank r holds stages r and 3 - r; overlapped forward and backward
actions) — 4 micro-batches, and the torch profiler records three steps
(``schedule(wait=1, warmup=1, active=3)``), one Kineto JSON per rank. With ``--no-schedule`` the
profiler has no ``schedule=`` and records the whole loop of two steps, ``prof.step()`` after each,
as many users write it: torch then writes no ``ProfilerStep#N`` events, and ``profile_memory=True``
adds the allocator's ``[memory]`` events. The files in this folder were written by

    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 tests/data/kineto/make_fixture.py tests/data/kineto
    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 tests/data/kineto/make_fixture.py tests/data/kineto/dualpipev DualPipeV
    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 tests/data/kineto/make_fixture.py tests/data/kineto/no-schedule --no-schedule

and tests/trace/test_kineto.py reads them (and, as a slow test, makes new ones and reads those).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleDualPipeV, ScheduleInterleaved1F1B
from torch.profiler import ProfilerActivity, profile, schedule

HIDDEN, MICROBATCHES, STAGES, STEPS = 64, 4, 4, 5
UNSCHEDULED_STEPS = 2  #: the steps of a run profiled with no schedule= (every one is recorded)


SCHEDULES = {"Interleaved1F1B": ScheduleInterleaved1F1B, "DualPipeV": ScheduleDualPipeV}


def main(out: Path, schedule_name: str = "Interleaved1F1B", no_schedule: bool = False) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = torch.randn(MICROBATCHES * 4, 16, HIDDEN), torch.randn(MICROBATCHES * 4, 16, HIDDEN)
    width = HIDDEN
    if schedule_name == "DualPipeV":
        # torch 2.13's split backward detaches the stage's output in place, which fails when it is a
        # view, as a Linear's output of a 3-d input is ("Can't detach views in-place"): 2-d samples
        x, y, width = x.flatten(1), y.flatten(1), 16 * HIDDEN
    layers = [nn.Sequential(nn.Linear(width, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, width))
              for _ in range(STAGES)]
    if schedule_name == "DualPipeV":  # V placement: down the V on the way in, back up on the way out
        mine = [rank, STAGES - 1 - rank]
    else:
        mine = [s for s in range(STAGES) if s % world == rank]
    stages = [PipelineStage(layers[s], s, STAGES, torch.device("cpu")) for s in mine]
    pipe = SCHEDULES[schedule_name](stages, MICROBATCHES, loss_fn=nn.MSELoss())
    optimizer = torch.optim.SGD([p for s in mine for p in layers[s].parameters()], lr=0.01)
    if no_schedule:
        profiler, steps = profile(activities=[ProfilerActivity.CPU], profile_memory=True), UNSCHEDULED_STEPS
    else:
        profiler, steps = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS - 2)), STEPS
    with profiler as prof:
        for _ in range(steps):
            optimizer.zero_grad()
            first, last = 0 in mine, STAGES - 1 in mine
            args = (x,) if first else ()
            kwargs = {"target": y, "losses": []} if last else {}
            pipe.step(*args, **kwargs)
            optimizer.step()
            prof.step()
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"rank{rank}.json.gz"))  # torch gzips a name ending in .gz
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if set(flags) - {"--no-schedule"}:
        sys.exit(f"unknown option {sorted(set(flags) - {'--no-schedule'})[0]}: the only one is --no-schedule")
    positional = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(Path(positional[0]) if positional else Path("."), *positional[1:2], no_schedule="--no-schedule" in flags)
