"""Micro-benchmarks a profiling rank runs: layer times in plain torch, point-to-point transfers and
collectives (at the sizes :func:`message_sizes` picks around the scenario's own messages).

Every function here runs inside a worker process (one thread, like a training rank), and the ranks
of a profiling run measure at the same time, so the figures include the contention for memory
bandwidth and cores that a real run sees. Times are medians of repeated runs, in milliseconds,
with their lower and upper quartiles where the profile records its spread.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from ppexec.measure.stats import quartiles
from ppexec.runtimes.model import TORCH_DTYPES, Block, Embedding, Head, loss_fn, synthetic_batch
from ppexec.runtimes.tensor_parallel import TPGroup
from ppsim.api import ModelSpec

#: message sizes of the ping-pong, as multiples of the scenario's activation message
SIZE_FACTORS = (0.125, 0.5, 1.0, 2.0, 8.0)
#: collective sizes against a stage's gradient bytes
COLLECTIVE_FACTORS = (0.25, 0.5, 1.0, 2.0)


def message_sizes(message_bytes: int, factors: tuple[float, ...] = SIZE_FACTORS) -> list[int]:
    """The sizes (bytes, at least 1 KiB, whole float32 elements) to time around ``message_bytes``."""
    return sorted({max(1024, int(message_bytes * f) // 4 * 4) for f in factors})


def times_ms(fn: Callable[[], Any], budget_s: float, min_reps: int = 5, max_reps: int = 200) -> list[float]:
    """Wall times (ms) of ``fn`` over as many runs as fit in ``budget_s``, after two untimed
    warm-ups and one run that sizes the repetitions."""
    fn()
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / once)))
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t) / 1e6)
    return times


def median_ms(fn: Callable[[], Any], budget_s: float, min_reps: int = 5, max_reps: int = 200) -> float:
    """Median wall time of ``fn`` over as many runs as fit in ``budget_s`` (after two warm-ups)."""
    return statistics.median(times_ms(fn, budget_s, min_reps, max_reps))


def _split_ms(run: Callable[[], tuple[int, int, int]], reps: int) -> tuple[list[float], list[float], list[float]]:
    """The times (ms) of the three phases timed by ``run`` (each call returns three durations in
    ns), after one untimed warm-up call."""
    run()
    samples = [run() for _ in range(reps)]
    first, second, third = ([x[i] / 1e6 for x in samples] for i in range(3))
    return first, second, third


def _with_quartiles(times: dict[str, list[float]]) -> dict[str, Any]:
    """Each timing's median, and under ``quartiles`` its [lower, upper] quartile."""
    qs = {k: quartiles(v) for k, v in times.items()}
    return {**{k: q[1] for k, q in qs.items()}, "quartiles": {k: [q[0], q[2]] for k, q in qs.items()}}


def layer_times(spec: ModelSpec, micro_batch: int, seed: int, budget_s: float = 1.0) -> dict[str, dict[str, Any]]:
    """Forward, backward (and its weight-grad part), optimizer step and parameters of the embedding,
    one block and the head with its loss, at ``micro_batch`` sequences, in the model's dtype: the
    median of each timing, and under ``quartiles`` its lower and upper quartile. The backward is
    also timed split in two as torch.distributed.pipelining runs I and W (``stage_backward_input``
    then ``stage_backward_weight``): the weight grad's share of the split and what the split costs
    in all (``split_backward_ms``, on the whole backward's scale: 13-25 % more on this CPU)."""
    dtype = TORCH_DTYPES[spec.dtype]
    ids, labels = synthetic_batch(spec, micro_batch, seed, 0, 0, 0)
    hidden = torch.randn(micro_batch, spec.seq_len, spec.hidden, dtype=dtype)
    out: dict[str, dict[str, Any]] = {}
    layers: dict[str, tuple[torch.nn.Module, Callable[[], torch.Tensor], torch.Tensor | None]] = {}
    emb = Embedding(spec, seed).to(dtype)
    layers["embedding"] = (emb, lambda: emb(ids), None)
    # a mixture of experts profiles its MoE block (every block of its profiling run is one) and times
    # a dense block alone besides, which the profile prices by the MoE block's time in the engine
    block = Block(spec, seed + 1, moe=spec.moe is not None).to(dtype)
    x_block = hidden.clone().requires_grad_(True)
    layers["block"] = (block, lambda: block(x_block), x_block)
    if spec.moe is not None:
        dense = Block(spec, seed + 1).to(dtype)
        x_dense = hidden.clone().requires_grad_(True)
        layers["dense_block"] = (dense, lambda: dense(x_dense), x_dense)
    head = Head(spec, seed + 2).to(dtype)
    x_head = hidden.clone().requires_grad_(True)
    layers["head"] = (head, lambda: loss_fn(head(x_head), labels), x_head)
    for name, (module, forward, x) in layers.items():
        params = [p for p in module.parameters() if p.requires_grad]
        fwd = times_ms(forward, budget_s / 4)

        def backward_phases(forward: Callable[[], torch.Tensor] = forward, x: torch.Tensor | None = x,
                            params: list[torch.nn.Parameter] = params) -> tuple[int, int, int]:
            y = forward()
            g = torch.ones_like(y)
            t0 = time.perf_counter_ns()
            y.backward(g)
            t1 = time.perf_counter_ns()
            # the same backward split in two as torch.distributed.pipelining runs I and W: input grad
            # (keeping what the weight grad needs), then weight grad from it
            y = forward()
            t2 = time.perf_counter_ns()
            groups = stage_backward_input([y], [g], [x], iter(params))[1] if x is not None else None
            t3 = time.perf_counter_ns()
            if groups is not None:
                stage_backward_weight(iter(params), groups)
            else:  # no input to grad (the embedding): the whole backward is the weight grad
                y.backward(g)
            t4 = time.perf_counter_ns()
            return t1 - t0, t3 - t2, t4 - t3

        reps = max(5, min(100, int(budget_s / 2 / max(statistics.median(fwd) * 3e-3, 1e-6))))
        full, input_grad, weight_grad = _split_ms(backward_phases, reps)
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
        step = times_ms(opt.step, budget_s / 4)
        ig, wg, whole = statistics.median(input_grad), statistics.median(weight_grad), statistics.median(full)
        share = wg / (ig + wg) if ig + wg > 0 else 0.0
        # what the split costs against the whole backward (torch's two passes redo part of the work)
        ratio = (ig + wg) / whole if whole > 0 else 1.0
        out[name] = {
            **_with_quartiles({"forward_ms": fwd, "backward_ms": full, "weight_grad_ms": [t * share for t in full],
                               "split_backward_ms": [t * ratio for t in full], "optimizer_ms": step}),
            "params": sum(p.numel() for p in params),
        }
    return out


def _pass_ns(forward: Callable[[], torch.Tensor]) -> tuple[int, int]:
    """(forward ns, backward ns) of one pass of ``forward`` and its backward."""
    t0 = time.perf_counter_ns()
    y = forward()
    t1 = time.perf_counter_ns()
    y.backward(torch.ones_like(y))
    return t1 - t0, time.perf_counter_ns() - t1


def _medians_in_turns(forwards: dict[str, Callable[[], torch.Tensor]], reps: int,
                      before: Callable[[], object] | None = None) -> dict[str, tuple[float, float]]:
    """Median (forward ms, backward ms) of each variant, timed in turns so that drift hits every
    variant alike; ``before`` runs untimed ahead of each pass (a barrier, say)."""
    samples: dict[str, list[tuple[int, int]]] = {k: [] for k in forwards}
    for _ in range(reps):
        for k, forward in forwards.items():
            if before:
                before()
            samples[k].append(_pass_ns(forward))
    return {k: (statistics.median(x[0] for x in xs) / 1e6, statistics.median(x[1] for x in xs) / 1e6)
            for k, xs in samples.items()}


def recompute_times(spec: ModelSpec, micro_batch: int, seed: int, budget_s: float = 1.0, runtime: str = "deepspeed"
                    ) -> dict[str, dict[str, float]]:
    """What recomputation adds to one block, timed alone: for ``selective`` (the block checkpoints
    its attention core) and ``full`` (the whole block checkpointed as the runtime does it:
    DeepSpeed's checkpoint in its pipeline module, torch's non-reentrant one in the torch runtime),
    the forward and backward time less those of the same block without recomputation, measured
    in turns so that drift hits every mode alike."""
    if runtime == "deepspeed":
        from deepspeed.runtime.activation_checkpointing.checkpointing import checkpoint as whole
    else:
        from torch.utils.checkpoint import checkpoint as torch_checkpoint

        def whole(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
            return torch_checkpoint(block, x, use_reentrant=False)

    dtype = TORCH_DTYPES[spec.dtype]
    moe = spec.moe is not None  # the block the profile measures (see layer_times)
    plain = Block(spec, seed + 1, moe=moe).to(dtype)
    selective = Block(spec, seed + 1, selective=True, moe=moe).to(dtype)
    x = torch.randn(micro_batch, spec.seq_len, spec.hidden, dtype=dtype).requires_grad_(True)
    forwards: dict[str, Callable[[], torch.Tensor]] = {
        "none": lambda: plain(x), "selective": lambda: selective(x), "full": lambda: whole(plain, x)}

    for forward in forwards.values():  # warm up
        _pass_ns(forward)
    t0 = time.perf_counter()
    _pass_ns(forwards["full"])
    reps = max(5, min(100, int(budget_s / 3 / max(time.perf_counter() - t0, 1e-6))))
    med = _medians_in_turns(forwards, reps)
    return {mode: {"forward_ms": med[mode][0] - med["none"][0], "backward_ms": med[mode][1] - med["none"][1]}
            for mode in ("selective", "full")}


def tensor_parallel_times(spec: ModelSpec, micro_batch: int, seed: int, tp: TPGroup, reps: int = 20
                          ) -> dict[str, float]:
    """Forward and backward of one block split over the ranks of ``tp`` (its all-reduces included),
    and of the whole block on one rank, timed in turns: medians in ms. Every rank of the group
    must call it; each repetition starts at a barrier, as the all-reduces line the ranks up."""
    import torch.distributed as dist

    dtype = TORCH_DTYPES[spec.dtype]
    whole = Block(spec, seed + 1).to(dtype)
    split = Block(spec, seed + 1, tp=tp).to(dtype)
    x = torch.randn(micro_batch, spec.seq_len, spec.hidden, dtype=dtype,
                    generator=torch.Generator().manual_seed(seed)).requires_grad_(True)

    forwards = {"whole": lambda: whole(x), "split": lambda: split(x)}

    def aligned() -> None:  # untimed: each pass starts when both ranks are there
        dist.barrier(group=tp.group)

    _medians_in_turns(forwards, 1, before=aligned)  # warm up
    med = _medians_in_turns(forwards, reps, before=aligned)
    return {"size": tp.size, "forward_ms": med["split"][0], "backward_ms": med["split"][1],
            "whole_forward_ms": med["whole"][0], "whole_backward_ms": med["whole"][1]}


def ping_pong(rank: int, peer: int, sizes: list[int], reps: int = 30) -> list[tuple[int, float, float, float]]:
    """One-way time of a blocking send/recv of each size between ``rank`` and ``peer`` (half the
    round trip): (bytes, median, lower quartile, upper quartile) after 3 untimed round trips; both
    ranks must call it with the same arguments."""
    import torch.distributed as dist

    out = []
    for n in sizes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32)
        times = []
        for i in range(reps + 3):
            t = time.perf_counter_ns()
            if rank < peer:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)
            if i >= 3:
                times.append((time.perf_counter_ns() - t) / 2e6)
        q1, med, q3 = quartiles(times)
        out.append((buf.numel() * 4, med, q1, q3))
    return out


def _timed_collective(op: Callable[[], object], reps: int) -> float:
    """Median ms of ``op`` over ``reps`` runs after a warm-up, each started at a barrier."""
    import torch.distributed as dist

    times = []
    for i in range(reps + 1):
        dist.barrier()
        t = time.perf_counter_ns()
        op()
        if i:
            times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1e6


def collective_times(sizes: list[int], reps: int = 10) -> list[tuple[int, float, float, float]]:
    """(bytes, all-reduce ms, all-gather ms, all-to-all ms) over every rank of the job, for each
    size. An all-gather of n bytes gathers n in all (n / world from each rank); an all-to-all of n
    bytes sends n / world of each rank's n to each rank. Every rank must call it with the same
    arguments."""
    import torch.distributed as dist

    out = []
    for n in sizes:
        full = _collective_buffer(n)
        parts = list(full.chunk(dist.get_world_size()))
        mine = parts[dist.get_rank()].clone()
        reduce_ms = _timed_collective(partial(dist.all_reduce, full), reps)
        gather_ms = _timed_collective(partial(dist.all_gather, parts, mine), reps)
        out.append((full.numel() * 4, reduce_ms, gather_ms, _alltoall_ms(full, reps)))
    return out


def alltoall_times(sizes: list[int], reps: int = 10) -> list[tuple[int, float]]:
    """(bytes, all-to-all ms) over every rank of the job, for each size, as :func:`collective_times`
    times it: for a mixture of experts, at the sizes of its dispatch, where a fit to the gradients'
    sizes would extrapolate (its latency dominates a small exchange). Every rank must call it."""
    return [(full.numel() * 4, _alltoall_ms(full, reps)) for full in map(_collective_buffer, sizes)]


def _collective_buffer(nbytes: int) -> torch.Tensor:
    """float32 zeros of about ``nbytes``, split evenly over the job's ranks."""
    import torch.distributed as dist

    world = dist.get_world_size()
    return torch.zeros(max(world, nbytes // 4 // world * world), dtype=torch.float32)


def _alltoall_ms(full: torch.Tensor, reps: int) -> float:
    import torch.distributed as dist

    return _timed_collective(partial(dist.all_to_all_single, torch.empty_like(full), full), reps)
