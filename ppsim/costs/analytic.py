"""Stage costs from the model's FLOPs on the device's roofline (no measurement).

Time = FLOPs / (peak x efficiency): at the device's flat efficiency of each GEMM's dtype
(:func:`flat_efficiency`: the scenario's ``hardware.efficiency``, else the share of the device's
best matmul in that dtype, or its ``efficiency``), or, with ``hardware.gemm_curves`` on a device
that has measured curves, GEMM by GEMM (its ``gemm`` curve by each GEMM's FLOPs, its ``attention``
curve by head dimension for the unfused attention matmuls: :func:`matmul_ms`); plus the
elementwise work's HBM bytes over the device's HBM bandwidth (:mod:`ppsim.costs.elementwise`:
norms, activations, softmax, dropout, residuals, the loss). Optimizer step: 32 bytes of memory traffic per parameter at
HBM bandwidth (mixed-precision Adam). Gradient clipping: one read of every gradient for the norm,
which is then all-reduced over the pipeline's stages (2(p-1) x link latency) before the update.
Tied embeddings: the first and the last stage all-reduce their copies' gradient before the step,
added to their optimizer step. Gradient all-reduce over the d replicas in buckets
(:func:`~ppsim.costs.collectives.grad_allreduce`);
with ZeRO-1 the optimizer steps over 1/d of the parameters and they are all-gathered after it.
Tensor parallelism adds its collectives to each block's passes and an all-gather to each received
stage-to-stage message (:mod:`~ppsim.costs.tensor_parallel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ppsim.costs.collectives import (
    GRAD_NORM_BYTES,
    Collective,
    grad_allreduce,
    ring_allgather_ms,
    ring_allreduce_ms,
    traffic,
)
from ppsim.costs.context_parallel import ContextParallelComm, context_parallel_comm, exchange_bytes
from ppsim.costs.copies import copies_summed
from ppsim.costs.fsdp import Exposed, fsdp_stage, offload
from ppsim.costs.gemms import Gemm
from ppsim.costs.launches import launch_time_us, launch_wait
from ppsim.costs.layers import LayerCost
from ppsim.costs.layout import Layout, StageShape
from ppsim.costs.links import Links
from ppsim.costs.low_precision import LowPrecision, scenario_precision
from ppsim.costs.measured import uses_curves
from ppsim.costs.moe import alltoall_ms
from ppsim.costs.recompute import selective_modules
from ppsim.costs.table import CostTable, Link, MoEPhases, StageCost, memory_rules
from ppsim.costs.tensor_parallel import TensorParallelComm, exposed_comm, gathering, tensor_parallel_comm
from ppsim.costs.zero import shard_optimizer
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import DEFAULT_ATTENTION_KERNEL, Device, FusedAttention
from ppsim.inputs.scenario import ModelSpec, Scenario

OPTIMIZER_BYTES_PER_PARAM = 32


def analytic_costs(s: Scenario, model: ModelSpec, layout: Layout, device: Device, links: Links) -> CostTable:
    """Per virtual stage costs of ``layout`` on ``device``, its links as ``links`` say."""
    training, d, t = s.training, s.weight_replicas, s.tensor_parallel  # gradients reduce over data x context
    efficiency = flat_efficiency(s, device)
    flops_per_ms = device.peak_flops(model.dtype) * efficiency(model.dtype) / 1e3
    curves = uses_curves(s, device)
    precision = scenario_precision(training.fp8, training.fp4, training.low_precision_params)
    narrow = precision.peak if precision else None  # the peak the blocks' linear layers run at
    narrow_speed = precision.gemm_speed(device.mx_formats) if precision else 1.0

    priced: dict[tuple[int, bool], tuple[tuple[Gemm, ...], float]] = {}  # by the list's identity: stages share lists

    def price(gemms: tuple[Gemm, ...], backward: bool = False) -> float:
        """Milliseconds of ``gemms`` of one pass, one by one (curves, or narrow linear layers beside
        16-bit ones); a list the layout shares between stages is priced once."""
        known = priced.get((id(gemms), backward))
        if known is not None and known[0] is gemms:
            return known[1]
        ms = matmul_ms(gemms, device, model.dtype, flash_attention=training.flash_attention,
                       efficiency=None if curves else efficiency, narrow=narrow, narrow_speed=narrow_speed,
                       backward=backward, kernel=training.priced_attention_kernel)
        priced[(id(gemms), backward)] = (gemms, ms)
        return ms

    def matmuls(st: StageShape) -> tuple[float, float, float]:
        """The stage's matmul milliseconds: forward, backward (input and weight grads), weight grad."""
        if not curves and narrow is None and training.priced_attention_kernel == DEFAULT_ATTENTION_KERNEL:
            return (st.forward_flops / flops_per_ms, (st.input_grad_flops + st.weight_grad_flops) / flops_per_ms,
                    st.weight_grad_flops / flops_per_ms)
        fwd, inp, wgt = price(st.gemms.forward), price(st.gemms.input_grad, True), price(st.gemms.weight_grad, True)
        return fwd, inp + wgt, wgt

    hbm_bytes_per_ms = device.memory_gb_s(measured=curves) * 1e9 / 1e3

    def whole_tp_comm(full_recompute: bool) -> TensorParallelComm:
        return tensor_parallel_comm(layout.activation_bytes, t, links.tensor_parallel,
                                    sequence_parallel=training.sequence_parallel, full_recompute=full_recompute,
                                    scatter_gather=s.pipeline.scatter_gather)

    sm_share = comm_sm_share(s, device)
    per_launch = launch_time_us(s, device)
    whole_tp = whole_tp_comm(training.recompute == "full")
    whole_plain = whole_tp_comm(False)  # the blocks beyond training.recompute_layers
    stages = []
    priced_shapes: dict[int, StageCost] = {}  # by the shape's identity: the layout's stages alike share one
    for k, st in enumerate(layout.stages):
        if (known_cost := priced_shapes.get(id(st))) is not None:
            stages.append(known_cost)
            continue
        forward_mm, backward_mm, weight_grad_mm = matmuls(st)
        gemm_ms = linear_gemm_ms(st, price, swiglu=model.mlp == "swiglu") if training.tp_comm_overlap and st.blocks \
            else None
        tp = exposed_comm(whole_tp, t, *gemm_ms) if gemm_ms else whole_tp
        if st.plain_blocks:  # one block's average over the stage's recomputed and plain blocks
            plain = exposed_comm(whole_plain, t, *gemm_ms) if gemm_ms else whole_plain
            recomputed = st.blocks - st.plain_blocks
            tp = replace(tp, backward_ms=(recomputed * tp.backward_ms + st.plain_blocks * plain.backward_ms)
                         / st.blocks)
        cp = block_context_comm(s, model, st, links.context_parallel, price)
        reduce_ms, buckets = grad_allreduce(st.reduced_params * layout.dtype_bytes, d, links.data_parallel,
                                            training.allreduce, training.bucket_mb * 1e6)
        compute_forward = forward_mm + st.forward_bytes / hbm_bytes_per_ms
        compute_backward = backward_mm + st.backward_bytes / hbm_bytes_per_ms
        more = sharded_and_offloaded(s, st, layout.dtype_bytes, precision, links, device, compute_forward,
                                     compute_backward)
        dispatched = precision.value_bytes / layout.dtype_bytes if precision and training.moe_fp8_dispatch else 1.0
        alltoalls = block_alltoalls(s, st, links.expert_parallel, links.expert_tensor, dispatched)
        a2a = expert_alltoalls(s, st, alltoalls)
        counts = token_counts(s, st, links.expert_parallel)
        phases = moe_phases(st, price, hbm_bytes_per_ms, alltoalls, per_launch)
        # what runs beside the compute and is not hidden by it: the collectives and copies left exposed
        forward_comm = (st.tp_collective_blocks * tp.forward_ms + st.blocks * cp.forward_ms + a2a.forward_ms
                        + counts.forward_ms + more.forward_ms)
        backward_comm = (st.tp_collective_blocks * tp.backward_ms + st.blocks * cp.backward_ms + a2a.backward_ms
                         + counts.backward_ms + more.backward_ms)
        # the GPU waits for the host where a pass's kernels take longer to launch than to run
        forward_wait = launch_wait(st.forward_launches, per_launch, compute_forward + forward_comm)
        backward_wait = launch_wait(st.backward_launches, per_launch, compute_backward + backward_comm)
        compute_forward, compute_backward = compute_forward + forward_wait, compute_backward + backward_wait
        # delayed weight grads: a backward's dispatch all-to-alls (half its own) run beside its weight grads
        own = min(a2a.backward_ms / 2, weight_grad_mm) if training.delay_wgrad else 0.0
        own_slowed = own * sm_share  # the weight grads beside them run on the SMs the all-to-alls leave
        stepped = st.params if training.zero_stage == 0 else st.params - st.expert_params + (
            st.expert_params * d / s.expert_replicas)  # each replica steps its shard: experts' over their replicas
        stages.append(layout.stage_cost(
            k,
            forward_ms=compute_forward + forward_comm,
            backward_ms=compute_backward + backward_comm - own + own_slowed,
            weight_grad_ms=weight_grad_mm,
            optimizer_ms=(stepped * OPTIMIZER_BYTES_PER_PARAM + st.step_bytes) / hbm_bytes_per_ms,
            clip_ms=st.params * layout.dtype_bytes / hbm_bytes_per_ms,
            allreduce_ms=reduce_ms,
            allreduce_buckets=buckets,
            forward_comm_ms=forward_comm,
            backward_comm_ms=backward_comm - own,
            forward_overlap_ms=a2a.forward_ms,
            backward_overlap_ms=a2a.backward_ms - own,
            self_hidden_ms=own,
            launch_wait_ms=forward_wait + backward_wait,
            moe_phases=phases,
        ))
        priced_shapes[id(st)] = stages[-1]
    if training.zero_stage >= 1:
        sharded: dict[int, StageCost] = {}  # by the cost's identity: stages alike share one (priced_shapes)
        for c in stages:
            if id(c) not in sharded:
                sharded[id(c)] = shard_optimizer(c, d, links.data_parallel, links.data_parallel, training.zero_reduce,
                                                 overlap_gather=training.overlap_param_gather,
                                                 fully_sharded=training.zero_stage >= 3)
        stages = [sharded[id(c)] for c in stages]
    stages = copies_summed(s, stages, layout, links.copies)
    tied_ms = tied_embedding_allreduce_ms(s, layout, links.embedding)
    if tied_ms > 0:
        stages[0] = replace(stages[0], optimizer_ms=stages[0].optimizer_ms + tied_ms)
        stages[-1] = replace(stages[-1], optimizer_ms=stages[-1].optimizer_ms + tied_ms)
    boundaries = gathering(links.boundaries, whole_tp)
    fabric = None
    if links.fabric is not None:
        kind: Collective = ("reduce_scatter" if training.zero_stage >= 1 and training.zero_reduce == "reduce_scatter"
                else "tree" if training.allreduce == "tree" else "ring")
        p = s.pipeline.stages
        fabric = links.fabric.fabric(tuple(
            (*traffic(kind, c.grad_bytes / c.allreduce_buckets, d), c.allreduce_buckets)
            if d > 1 and c.grad_bytes and training.zero_stage < 3 else None  # ZeRO-3 reduced them layer by layer
            for c in stages), traffic("ring", GRAD_NORM_BYTES, p) if p > 1 else None)
    # the gradient norm's ring all-reduce over the pipeline, at the pace of its slowest boundary
    slowest = max(boundaries, key=lambda x: x.latency_ms)
    return CostTable(stages=tuple(stages), message_bytes=layout.message_bytes, links=boundaries,
                     clip_allreduce_ms=ring_allreduce_ms(GRAD_NORM_BYTES, s.pipeline.stages, slowest),
                     overlap_grad_reduce=training.overlap_grad_reduce, fabric=fabric, overlap_sm_share=sm_share,
                     **memory_rules(s.pipeline))


def comm_sm_share(s: Scenario, device: Device) -> float:
    """The share of ``device``'s SMs the all-to-alls' kernels take beside compute
    (``training.moe_comm_sms`` of its ``sms``; 0 when not given)."""
    taken = s.training.moe_comm_sms
    if taken is None:
        return 0.0
    if device.sms is None:
        raise ScenarioError(f"training.moe_comm_sms takes SMs from {device.name}'s compute, and the device does not "
                            "say how many it has: give sms in a hardware.device_file, or drop moe_comm_sms",
                            field="training.moe_comm_sms")
    if taken >= device.sms:
        raise ScenarioError(f"gives the all-to-alls {taken} SMs, and {device.name} has {device.sms}: give fewer",
                            field="training.moe_comm_sms")
    return taken / device.sms


def flat_efficiency(s: Scenario, device: Device) -> Callable[[str], float]:
    """The flat pricing's fraction of peak per dtype: the scenario's ``hardware.efficiency`` for
    every dtype, else the device's figure of each (:meth:`~ppsim.inputs.hardware.Device.flat_efficiency`)."""
    override = s.hardware.efficiency
    if override is None:
        return device.flat_efficiency
    return lambda dtype: override


def matmul_ms(gemms: tuple[Gemm, ...], device: Device, dtype: str, *, flash_attention: bool = False,
              efficiency: float | Callable[[str], float] | None = None, narrow: str | None = None,
              narrow_speed: float = 1.0, backward: bool = False, kernel: str = DEFAULT_ATTENTION_KERNEL) -> float:
    """Milliseconds of ``gemms`` of one pass (the forward, or a ``backward`` one) on ``device``: each
    GEMM's FLOPs over the peak times its efficiency — the device's ``gemm`` curve at its FLOPs, the
    ``attention`` curve at its head dimension for the unfused attention matmuls, the fused
    ``kernel``'s figure of that pass under FlashAttention, the flat ``efficiency`` where the device
    has no such figure, or ``efficiency`` for every GEMM when given, a figure or one per dtype (a
    function of it; the fused attention's scaled by ``kernel``'s measured speed over the default
    kernel's). With ``narrow``
    (``fp8`` or ``fp4``) the blocks' linear layers run at that peak of the device (a curve measured
    in 16 bits does not price them), at ``narrow_speed`` of that rate (the recipe's GEMMs against
    per-tensor scaling's: :meth:`~ppsim.costs.low_precision.LowPrecision.gemm_speed`)."""
    def flat(kind: str) -> float:
        """The flat figure of ``kind`` (``efficiency`` is given wherever this is asked)."""
        assert efficiency is not None
        return efficiency(kind) if callable(efficiency) else efficiency

    ms = 0.0
    plain: dict[tuple[str, bool], float] = {}  # the flat figure's GEMMs outside fused attention: FLOPs by pricing
    for g in gemms:
        narrowed = bool(narrow) and g.linear and not g.wide
        kind = narrow if narrow and narrowed else dtype
        fused = bool(g.head_dim) and flash_attention
        if efficiency is not None and not fused:  # priced alike: summed, and divided once below
            plain[kind, narrowed] = plain.get((kind, narrowed), 0.0) + g.flops
            continue
        flops = g.flops
        whole = whole_window_backward(g, device, kernel, kind, measured=efficiency is None) \
            if fused and backward else None
        if whole is not None:  # the kernel's backward runs the window's whole causal triangle
            flops = g.flops * g.causal_keys / g.keys
            eff = whole.window_backward_fraction(g.causal_keys)
            if efficiency is not None:  # the flat figure, scaled by its speed over the default kernel's
                default = device.flash_attention
                speed = eff / default.fraction(g.head_dim, g.causal_keys, backward=True) if default else 1.0
                eff = min(whole.ceiling, flat(kind) * speed)
        elif efficiency is not None:  # fused attention: no kernel above its inputs' peak, whatever the figures' ratio
            speed = device.kernel_speed(kernel, kind, backward=backward, head_dim=g.head_dim, keys=g.keys)
            eff = min(device.kernel_ceiling(kernel), flat(kind) * speed)
        elif not g.head_dim:
            eff = device.gemm_efficiency(g.m * (g.count if g.batched else 1), g.n, g.k, kind)
        elif fused:
            eff = device.flash_attention_efficiency(kind, backward=backward, head_dim=g.head_dim, keys=g.keys,
                                                    kernel=kernel)
        else:
            eff = device.attention_efficiency(g.head_dim, kind)
        ms += flops / (device.peak_flops(kind) / 1e3 * eff * (narrow_speed if narrowed else 1.0))
    for (kind, narrowed), flops in plain.items():
        ms += flops / (device.peak_flops(kind) / 1e3 * flat(kind) * (narrow_speed if narrowed else 1.0))
    return ms


def whole_window_backward(g: Gemm, device: Device, kernel: str, dtype: str, *, measured: bool
                          ) -> FusedAttention | None:
    """Fused attention ``kernel``'s figures where its backward of ``g``, a sliding window's band,
    runs the window's whole causal triangle instead (cuDNN's FP8 backward:
    :attr:`~ppsim.inputs.hardware.FusedAttention.window_backward`; its queries' every key, under
    context parallelism too: ``g.causal_keys``); None where it runs the band, or where the kernel is
    not priced under the ``measured`` figures or the flat ones (its attention then cuDNN's)."""
    if not g.causal_keys or device.kernel_unpriced(kernel, dtype, measured=measured) is not None:
        return None
    fused = device.fused_attention(kernel)
    return fused if fused is not None and fused.window_backward else None


COUNT_BYTES = 8  #: a token count as the dispatchers exchange it (int64)


def expert_alltoalls(s: Scenario, st: StageShape, alltoalls: tuple[float, float]) -> Exposed:
    """A stage's expert-parallel all-to-alls per micro-batch (:mod:`~ppsim.costs.moe`): dispatch and
    combine in each MoE block's forward, both again in its backward, and once more where the
    backward recomputes the forward; with expert tensor parallelism each dispatch's all-gather of
    the tokens over the ETP group and each combine's reduce-scatter (their transposes backward);
    ``alltoalls``: one block's (dispatch, combine), :func:`block_alltoalls`. What an overlapped
    schedule may hide."""
    if not st.moe_blocks or (s.expert_parallel <= 1 and s.expert_tensor <= 1):
        return Exposed()
    pair = sum(alltoalls)
    return Exposed(st.moe_blocks * pair, st.moe_blocks * pair * (1 + _moe_recomputed(s, st)))


def token_counts(s: Scenario, st: StageShape, exchange: Link) -> Exposed:
    """A stage's exchanges of token counts per micro-batch: NCCL's dispatcher (``training.moe_dispatcher:
    alltoall``) sends each rank's count per expert (8 bytes each) to the expert tensor and expert
    parallel group, ETP x EP ranks (Megatron's all-gather over its ``tp_ep`` group; ppexec's
    all-to-all over EP, ETP being 1 there), before each forward's dispatch, so that every rank knows
    what it will receive from each; the backward reuses them unless it recomputes the forward.
    Latency-bound (one latency per peer; priced at an all-to-all's bytes, where Megatron's all-gather
    brings each rank (g - 1) x 8 E: a few kilobytes either way), on the all-to-alls' ``exchange``
    link, and never hidden: the dispatch waits for them. DeepEP's and HybridEP's kernels count
    inside their own."""
    moe = s.model.moe if s.model is not None else None
    group = s.expert_tensor * s.expert_parallel
    if moe is None or not st.moe_blocks or group <= 1 or s.training.moe_dispatcher != "alltoall":
        return Exposed()
    one = st.moe_blocks * alltoall_ms(COUNT_BYTES * moe.experts, group, exchange)
    return Exposed(one, one * _moe_recomputed(s, st))


def _moe_recomputed(s: Scenario, st: StageShape) -> float:
    """The share of the stage's MoE blocks whose forward the backward runs again (an empty last
    stage's MTP block: the scenario's mode); selective recomputation of the whole MoE layer runs
    every one again."""
    if s.training.recompute == "full":
        return 1 - st.plain_blocks / st.blocks if st.blocks else 1.0
    return 1.0 if "moe" in selective_modules(s.training.recompute, s.training.recompute_modules) else 0.0


def block_alltoalls(s: Scenario, st: StageShape, exchange: Link, gather: Link, narrow: float = 1.0
                    ) -> tuple[float, float]:
    """(dispatch, combine) of one MoE block's forward (:func:`expert_alltoalls`): the dispatch at
    ``narrow`` of the bytes, the combine whole, each with its ETP all-gather or reduce-scatter; the
    backward's gradients run the same two in reverse (the combine's at ``narrow``). ``exchange``:
    the all-to-alls' link, ``gather``: the ETP group's; ``narrow``: the bytes of the dispatch over
    the dtype's (DeepSeek-V3's FP8 dispatch: the forward's dispatch and the backward's gradient sent
    to the experts in FP8, the combine and its gradient in the dtype)."""
    etp = s.expert_tensor

    def one(share: float) -> float:
        ms = alltoall_ms(share * st.alltoall_bytes, s.expert_parallel, exchange)
        if etp > 1:  # the ETP group's tokens: each device's dispatched copies, etp of them gathered
            ms += ring_allgather_ms(etp * share * st.alltoall_bytes, etp, gather)
        return ms

    return one(narrow), one(1.0)


def moe_phases(st: StageShape, price: Callable[[tuple[Gemm, ...], bool], float], hbm_bytes_per_ms: float,
               alltoalls: tuple[float, float], launch_us: float | None = None) -> MoEPhases | None:
    """The parts of the stage's average MoE block an overlapped schedule pairs (``st.moe_halves``
    priced: their GEMMs by ``price``, their memory-bound bytes at ``hbm_bytes_per_ms``, each pass at
    least its launches at ``launch_us``; each kind's weighted by its blocks, as a stage of windowed
    and full attention pairs both; ``alltoalls``: :func:`block_alltoalls`'); None where the stage
    has none to pair."""
    if st.moe_halves is None or not st.moe_blocks:
        return None

    def passes(layer: LayerCost | None) -> tuple[float, float, float]:
        if layer is None:
            return 0.0, 0.0, 0.0
        g = layer.gemms
        forward = price(g.forward, False) + layer.forward_bytes / hbm_bytes_per_ms
        inputs = price(g.input_grad, True) + layer.backward_bytes / hbm_bytes_per_ms
        weights = price(g.weight_grad, True)
        forward += launch_wait(layer.forward_launches, launch_us, forward)
        backward = inputs + weights
        if backward > 0:  # the wait stretches both grads alike
            stretch = 1 + launch_wait(layer.backward_launches, launch_us, backward) / backward
            inputs, weights = inputs * stretch, weights * stretch
        return forward, inputs, weights

    blocks = sum(n for n, _ in st.moe_halves)
    priced = [(n / blocks, passes(attention) + passes(experts)) for n, (attention, experts) in st.moe_halves]
    af, ai, aw, mf, mi, mw = (sum(w * x[i] for w, x in priced) for i in range(6))
    dispatch, combine = alltoalls
    return MoEPhases(attention_forward=af, mlp_forward=mf, attention_input_grad=ai, attention_weight_grad=aw,
                     mlp_input_grad=mi, mlp_weight_grad=mw, dispatch_forward=dispatch, combine_forward=combine,
                     dispatch_backward=combine, combine_backward=dispatch)


def sharded_and_offloaded(s: Scenario, st: StageShape, dtype_bytes: int, precision: LowPrecision | None,
                          links: Links, device: Device, forward_ms: float, backward_ms: float) -> Exposed:
    """A stage's exposed FSDP collectives (ZeRO-3) and activation copies to the host, per micro-batch,
    beside its compute of ``forward_ms`` and ``backward_ms`` (:mod:`~ppsim.costs.fsdp`)."""
    out = Exposed()
    if s.training.zero_stage >= 3:
        weight_bytes = precision.value_bytes if precision and precision.params else dtype_bytes
        out = fsdp_stage(st.reduced_params, st.blocks + 1, weight_bytes, dtype_bytes, s.weight_replicas,
                         links.data_parallel, forward_ms, backward_ms)
    if st.offloaded_bytes and device.host_link_gb_s:
        copies = offload(st.offloaded_bytes, Link.from_gb_s(device.host_link_gb_s, 5.0), forward_ms, backward_ms)
        out = Exposed(out.forward_ms + copies.forward_ms, out.backward_ms + copies.backward_ms)
    return out


def block_context_comm(s: Scenario, model: ModelSpec, st: StageShape, link: Link,
                       price: Callable[[tuple[Gemm, ...], bool], float]) -> ContextParallelComm:
    """One block's exposed context-parallel communication (:mod:`~ppsim.costs.context_parallel`),
    beside the block's attention matmuls as priced."""
    cp = s.context_parallel
    if cp <= 1 or not st.blocks:
        return ContextParallelComm()
    kv_bytes, q_bytes = exchange_bytes(model, s.training.micro_batch, cp, s.tensor_parallel)

    def attention(gemms: tuple[Gemm, ...], backward: bool) -> float:
        return price(tuple(g for g in gemms if g.head_dim), backward) / st.blocks

    return context_parallel_comm(s.training.cp_comm, cp, link, kv_bytes=kv_bytes, q_bytes=q_bytes,
                                 attention_forward_ms=attention(st.gemms.forward, False),
                                 attention_backward_ms=attention(st.gemms.input_grad, True),
                                 a2a_size=s.training.cp_a2a_size)


def linear_gemm_ms(st: StageShape, priced: Callable[[tuple[Gemm, ...]], float], swiglu: bool
                   ) -> tuple[list[float], list[float]]:
    """One block's linear layers' GEMM milliseconds (QKV, attention output, MLP up, MLP down; SwiGLU's
    two up projections as one, as Megatron fuses them): in the forward, and in the backward (input
    and weight grads together; a recomputed forward's GEMMs, listed after the grads, hide nothing)."""
    raw = 5 if swiglu else 4  # the linear GEMMs of one pass as block_gemms lists them

    def per_layer(gemms: tuple[Gemm, ...]) -> list[float]:
        linear = [priced((g,)) / st.lead_blocks for g in gemms if g.linear][:raw]
        return [linear[0], linear[1], linear[2] + linear[3], linear[4]] if swiglu else linear

    forward = per_layer(st.gemms.forward)
    backward = [a + b for a, b in zip(per_layer(st.gemms.input_grad), per_layer(st.gemms.weight_grad), strict=True)]
    return forward, backward


def tied_embedding_allreduce_ms(s: Scenario, layout: Layout, link: Link | None) -> float:
    """The all-reduce of the tied embedding's gradient between the first and the last stage's
    copies (Megatron-LM runs it after the backward, right before the optimizer step), over the
    link between their ranks; nothing when the model does not tie them or one rank holds both."""
    model = s.model
    if model is None or not model.tie_embeddings or link is None:
        return 0.0
    return ring_allreduce_ms(model.vocab * model.hidden // s.tensor_parallel * layout.dtype_bytes, 2, link)
