"""Train one step of a small MLP under torch's own ``_PipelineScheduleRuntime`` for each schedule
CSV given, the CSV loaded as torchtitan loads it (``_load_csv``, compute only: torch adds the
sends, receives and reductions), on CPU processes with gloo; each rank compares its stages'
gradients and the loss with one process's unpipelined step. Prints one JSON line per CSV.

    python run_torch_csv.py RANKS MICROBATCHES [--profile DIR] CSV [CSV ...]  (every CSV of RANKS rows)

With ``--profile DIR`` the first CSV's schedule then runs two more steps under torch's profiler,
each rank writing ``DIR/rank<r>.json`` (Kineto), as a user of torchtitan would profile a run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

WIDTH, BATCH_PER_MB = 8, 2


def model(layers: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(layers)]).double()


def stage_ranks(path: str) -> dict[int, int]:
    """Each stage's rank, from the CSV's rows (an overlapped pair's two stages included)."""
    out: dict[int, int] = {}
    with open(path) as fh:
        for rank, row in enumerate(fh.read().splitlines()):
            for cell in row.split(","):
                for part in cell.strip("()").split(")")[0].split(";"):
                    digits = ""
                    for ch in part:
                        if not ch.isdigit():
                            break
                        digits += ch
                    if digits:
                        out[int(digits)] = rank
    return out


def worker(rank: int, world: int, init: str, microbatches: int, paths: list[str], out: str,
           profile_dir: str | None) -> None:
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    results = []
    for path in paths:
        where = stage_ranks(path)
        stages = len(where)
        full = model(stages)
        x = torch.randn(microbatches * BATCH_PER_MB, WIDTH, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        y = torch.randn(microbatches * BATCH_PER_MB, WIDTH, dtype=torch.float64, generator=torch.Generator().manual_seed(2))

        def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return ((out - target) ** 2).sum()

        reference = model(stages)
        ref_loss = sum(loss_fn(reference(xm), ym) for xm, ym in zip(x.chunk(microbatches), y.chunk(microbatches)))
        ref_loss.backward()
        mine = sorted(s for s, r in where.items() if r == rank)
        pipe = [PipelineStage(full[s], s, stages, torch.device("cpu")) for s in mine]
        runtime = _PipelineScheduleRuntime(pipe, microbatches, loss_fn=loss_fn, scale_grads=False)
        runtime._load_csv(path)
        losses: list[torch.Tensor] = []
        args = (x,) if 0 in mine else ()
        kwargs = {"target": y, "losses": losses} if stages - 1 in mine else {}
        runtime.step(*args, **kwargs)
        worst = max((p.grad - q.grad).abs().max().item() for s in mine
                    for p, q in zip(full[s].parameters(), reference[s].parameters()))
        loss_gap = abs(float(sum(losses).detach()) - float(ref_loss.detach())) if losses else 0.0
        results.append({"csv": os.path.basename(path), "rank": rank, "stages": mine, "grad_gap": worst,
                        "losses": len(losses), "loss_gap": loss_gap})
        if profile_dir and path == paths[0]:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(2):
                    runtime.step(*args, **({"target": y} if kwargs else {}))
            prof.export_chrome_trace(os.path.join(profile_dir, f"rank{rank}.json"))
        dist.barrier()
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(results, fh)
    dist.destroy_process_group()


def main() -> None:
    world, microbatches, paths = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    profile_dir = None
    if paths[:1] == ["--profile"]:
        profile_dir, paths = paths[1], paths[2:]
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'rendezvous')}"
        out = os.path.join(tmp, "result")
        mp.spawn(worker, args=(world, init, microbatches, paths, out, profile_dir), nprocs=world, join=True)
        for r in range(world):
            with open(f"{out}.{r}") as fh:
                for line in json.load(fh):
                    print(json.dumps(line))


if __name__ == "__main__":
    main()
