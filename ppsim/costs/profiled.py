"""Stage costs from a measured profile (``ppexec profile``) instead of the roofline.

A stage's forward is the overhead of its position (first / middle / last) plus its layers'
measured forwards, and likewise for backward, weight grad, optimizer and clipping; what
recomputation adds to a block is as the profile measured it; the link and the collectives are the
measured ones. With tensor parallelism t a block does its share of its measured work (1/t, or as
the profile measured a split block: split blocks are less efficient than 1/t); the embedding
and the head are whole on every rank, as ppexec runs them. The collectives tensor parallelism adds
(:mod:`~ppsim.costs.tensor_parallel`) are priced on the measured all-reduce.
"""

from __future__ import annotations

from ppsim.costs.analytic import block_alltoalls, expert_alltoalls, token_counts
from ppsim.costs.collectives import grad_allreduce, ring_allreduce_ms
from ppsim.costs.copies import copies_summed
from ppsim.costs.layers import LayerCost, gpt_layers
from ppsim.costs.layout import Layout
from ppsim.costs.memory import Recompute
from ppsim.costs.moe import ExpertShard
from ppsim.costs.table import CostTable, Link, memory_rules
from ppsim.costs.tensor_parallel import TensorParallelComm, gathering, tensor_parallel_comm
from ppsim.costs.zero import shard_optimizer
from ppsim.inputs.profile import LayerTimes, LinkProfile, Profile
from ppsim.inputs.scenario import Scenario


def _routing_unstated(s: Scenario, profile: Profile | None) -> bool:
    """A profile prices an expert-parallel plan whose scenario says nothing of its routing (neither
    ``model.moe.skew`` nor ``routing``)."""
    moe = s.model.moe if s.model is not None else None
    return profile is not None and moe is not None and s.expert_parallel > 1 and moe.routing is None \
        and moe.skew is None


def with_profiled_routing(s: Scenario, profile: Profile | None) -> Scenario:
    """``s`` with its experts' routing skew at what ``profile`` measured at its expert parallelism,
    where the scenario says nothing of its routing and the profile measured it; else ``s`` as it is."""
    if not _routing_unstated(s, profile):
        return s
    assert profile is not None and s.model is not None and s.model.moe is not None  # _routing_unstated
    skew = profile.routing_skew.get(s.expert_parallel)
    if skew is None:
        return s
    measured = s.model.moe.model_copy(update={"skew": skew})
    return s.model_copy(update={"model": s.model.model_copy(update={"moe": measured})})


def unmeasured_routing(s: Scenario, profile: Profile | None) -> bool:
    """The routing of ``s`` is left balanced for want of a figure: its scenario gives none and
    ``profile`` measured none at its expert parallelism (an older profile, or an EP its run could
    not split its experts over)."""
    return _routing_unstated(s, profile) and profile is not None and s.expert_parallel not in profile.routing_skew


def profile_link(lp: LinkProfile) -> Link:
    """The simulator's link of a measured one (latency, bandwidth, send and receive overheads)."""
    return Link(latency_ms=lp.latency_us / 1e3, bandwidth_bytes_per_ms=lp.bandwidth_gb_s * 1e6,
                send_overhead_ms=lp.send_overhead_us / 1e3, recv_overhead_ms=lp.recv_overhead_us / 1e3)


def balancing_loads(profile: Profile, moe_share: float = 0.0) -> tuple[float, float, float]:
    """(a block, what the first stage adds, what the last adds) in measured ms of forward +
    backward: what the balanced partition evens out (a block: the mean over the model's blocks,
    ``moe_share`` of them MoE blocks)."""
    def both(x: LayerTimes) -> float:
        return x.forward_ms + x.backward_ms

    block = both(profile.block)
    if profile.moe_block is not None:
        block += moe_share * (both(profile.moe_block) - block)

    o = profile.overheads
    mid = o["middle"].forward_ms + o["middle"].backward_ms
    first = both(profile.embedding) + o["first"].forward_ms + o["first"].backward_ms - mid
    last = both(profile.head) + o["last"].forward_ms + o["last"].backward_ms - mid
    return block, first, last


def recompute_extra_ms(profile: Profile, recompute: Recompute, block: LayerCost) -> tuple[float, float]:
    """(forward, backward) time recomputation adds to a block: as the profile measured it, or, for
    a profile without it, the recomputed share of the measured forward by FLOPs in the backward."""
    if recompute == "none":
        return 0.0, 0.0
    measured = profile.recompute.get(recompute)
    if measured is not None:
        return measured.forward_ms, measured.backward_ms
    return 0.0, profile.block.forward_ms * block.recompute_flops / block.forward_flops


def profiled_costs(s: Scenario, layout: Layout, profile: Profile, block_flops: LayerCost,
                   runs_split: bool = False) -> CostTable:
    """Per virtual stage costs of ``layout`` from the measured ``profile``; ``block_flops`` (the
    block's FLOPs) prices a recomputation the profile did not measure. ``runs_split``: the
    schedule runs every backward as an input grad then a weight grad (and never whole), priced with
    the split the profile timed, when it timed one."""
    training, d, t = s.training, s.data_parallel, s.tensor_parallel
    recompute_forward_ms, recompute_backward_ms = recompute_extra_ms(profile, training.recompute, block_flops)
    n = len(layout.stages) // layout.pipes  # the stages of one copy of the model
    link = profile_link(profile.link)
    # the collectives as measured, where the profile has them; else over the point-to-point link
    measured = profile.collectives
    reduce_link = profile_link(measured["allreduce"]) if "allreduce" in measured else link
    gather_link = profile_link(measured["allgather"]) if "allgather" in measured else link
    block = profile.block
    # a block's tensor-parallel all-reduces in its forward and its backward (what an overlapped pass hides)
    tp = tensor_parallel_comm(layout.activation_bytes, t, reduce_link, sequence_parallel=training.sequence_parallel,
                              full_recompute=training.recompute == "full", scatter_gather=s.pipeline.scatter_gather)
    if t > 1:
        block, share = _tensor_parallel_block(profile, t, layout.activation_bytes, reduce_link, tp)
        recompute_forward_ms, recompute_backward_ms = recompute_forward_ms * share, recompute_backward_ms * share
    split = runs_split and _timed_split(profile)
    # a mixture of experts: its MoE blocks as measured, its dense ones' recomputation scaled to theirs
    moe_block = _busiest(s, profile.moe_block)
    dense_share = block.forward_ms / moe_block.forward_ms if moe_block is not None and moe_block.forward_ms else 1.0
    exchange_link = profile_link(measured["alltoall"]) if "alltoall" in measured else link
    stages = []
    for at, st in enumerate(layout.stages):
        k = layout.position(at)
        moe_blocks = st.moe_blocks if moe_block is not None else 0
        parts = [block] * (st.blocks - moe_blocks)
        if moe_block is not None:
            parts += [moe_block] * moe_blocks
        parts += ([profile.embedding] if k == 0 else []) + ([profile.head] if k == n - 1 else [])
        recomputed = moe_blocks + (st.blocks - moe_blocks) * dense_share  # blocks of the profiled kind, in time
        a2a = expert_alltoalls(s, st, block_alltoalls(s, st, exchange_link, gather_link))
        counts = token_counts(s, st, exchange_link)
        extra = profile.overhead(k, n)
        reduce_ms, buckets = grad_allreduce(st.reduced_params * layout.dtype_bytes, d, reduce_link, training.allreduce,
                                            training.bucket_mb * 1e6)
        backward_ms, weight_grad_ms = split_backward(parts) if split and k > 0 else (
            sum(x.backward_ms for x in parts), sum(x.weight_grad_ms for x in parts))
        backward_ms = (max(0.0, extra.backward_ms + backward_ms + recomputed * recompute_backward_ms) + a2a.backward_ms
                       + counts.backward_ms)
        if split and k == 0:  # nothing to send back: torch runs the whole backward as the weight grad
            weight_grad_ms = backward_ms
        stages.append(layout.stage_cost(
            at,
            forward_ms=max(0.0, extra.forward_ms + sum(x.forward_ms for x in parts) + recomputed * recompute_forward_ms)
            + a2a.forward_ms + counts.forward_ms,
            backward_ms=backward_ms,
            # the position's overhead is fitted and may be negative (noise): it shortens the input-grad
            # part, which is the framework's; the weight grad, measured alone, can be at most the backward
            weight_grad_ms=min(backward_ms, weight_grad_ms),
            optimizer_ms=max(0.0, extra.optimizer_ms + sum(x.optimizer_ms for x in parts)),
            clip_ms=max(0.0, extra.clip_ms),
            allreduce_ms=reduce_ms,
            allreduce_buckets=buckets,
            forward_comm_ms=st.blocks * tp.forward_ms + a2a.forward_ms + counts.forward_ms,
            backward_comm_ms=st.blocks * tp.backward_ms + a2a.backward_ms + counts.backward_ms,
            forward_overlap_ms=a2a.forward_ms,
            backward_overlap_ms=a2a.backward_ms,
        ))
    if training.zero_stage >= 1:
        stages = [shard_optimizer(c, d, reduce_link, gather_link, training.zero_reduce,
                                  profile.overhead(layout.position(at), n).optimizer_ms) for at, c in enumerate(stages)]
    stages = copies_summed(s, stages, layout, reduce_link)  # the copies' ranks: over the measured all-reduce
    return CostTable(stages=tuple(stages), message_bytes=layout.message_bytes, links=gathering((link,), tp),
                     clip_allreduce_ms=profile.clip_allreduce_us / 1e3, **memory_rules(s.pipeline))


def _busiest(s: Scenario, measured: LayerTimes | None) -> LayerTimes | None:
    """The MoE block of the busiest expert-parallel rank: the ``measured`` one (every expert local,
    so its routed experts ran the mean share of the copies) with its FLOPs at the busiest rank's
    skew instead, pass by pass; the same without expert parallelism (one rank runs every copy)."""
    model = s.model
    moe = model.moe if model else None
    if measured is None or model is None or moe is None or s.expert_parallel <= 1:
        return measured
    skew = ExpertShard.of(model, s.expert_parallel).skew
    if skew == 1:
        return measured

    def block(skew: float) -> LayerCost:
        return gpt_layers(model, s.training.micro_batch, experts=ExpertShard(moe, rank_skew=skew))[1]

    even, busy = block(1.0), block(skew)
    forward = busy.forward_flops / even.forward_flops
    backward = (busy.input_grad_flops + busy.weight_grad_flops) / (even.input_grad_flops + even.weight_grad_flops)
    weight = busy.weight_grad_flops / even.weight_grad_flops
    return measured.model_copy(update={
        "forward_ms": measured.forward_ms * forward, "backward_ms": measured.backward_ms * backward,
        "weight_grad_ms": measured.weight_grad_ms * weight,
        "split_backward_ms": None if measured.split_backward_ms is None else measured.split_backward_ms * backward})


def _timed_split(profile: Profile) -> bool:
    """Whether the profile timed the backward split in I and W (``split_backward_ms``; older
    profiles did not, and are priced with the whole backward)."""
    return all(x.split_backward_ms is not None for x in (profile.block, profile.head))


def split_backward(parts: list[LayerTimes]) -> tuple[float, float]:
    """(I + W, W) of ``parts`` with the backward split in two passes, as the profile timed it: a
    layer's split costs ``split_backward_ms`` in all (more than its whole backward), of which the
    weight grad takes the same share as of the whole backward."""
    total = weight = 0.0
    for x in parts:
        both = x.split_backward_ms if x.split_backward_ms is not None else x.backward_ms
        total += both
        weight += both * x.weight_grad_ms / x.backward_ms if x.backward_ms > 0 else 0.0
    return total, weight


def _tensor_parallel_block(profile: Profile, t: int, activation_bytes: int, reduce_link: Link, tp: TensorParallelComm
                           ) -> tuple[LayerTimes, float]:
    """The measured block split t ways with its collectives (``tp``), and the share of the whole
    block's forward compute one rank does (what recomputation is scaled by)."""
    block = profile.block
    forward_share, backward_share = 1 / t, 1 / t  # of the whole block's compute
    split = profile.tensor_parallel
    if split is not None:  # as measured split over split.size ranks, less its all-reduces, then rescaled
        measured_allreduce = ring_allreduce_ms(activation_bytes, split.size, reduce_link)
        forward_share = max(0.0, (split.forward_ms - 2 * measured_allreduce) / split.whole_forward_ms) * split.size / t
        backward_share = max(0.0, (split.backward_ms - 2 * measured_allreduce) / split.whole_backward_ms) * split.size / t
    shared = block.model_copy(update={
        "forward_ms": block.forward_ms * forward_share + tp.forward_ms,
        "backward_ms": block.backward_ms * backward_share + tp.backward_ms,
        "weight_grad_ms": block.weight_grad_ms * backward_share, "optimizer_ms": block.optimizer_ms / t,
        "split_backward_ms": None if block.split_backward_ms is None else
        block.split_backward_ms * backward_share + tp.backward_ms})
    return shared, forward_share
