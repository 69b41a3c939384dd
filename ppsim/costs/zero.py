"""ZeRO-1's step: each data-parallel replica updates its 1/d of the parameters, then they are all-gathered
(at the step's end, or with ``training.overlap_param_gather`` during the next step's first forward,
as Megatron's distributed optimizer does: only what that forward cannot cover stays exposed)."""

from __future__ import annotations

from dataclasses import replace

from ppsim.costs.collectives import ring_allgather_ms
from ppsim.costs.table import Link, StageCost


def shard_optimizer(cost: StageCost, data_parallel: int, link: Link, gather_link: Link,
                    reduce: str = "allreduce", fixed_ms: float = 0.0, overlap_gather: bool = False,
                    fully_sharded: bool = False) -> StageCost:
    """The stage's step with ZeRO-1: each replica steps the optimizer over its 1/d of the parameters
    and the updated parameters are all-gathered (on ``gather_link``) before the next forward; the
    all-gather is charged to the optimizer step, which ends when the parameters are whole again.
    The gradients are all-reduced as without ZeRO (``allreduce``: DeepSpeed's default bucket
    all-reduce, each replica keeping its part) or reduce-scattered on ``link`` (``reduce_scatter``:
    Megatron's distributed optimizer, half a ring all-reduce per bucket). ``fixed_ms`` of the step
    (a framework's own overhead, measured) does not shrink with the shard. With ``overlap_gather``
    the all-gather runs bucket by bucket beside the next step's first forward of the stage, each
    bucket just ahead of the layers that need it: exposed are its first bucket and whatever of the
    rest outlasts that forward (charged to the step, as the simulated step has no next one).
    ``fully_sharded`` (ZeRO-3 / FSDP): the gradients were reduce-scattered and the weights are
    gathered layer by layer in the passes (:mod:`ppsim.costs.fsdp`): nothing is left for the step's end."""
    if data_parallel <= 1 or cost.grad_bytes <= 0:
        return cost
    if fully_sharded:
        sharded = (cost.optimizer_ms - fixed_ms) / data_parallel
        return replace(cost, optimizer_ms=max(0.0, fixed_ms + sharded), allreduce_ms=0.0)
    gather = ring_allgather_ms(cost.grad_bytes, data_parallel, gather_link)
    reduce_ms = cost.allreduce_ms
    if reduce == "reduce_scatter":
        per_bucket = cost.grad_bytes / cost.allreduce_buckets
        reduce_ms = ring_allgather_ms(per_bucket, data_parallel, link) * cost.allreduce_buckets
    if overlap_gather:
        first = gather / max(1, cost.allreduce_buckets)
        gather = max(first, gather - cost.forward_ms)
    sharded = (cost.optimizer_ms - fixed_ms) / data_parallel
    return replace(cost, optimizer_ms=max(0.0, fixed_ms + sharded) + gather, allreduce_ms=reduce_ms)
