"""Cost model v1: analytic FLOPs of GPT blocks on a roofline, or the user's explicit costs.

Per transformer block and micro-batch (b sequences of s tokens, width h, MLP width f, a heads):
- forward FLOPs: QKV 6bsh^2 + scores and attention-times-V 4bs^2h + output projection 2bsh^2
  + MLP 4bshf  (= 24bsh^2 + 4bs^2h for f = 4h);
- input grad: the same matmuls again (8bsh^2 + 4bshf) plus both operands of the two attention
  matmuls (8bs^2h); weight grad: 8bsh^2 + 4bshf. Backward = input grad + weight grad = 2 x forward.
- the LM head (final norm, logits, loss) on the last stage: 2bshV forward, 2bshV each for input
  and weight grad; the embedding on the first stage: a lookup, no matmul FLOPs.
- activations held per micro-batch (16-bit, no recompute, Korthikanti et al.): sbh(34 + 5as/h)
  bytes per block; the message between stages: s x b x h elements.
Time = FLOPs / (peak x efficiency). Optimizer step: 32 bytes of memory traffic per parameter at
HBM bandwidth (mixed-precision Adam). Gradient clipping: one read of every gradient for the norm,
which is then all-reduced over the pipeline's stages (2(p-1) x link latency) before the update.
Gradient all-reduce over the d replicas: ring, 2(d-1)/d x bytes / bandwidth + 2(d-1) x latency, or
tree, 2 x bytes / bandwidth + 2 ceil(log2 d) x latency, in buckets of ``training.bucket_mb``; with
``overlap_grad_reduce`` each bucket starts as soon as the last backward has produced it. With
ZeRO-1 the optimizer steps over 1/d of the parameters and the parameters are all-gathered after it
(a ring all-gather, half an all-reduce); the gradients are all-reduced as before (DeepSpeed's
default) or reduce-scattered (``training.zero_reduce: reduce_scatter``, Megatron's distributed
optimizer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ppsim import partition as part
from ppsim.costs import CostTable, Link, StageCost
from ppsim.errors import ScenarioError
from ppsim.hardware import Device, get_device
from ppsim.memory import Recompute, StaticMemory, block_activation_bytes, static_memory
from ppsim.profile import LayerTimes, LinkProfile, Profile
from ppsim.scenario import DTYPE_BYTES, LinkSpec, ModelSpec, Scenario, per_stage

OPTIMIZER_BYTES_PER_PARAM = 32


@dataclass(frozen=True)
class LayerCost:
    """FLOPs, parameters and held activations of one layer for one micro-batch."""

    name: str
    forward_flops: float
    input_grad_flops: float
    weight_grad_flops: float
    params: int
    activation_bytes: int
    recompute_flops: float = 0.0  #: the part of input_grad_flops that recomputes the forward

    @property
    def total_flops(self) -> float:
        return self.forward_flops + self.input_grad_flops + self.weight_grad_flops


def gpt_layers(model: ModelSpec, micro_batch: int, recompute: Recompute = "none", tensor_parallel: int = 1, *,
               sequence_parallel: bool = False, flash_attention: bool = False
               ) -> tuple[LayerCost, LayerCost, LayerCost]:
    """(embedding, one transformer block, LM head) for one micro-batch, per device of a tensor-
    parallel group of ``tensor_parallel`` (Megatron: the matmuls, the vocabulary and the heads are
    split t ways). With recompute, the block's input-grad pass also runs the recomputed forward
    (all of it, or the attention core); FlashAttention's backward recomputes the scores (QK^T)."""
    b, s, h, f, a, V = micro_batch, model.seq_len, model.hidden, model.ffn, model.heads, model.vocab
    t = tensor_parallel
    g = model.kv / a  # K and V projections are g x the size of Q's (grouped-query attention)
    mlp_mats = 3 if model.mlp == "swiglu" else 2
    matmul = ((4 + 4 * g) * b * s * h * h + 2 * mlp_mats * b * s * h * f) / t
    attention = 4 * b * s * s * h / t
    again = {"none": 0, "selective": attention, "full": matmul + attention}[recompute]
    if flash_attention:
        again = (matmul if recompute == "full" else 0) + (attention if recompute == "full" else 0) + attention / 2
    if model.mlp == "swiglu":  # Llama-style block: no biases, two RMSNorms
        block_params = int((2 + 2 * g) * h * h + 3 * h * f) // t + 2 * h
    else:  # GPT-style block: biases, two LayerNorms
        block_params = int((2 + 2 * g) * h * h + 2 * h * f + (2 + 2 * g) * h + f) // t + 5 * h
    block = LayerCost(
        name="block",
        forward_flops=matmul + attention,
        input_grad_flops=matmul + 2 * attention + again,
        weight_grad_flops=matmul,
        params=block_params,
        activation_bytes=block_activation_bytes(s, b, h, a, DTYPE_BYTES[model.dtype], recompute, t,
                                                kv_heads=model.kv, ffn_hidden=f, mlp=model.mlp,
                                                sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                                                dropout=model.dropout),
        recompute_flops=again,
    )
    embedding = LayerCost(
        name="embedding",
        forward_flops=0.0,
        input_grad_flops=0.0,
        weight_grad_flops=0.0,
        params=V * h // t + (s * h if model.positions == "learned" else 0),
        activation_bytes=int(s * b * h * DTYPE_BYTES[model.dtype]),
    )
    logits = 2 * b * s * h * V / t
    head = LayerCost(
        name="lm_head",
        forward_flops=logits,
        input_grad_flops=logits,
        weight_grad_flops=logits,
        params=V * h // t + 2 * h,
        activation_bytes=4 * s * b * V // t,
    )
    return embedding, block, head


def tensor_parallel_ms(model: ModelSpec, micro_batch: int, tensor_parallel: int, link: Link) -> float:
    """One of the all-reduces of a block's activations (s x b x h values) over its tensor-parallel
    group; Megatron runs two in each block's forward and two in its backward."""
    nbytes = model.seq_len * micro_batch * model.hidden * DTYPE_BYTES[model.dtype]
    return ring_allreduce_ms(nbytes, tensor_parallel, link)


def tree_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """(Double binary) tree all-reduce: reduce up and broadcast down a tree of depth log2(n):
    2 x bytes / bandwidth + 2 ceil(log2 n) x latency."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * link.serialization_ms(int(nbytes)) + 2 * math.ceil(math.log2(ranks)) * link.latency_ms


def grad_allreduce(grad_bytes: float, ranks: int, link: Link, algorithm: str, bucket_bytes: float) -> tuple[float, int]:
    """(total ms, buckets) of the data-parallel gradient all-reduce, run in buckets of ``bucket_bytes``."""
    if ranks <= 1 or grad_bytes <= 0:
        return 0.0, 1
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    one = (tree_allreduce_ms if algorithm == "tree" else ring_allreduce_ms)(grad_bytes / buckets, ranks, link)
    return one * buckets, buckets


def shard_optimizer(cost: StageCost, data_parallel: int, link: Link, gather_link: Link,
                    reduce: str = "allreduce", fixed_ms: float = 0.0) -> StageCost:
    """The stage's step with ZeRO-1: each replica steps the optimizer over its 1/d of the parameters
    and the updated parameters are all-gathered (on ``gather_link``) before the next forward; the
    all-gather is charged to the optimizer step, which ends when the parameters are whole again.
    The gradients are all-reduced as without ZeRO (``allreduce``: DeepSpeed's default bucket
    all-reduce, each replica keeping its part) or reduce-scattered on ``link`` (``reduce_scatter``:
    Megatron's distributed optimizer, half a ring all-reduce per bucket). ``fixed_ms`` of the step
    (a framework's own overhead, measured) does not shrink with the shard."""
    if data_parallel <= 1 or cost.grad_bytes <= 0:
        return cost
    gather = ring_allgather_ms(cost.grad_bytes, data_parallel, gather_link)
    if reduce == "reduce_scatter":
        per_bucket = cost.grad_bytes / cost.allreduce_buckets
        cost = replace(cost, allreduce_ms=ring_allgather_ms(per_bucket, data_parallel, link) * cost.allreduce_buckets)
    sharded = (cost.optimizer_ms - fixed_ms) / data_parallel
    return replace(cost, optimizer_ms=max(0.0, fixed_ms + sharded) + gather)


def ring_allgather_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-gather of ``nbytes`` in all (1/n from each of n devices): (n-1)/n x bytes / bandwidth
    + (n-1) x latency, half of a ring all-reduce."""
    return ring_allreduce_ms(nbytes, ranks, link) / 2


def ring_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce over ``ranks`` devices: 2(n-1)/n x bytes / bandwidth + 2(n-1) x latency."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * link.serialization_ms(int(nbytes)) + 2 * (ranks - 1) * link.latency_ms


def _cluster_links(s: Scenario, device: Device, n_virtual: int) -> tuple[tuple[Link, ...], Link, Link]:
    """(per stage boundary, data-parallel, tensor-parallel) links from the cluster's routes."""
    from ppsim import cluster as cl

    spec = s.cluster
    assert spec is not None
    intra, inter = spec.intra_node, spec.inter_node
    c = cl.Cluster(
        nodes=spec.nodes,
        devices_per_node=spec.devices_per_node,
        intra=cl.LinkKind(intra.bandwidth_gb_s, intra.latency_us) if intra
        else cl.LinkKind(device.intra_node_gb_s, device.intra_node_latency_us),
        inter=cl.LinkKind(inter.bandwidth_gb_s, inter.latency_us) if inter
        else cl.LinkKind(device.inter_node_gb_s, device.inter_node_latency_us),
        nics_per_node=spec.nics_per_node or spec.devices_per_node,
    )
    p, d, t = s.pipeline.stages, s.data_parallel, s.tensor_parallel
    cl.check_fits(c, p, d, t)
    return cl.plan_links(c, n_virtual, p, d, t, spec.placement)


def _link(spec: LinkSpec | None, default_gb_s: float, default_latency_us: float) -> Link:
    """The scenario's link if it gives one, else the device's default."""
    if spec is None:
        return Link.from_gb_s(default_gb_s, default_latency_us)
    return Link.from_gb_s(spec.bandwidth_gb_s, spec.latency_us)


def _links(s: Scenario, device: Device) -> tuple[Link, Link, Link]:
    """(stage to stage, data-parallel, tensor-parallel) links from ``hardware``, or the device's defaults."""
    hw = s.hardware
    return (
        _link(hw.link, device.inter_node_gb_s, device.inter_node_latency_us),
        _link(hw.dp_link, device.intra_node_gb_s, device.intra_node_latency_us),
        _link(hw.tp_link, device.intra_node_gb_s, device.intra_node_latency_us),
    )


@dataclass(frozen=True)
class Workload:
    """Costs plus the figures the metrics need (what one step does)."""

    costs: CostTable
    partition: list[int] | None  #: blocks per virtual stage, when a model is given
    model_flops_per_step: float | None  #: forward + backward FLOPs of all micro-batches and replicas
    forward_flops_per_step: float | None
    peak_flops_per_device: float | None
    samples_per_step: int
    tokens_per_step: int | None


def build_workload(s: Scenario, profile: Profile | None = None) -> Workload:
    """Costs of every virtual stage for the scenario: from explicit costs if given, else from a
    measured profile if given, else from the model's FLOPs on the device's roofline."""
    if profile is not None:
        if s.costs is not None:
            raise ScenarioError("the scenario gives explicit costs; a profile replaces model-based costs only: "
                                "remove the 'costs' section or the --profile option", field="--profile")
        profile.check_applies(s)
    device = get_device(s.hardware.device, s.hardware.device_file)
    p, v, m, d = s.pipeline.stages, s.pipeline.chunks, s.microbatches, s.data_parallel
    n_virtual = p * v
    micro = s.training.micro_batch
    samples = micro * m * d
    tokens = samples * s.model.seq_len if s.model else None
    p2p_link, dp_link, tp_link = _links(s, device)
    tp = s.tensor_parallel
    boundary_links: tuple[Link, ...] = (p2p_link,)
    if s.cluster is not None:
        boundary_links, dp_link, tp_link = _cluster_links(s, device, n_virtual)
        p2p_link = boundary_links[0]

    if profile is not None and tp > 1 and "allreduce" not in profile.collectives:
        raise ScenarioError("this profile has no measured all-reduce, which tensor parallelism needs; measure a new "
                            "one with `ppexec profile`, or predict tensor_parallel > 1 from the model (no --profile)",
                            field="--profile")
    layers = gpt_layers(s.model, micro, s.training.recompute, tp, sequence_parallel=s.training.sequence_parallel,
                        flash_attention=s.training.flash_attention) if s.model else None
    counts: list[int] | None = None
    stage_flops: list[tuple[float, float, float]] = []
    stage_recompute: list[float] = []
    stage_params: list[int] = []
    stage_act: list[int] = []
    if s.model and layers:
        emb, block, head = layers
        if profile is not None and tp > 1:
            # measured costs are ppexec's model, whose embedding and head are whole on every
            # tensor-parallel rank: count their parameters (gradients, all-reduce, memory) whole too
            whole_emb, _, whole_head = gpt_layers(s.model, micro, s.training.recompute, 1)
            emb, head = replace(emb, params=whole_emb.params), replace(head, params=whole_head.params)
        if profile is not None:
            counts = _partition(s, n_virtual, *_profile_loads(profile, n_virtual))
        else:
            counts = _partition(s, n_virtual, block.total_flops, emb.total_flops, head.total_flops)
        for k, c in enumerate(counts):
            parts = [block] * c + ([emb] if k == 0 else []) + ([head] if k == n_virtual - 1 else [])
            stage_flops.append(
                (
                    sum(x.forward_flops for x in parts),
                    sum(x.input_grad_flops for x in parts),
                    sum(x.weight_grad_flops for x in parts),
                )
            )
            stage_recompute.append(sum(x.recompute_flops for x in parts))
            stage_params.append(sum(x.params for x in parts))
            stage_act.append(sum(x.activation_bytes for x in parts))
    dtype_bytes = DTYPE_BYTES[s.model.dtype] if s.model else 2
    message_bytes = s.model.seq_len * micro * s.model.hidden * dtype_bytes if s.model else 0
    if s.training.sequence_parallel:  # each tensor-parallel rank sends its own 1/t of the sequence
        message_bytes //= tp
    statics = [
        static_memory(params, dtype_bytes, zero_stage=s.training.zero_stage, data_parallel=d,
                      message_bytes=message_bytes, neighbours=(vs > 0) + (vs < n_virtual - 1))
        for vs, params in enumerate(stage_params)
    ]

    if s.costs is not None:
        c = s.costs
        fw, bw, wg, opt, ar = (
            per_stage(getattr(c, k), p) for k in ("forward_ms", "backward_ms", "weight_grad_ms", "optimizer_ms", "allreduce_ms")
        )
        stages = []
        for vs in range(n_virtual):
            r = vs % p
            stages.append(
                StageCost(
                    forward_ms=fw[r] / v,
                    backward_ms=bw[r] / v,
                    weight_grad_ms=wg[r] / v,
                    optimizer_ms=opt[r] / v,
                    allreduce_ms=ar[r] / v,
                    grad_bytes=stage_params[vs] * dtype_bytes if stage_params else 0,
                    activation_bytes=stage_act[vs] if stage_act else 0,
                    params=stage_params[vs] if stage_params else 0,
                    layers=counts[vs] if counts else 0,
                    memory=statics[vs] if statics else None,
                )
            )
        # p values: the transfer out of rank r; p - 1 values: one per boundary
        p2p = [float(x) for x in c.p2p_ms] if isinstance(c.p2p_ms, list) else [float(c.p2p_ms)] * p
        links = tuple(Link(latency_ms=p2p[b % len(p2p)]) for b in range(max(1, n_virtual - 1)))
        costs = CostTable(stages=tuple(stages), message_bytes=message_bytes, links=links,
                          clip_allreduce_ms=2 * (p - 1) * links[0].latency_ms)
    elif profile is not None:
        assert counts is not None
        _, block, _ = layers
        costs = profiled_costs(profile, counts, stage_params, stage_act, message_bytes, d, dtype_bytes, statics,
                               recompute_extra_ms(profile, s.training.recompute, block), s.training.allreduce,
                               s.training.bucket_mb * 1e6, s.training.zero_stage, s.training.zero_reduce,
                               tp, s.training.recompute == "full",
                               s.model.seq_len * micro * s.model.hidden * dtype_bytes)
    else:
        assert s.model is not None
        eff = s.hardware.efficiency or device.efficiency
        rate = device.peak_flops(s.model.dtype) * eff / 1e3  # FLOPs per millisecond
        hbm = device.hbm_gb_s * 1e9 / 1e3  # bytes per millisecond
        stages = []
        # two all-reduces of the activations per block and pass when the block is tensor-parallel
        tp_ms = 2 * tensor_parallel_ms(s.model, micro, tp, tp_link) if tp > 1 else 0.0
        for vs in range(n_virtual):
            f_, i_, w_ = stage_flops[vs]
            grad_bytes = stage_params[vs] * dtype_bytes
            reduce_ms, buckets = grad_allreduce(grad_bytes, d, dp_link, s.training.allreduce, s.training.bucket_mb * 1e6)
            blocks = counts[vs] if counts else 0
            stages.append(
                StageCost(
                    forward_ms=f_ / rate + blocks * tp_ms,
                    # a fully recomputed forward runs its all-reduces again
                    backward_ms=(i_ + w_) / rate + blocks * tp_ms * (2 if s.training.recompute == "full" else 1),
                    weight_grad_ms=w_ / rate,
                    optimizer_ms=stage_params[vs] * OPTIMIZER_BYTES_PER_PARAM / hbm,
                    clip_ms=stage_params[vs] * dtype_bytes / hbm,
                    allreduce_ms=reduce_ms,
                    allreduce_buckets=buckets,
                    grad_bytes=grad_bytes,
                    activation_bytes=stage_act[vs],
                    params=stage_params[vs],
                    layers=counts[vs] if counts else 0,
                    memory=statics[vs],
                )
            )
        if s.training.zero_stage >= 1:
            stages = [shard_optimizer(c, d, dp_link, dp_link, s.training.zero_reduce) for c in stages]
        costs = CostTable(stages=tuple(stages), message_bytes=message_bytes, links=boundary_links,
                          clip_allreduce_ms=2 * (p - 1) * max(x.latency_ms for x in boundary_links),
                          overlap_grad_reduce=s.training.overlap_grad_reduce)
    # per device figures x t devices; model FLOPs (what MFU counts) leave out the recomputed forward
    flops = (sum(sum(x) for x in stage_flops) - sum(stage_recompute)) * m * d * tp if stage_flops else None
    fwd_flops = sum(x[0] for x in stage_flops) * m * d * tp if stage_flops else None
    return Workload(
        costs=costs,
        partition=counts,
        model_flops_per_step=flops,
        forward_flops_per_step=fwd_flops,
        peak_flops_per_device=device.peak_flops(s.model.dtype) if s.model else None,
        samples_per_step=samples,
        tokens_per_step=tokens,
    )


def _partition(s: Scenario, n_virtual: int, block: float, first_extra: float, last_extra: float) -> list[int]:
    """Blocks per virtual stage; ``balanced`` evens out ``block`` per layer plus the extras of the
    first and last stage (FLOPs, or measured milliseconds)."""
    assert s.model is not None
    how = s.pipeline.partition
    layers = s.model.layers
    if isinstance(how, list):
        return part.explicit(how, layers, n_virtual)
    if how == "uniform":
        return part.uniform(layers, n_virtual)
    if how == "balanced":
        return part.balanced([block] * layers, n_virtual, first_extra, last_extra)
    raise ScenarioError(f"unknown partition {how!r}; use uniform, balanced or a list of layer counts", field="pipeline.partition")


def _layer_ms(x: LayerTimes) -> float:
    return x.forward_ms + x.backward_ms


def _profile_loads(profile: Profile, n_virtual: int) -> tuple[float, float, float]:
    """(block, first extra, last extra) in measured ms of forward + backward, for balancing."""
    o = profile.overheads
    mid = o["middle"].forward_ms + o["middle"].backward_ms
    first = _layer_ms(profile.embedding) + o["first"].forward_ms + o["first"].backward_ms - mid
    last = _layer_ms(profile.head) + o["last"].forward_ms + o["last"].backward_ms - mid
    return _layer_ms(profile.block), first, last


def recompute_extra_ms(profile: Profile, recompute: Recompute, block: LayerCost) -> tuple[float, float]:
    """(forward, backward) time recomputation adds to a block: as the profile measured it, or, for
    a profile without it, the recomputed share of the measured forward by FLOPs in the backward."""
    if recompute == "none":
        return 0.0, 0.0
    measured = profile.recompute.get(recompute)
    if measured is not None:
        return measured.forward_ms, measured.backward_ms
    return 0.0, profile.block.forward_ms * block.recompute_flops / block.forward_flops


def _profiled_link(lp: LinkProfile) -> Link:
    return Link(latency_ms=lp.latency_us / 1e3, bandwidth_bytes_per_ms=lp.bandwidth_gb_s * 1e6,
                send_overhead_ms=lp.send_overhead_us / 1e3, recv_overhead_ms=lp.recv_overhead_us / 1e3)


def profiled_costs(profile: Profile, counts: list[int], params: list[int], activations: list[int], message_bytes: int,
                   data_parallel: int, dtype_bytes: int, statics: list[StaticMemory] | None = None,
                   recompute_ms_per_block: tuple[float, float] = (0.0, 0.0), allreduce: str = "ring",
                   bucket_bytes: float = 25e6, zero_stage: int = 0, zero_reduce: str = "allreduce",
                   tensor_parallel: int = 1, full_recompute: bool = False, tp_message_bytes: int = 0) -> CostTable:
    """Per virtual stage costs from measured layer times: the stage's layers plus the framework's
    overheads for its position (and what recomputation adds to each block's forward and backward);
    the link and the gradient all-reduce from the measured link. With tensor parallelism t a block
    does its share of its measured work (1/t, or as the profile measured a split block: split
    blocks are less efficient than 1/t) plus two all-reduces of the activations in each pass (and
    two more in a fully recomputed forward), of ``tp_message_bytes`` each (the whole activation,
    even where sequence parallelism splits ``message_bytes`` between stages); the
    embedding and the head are whole on every rank, as ppexec runs them."""
    again_fwd, again_bwd = recompute_ms_per_block
    n = len(counts)
    link = _profiled_link(profile.link)
    # the collectives as measured, where the profile has them; else over the point-to-point link
    reduce_link = _profiled_link(profile.collectives["allreduce"]) if "allreduce" in profile.collectives else link
    gather_link = _profiled_link(profile.collectives["allgather"]) if "allgather" in profile.collectives else link
    block = profile.block
    if tensor_parallel > 1:
        t = tensor_parallel
        ar = ring_allreduce_ms(tp_message_bytes, t, reduce_link)
        fwd_share, bwd_share = 1 / t, 1 / t  # of the whole block's compute
        tpm = profile.tensor_parallel
        if tpm is not None:  # as measured split over tpm.size ranks, less its all-reduces, then rescaled
            ar_m = ring_allreduce_ms(tp_message_bytes, tpm.size, reduce_link)
            fwd_share = max(0.0, (tpm.forward_ms - 2 * ar_m) / tpm.whole_forward_ms) * tpm.size / t
            bwd_share = max(0.0, (tpm.backward_ms - 2 * ar_m) / tpm.whole_backward_ms) * tpm.size / t
        block = block.model_copy(update={
            "forward_ms": block.forward_ms * fwd_share + 2 * ar,
            "backward_ms": block.backward_ms * bwd_share + (4 if full_recompute else 2) * ar,
            "weight_grad_ms": block.weight_grad_ms * bwd_share, "optimizer_ms": block.optimizer_ms / t})
        again_fwd, again_bwd = again_fwd * fwd_share, again_bwd * fwd_share
    stages = []
    for vs, c in enumerate(counts):
        parts = [block] * c + ([profile.embedding] if vs == 0 else []) + ([profile.head] if vs == n - 1 else [])
        extra = profile.overhead(vs, n)
        grad_bytes = params[vs] * dtype_bytes
        reduce_ms, buckets = grad_allreduce(grad_bytes, data_parallel, reduce_link, allreduce, bucket_bytes)
        stages.append(
            StageCost(
                forward_ms=max(0.0, extra.forward_ms + sum(x.forward_ms for x in parts) + c * again_fwd),
                backward_ms=max(0.0, extra.backward_ms + sum(x.backward_ms for x in parts) + c * again_bwd),
                weight_grad_ms=sum(x.weight_grad_ms for x in parts),
                optimizer_ms=max(0.0, extra.optimizer_ms + sum(x.optimizer_ms for x in parts)),
                clip_ms=max(0.0, extra.clip_ms),
                allreduce_ms=reduce_ms,
                allreduce_buckets=buckets,
                grad_bytes=grad_bytes,
                activation_bytes=activations[vs],
                params=params[vs],
                layers=c,
                memory=statics[vs] if statics else None,
            )
        )
    if zero_stage >= 1:
        stages = [shard_optimizer(c, data_parallel, reduce_link, gather_link, zero_reduce,
                                  profile.overhead(vs, n).optimizer_ms) for vs, c in enumerate(stages)]
    return CostTable(stages=tuple(stages), message_bytes=message_bytes, links=(link,),
                     clip_allreduce_ms=profile.clip_allreduce_us / 1e3)
