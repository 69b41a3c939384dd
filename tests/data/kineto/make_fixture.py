"""A plain torch.distributed.pipelining job, profiled as a user of it would: no ppsim, no ppexec.

Two ranks train four stages of a small MLP with torch's own ScheduleInterleaved1F1B (loop
placement: rank r holds stages r and r + 2), 4 micro-batches, and the torch profiler records
three steps (``schedule(wait=1, warmup=1, active=3)``), one Kineto JSON per rank. The files in
this folder were written by

    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 tests/data/kineto/make_fixture.py tests/data/kineto

and tests/test_kineto.py reads them (and, as a slow test, makes new ones and reads those).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B
from torch.profiler import ProfilerActivity, profile, schedule

HIDDEN, MICROBATCHES, STAGES, STEPS = 64, 4, 4, 5


def main(out: Path) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))
              for _ in range(STAGES)]
    mine = [s for s in range(STAGES) if s % world == rank]
    stages = [PipelineStage(layers[s], s, STAGES, torch.device("cpu")) for s in mine]
    pipe = ScheduleInterleaved1F1B(stages, MICROBATCHES, loss_fn=nn.MSELoss())
    optimizer = torch.optim.SGD([p for s in mine for p in layers[s].parameters()], lr=0.01)
    x, y = torch.randn(MICROBATCHES * 4, 16, HIDDEN), torch.randn(MICROBATCHES * 4, 16, HIDDEN)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS - 2)) as prof:
        for _ in range(STEPS):
            optimizer.zero_grad()
            if 0 in mine:
                pipe.step(x)
            else:
                pipe.step(target=y, losses=[])
            optimizer.step()
            prof.step()
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"rank{rank}.json.gz"))  # torch gzips a name ending in .gz
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("."))
