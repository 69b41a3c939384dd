"""FLOPs, parameters and held activations of a GPT-style model's layers, per micro-batch.

Per transformer block and micro-batch (b sequences of s tokens, width h, MLP width f, a heads):
- forward FLOPs: QKV 6bsh^2 + scores and attention-times-V 4bs^2h + output projection 2bsh^2
  + MLP 4bshf  (= 24bsh^2 + 4bs^2h for f = 4h);
- input grad: the same matmuls again (8bsh^2 + 4bshf) plus both operands of the two attention
  matmuls (8bs^2h); weight grad: 8bsh^2 + 4bshf. Backward = input grad + weight grad = 2 x forward.
- the LM head (final norm, logits, loss) on the last stage: 2bshV forward, 2bshV each for input
  and weight grad; the embedding on the first stage: a lookup, no matmul FLOPs.
- activations held per micro-batch: :func:`ppsim.costs.memory.block_activation_bytes`;
- the elementwise work's HBM bytes: :mod:`ppsim.costs.elementwise`.
Grouped-query attention shrinks K and V to kv/a of Q; a SwiGLU MLP has three h x f matrices.
With tensor parallelism t every figure is per device of the group (Megatron: matmuls, heads and
the vocabulary split t ways).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import lru_cache, partial
from typing import Literal

from ppsim.costs.elementwise import Traffic, block_traffic, embedding_traffic, head_traffic
from ppsim.costs.gemms import (
    Gemm,
    PassGemms,
    attended_keys,
    block_gemms,
    head_gemms,
    weight_grad_input_values,
    weight_grad_output_values,
)
from ppsim.costs.low_precision import LowPrecision
from ppsim.costs.memory import Recompute, block_activation_bytes
from ppsim.costs.moe import ExpertShard, router_flops
from ppsim.costs.recompute import attention_mode, checkpointed_moe, combined, module_recompute, selective_modules
from ppsim.inputs.scenario import DTYPE_BYTES, ModelSpec

#: a whole transformer block, or one of its two halves as a hybrid model's layer
LayerParts = Literal["block", "attention", "mlp"]


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
    #: executed here but not the model's: the masked half of unfused causal attention (forward, input
    #: grad), and the busiest expert rank's routed work beyond the mean (ppsim.costs.moe)
    masked_flops: float = 0.0
    expert_params: int = 0  #: the part of params that are routed experts' (sharded over the expert replicas)
    alltoall_bytes: float = 0.0  #: one expert-parallel all-to-all's bytes (dispatch or combine): ppsim.costs.moe
    tp_collectives: float = 1.0  #: the share of a dense block's tensor-parallel collectives it runs
    #: HBM bytes once per step beside the optimizer's (FP8 training's weight casts: ppsim.costs.low_precision)
    step_bytes: float = 0.0
    #: weight bytes per parameter beyond the dtype's (FP8 training's copies: ppsim.costs.low_precision)
    extra_weight_bytes: float = 0.0
    #: HBM bytes of the elementwise (memory-bound) work: forward, and backward with what a
    #: recomputed forward runs again (:mod:`ppsim.costs.elementwise`)
    forward_bytes: float = 0.0
    backward_bytes: float = 0.0
    #: its matmuls with their shapes, pass by pass (:mod:`ppsim.costs.gemms`; FLOPs as above)
    gemms: PassGemms = PassGemms()
    #: what a split backward keeps from its input grad to its weight grad beyond ``activation_bytes``,
    #: per micro-batch, as torch's runtime splits it (the autograd graph kept: everything the forward
    #: saved stays): the gradients of the weight ops' outputs (the linears', the norms')
    weight_grad_pending_bytes: float = 0.0
    #: the same through a weight-gradient store (Megatron-Core, the zero-bubble authors, DeepSeek's
    #: DualPipe), which frees the forward's activations at the input grad: each weight op's input
    #: and output gradient
    weight_grad_store_bytes: float = 0.0
    #: kernels the host launches one by one in each pass (ppsim.costs.launches)
    forward_launches: float = 0.0
    backward_launches: float = 0.0

    @property
    def total_flops(self) -> float:
        return self.forward_flops + self.input_grad_flops + self.weight_grad_flops

    def shared(self) -> LayerCost:
        """The layer run again with weights another copy holds: its work and activations, no
        parameters (Megatron's repeated MTP layer)."""
        return replace(self, params=0, expert_params=0, step_bytes=0.0, extra_weight_bytes=0.0)


def joined(name: str, *layers: LayerCost) -> LayerCost:
    """``layers`` one after the other as one layer: every figure summed, their GEMMs in order."""
    values: dict[str, object] = {"name": name, "gemms": sum((x.gemms for x in layers), PassGemms())}
    for f in fields(LayerCost):
        if f.name not in values:
            values[f.name] = sum(getattr(x, f.name) for x in layers)
    return LayerCost(**values)  # type: ignore[arg-type]


def weight_grad_store_bytes(gemms: PassGemms, dtype_bytes: float, linear_bytes: float) -> float:
    """What a weight-gradient store keeps of a layer for its weight grads, per micro-batch: each
    weight GEMM's input and output gradient, a linear layer's at ``linear_bytes`` a value (FP8
    training's weight grads read both narrow), the others' (router, LM head) at the dtype's."""
    return (linear_bytes * (weight_grad_input_values(gemms, True) + weight_grad_output_values(gemms, True))
            + dtype_bytes * (weight_grad_input_values(gemms, False) + weight_grad_output_values(gemms, False)))


def layer_bytes(traffic: Traffic, casts: Traffic, recompute: str) -> tuple[float, float]:
    """A layer's HBM bytes of memory-bound work, forward and backward: its elementwise traffic with
    what a recomputed forward runs again, and its narrow casts (a fully recomputed forward casts its
    inputs again)."""
    backward = traffic.backward + traffic.recompute + casts.backward + (casts.forward if recompute == "full" else 0.0)
    return traffic.forward + casts.forward, backward


def mla_linears(model: ModelSpec, tensor_parallel: int) -> list[tuple[float, float]]:
    """(in, out) of multi-head latent attention's projections on one of ``tensor_parallel``
    devices: the queries' down projection (if it has a latent) and up to the heads, the keys' and
    values' down projection (with the shared RoPE key) and up to the heads, the output; the down
    projections whole on every device, the rest split by heads."""
    mla, h, a, t = model.mla, model.hidden, model.heads, tensor_parallel
    assert mla is not None
    queries = ([(h, mla.q_lora_rank), (mla.q_lora_rank, a * mla.qk_dim / t)] if mla.q_lora_rank
               else [(h, a * mla.qk_dim / t)])
    return queries + [(h, mla.kv_lora_rank + mla.qk_rope_head_dim),
                      (mla.kv_lora_rank, a * (mla.qk_nope_head_dim + mla.v_head_dim) / t),
                      (a * mla.v_head_dim / t, h)]


def gpt_layers(model: ModelSpec, micro_batch: int, recompute: Recompute = "none", tensor_parallel: int = 1, *,
               sequence_parallel: bool = False, flash_attention: bool = False, narrow: LowPrecision | None = None,
               context_parallel: int = 1, experts: ExpertShard | None = None,
               windowed: bool = False, recompute_modules: Sequence[str] | None = None,
               parts: LayerParts = "block") -> tuple[LayerCost, LayerCost, LayerCost]:
    """:func:`built_gpt_layers`, each set of arguments built once: a search lays out the same layers
    for every plan that differs only in its stages or schedule (the costs are immutable)."""
    return _gpt_layers_once(model, micro_batch, recompute, tensor_parallel, sequence_parallel, flash_attention,
                            narrow, context_parallel, experts, windowed,
                            None if recompute_modules is None else tuple(recompute_modules), parts)


@lru_cache(maxsize=512)
def _gpt_layers_once(model: ModelSpec, micro_batch: int, recompute: Recompute, tensor_parallel: int,
                     sequence_parallel: bool, flash_attention: bool, narrow: LowPrecision | None,
                     context_parallel: int, experts: ExpertShard | None, windowed: bool,
                     recompute_modules: tuple[str, ...] | None, parts: LayerParts) -> tuple[LayerCost, LayerCost, LayerCost]:
    return built_gpt_layers(model, micro_batch, recompute, tensor_parallel, sequence_parallel=sequence_parallel,
                            flash_attention=flash_attention, narrow=narrow, context_parallel=context_parallel,
                            experts=experts, windowed=windowed, recompute_modules=recompute_modules, parts=parts)


def built_gpt_layers(model: ModelSpec, micro_batch: int, recompute: Recompute = "none", tensor_parallel: int = 1, *,
                     sequence_parallel: bool = False, flash_attention: bool = False, narrow: LowPrecision | None = None,
                     context_parallel: int = 1, experts: ExpertShard | None = None,
                     windowed: bool = False, recompute_modules: Sequence[str] | None = None,
                     parts: LayerParts = "block") -> tuple[LayerCost, LayerCost, LayerCost]:
    """(embedding, one transformer block, LM head) for one micro-batch, per device of a tensor-
    parallel group of ``tensor_parallel`` (Megatron: the matmuls, the vocabulary and the heads are
    split t ways). With recompute, the block's input-grad pass also runs the recomputed forward
    (all of it, or the attention core); FlashAttention's backward recomputes the scores (QK^T).
    With ``narrow`` (FP8 or FP4) the block's linear layers add their casts, keep their inputs and
    their weights' copies narrow (:mod:`ppsim.costs.low_precision`); their GEMMs are marked ``linear``. With
    ``context_parallel`` cp each device holds s / cp of each sequence's tokens, whose queries
    attend to all s keys (Megatron's load-balanced causal split: every rank an equal share). With
    ``experts`` the block is a MoE layer as one device holds it (:mod:`ppsim.costs.moe`). With
    ``windowed`` its attention looks back through ``model.attention_window``: a FlashAttention kernel
    runs the window's band (:func:`~ppsim.costs.gemms.attended_keys`), the unfused path still computes
    every score and masks the rest. ``recompute_modules``: what selective recomputation recomputes
    (:mod:`ppsim.costs.recompute`; None: the attention core). ``parts``: the whole block, or only
    its attention or its MLP (with experts: the MoE) with its norm and residual, as a hybrid model's
    layers are (``model.pattern``'s ``*``, ``-`` and ``E``)."""
    b, h, a, V = micro_batch, model.hidden, model.heads, model.vocab
    f = experts.mlp_width() if experts else model.ffn
    s, keys = model.seq_len // context_parallel, model.seq_len  # a device's tokens; the keys they see
    t = tensor_parallel
    g = model.kv / a  # K and V projections are g x the size of Q's (grouped-query attention)
    q = model.q_width  # the queries' width: h unless the heads are narrower or wider (model.head_dim)
    mlp_mats = 3 if model.mlp == "swiglu" else 2
    wa, wm = int(parts != "mlp"), int(parts != "attention")  # the parts there are: 1, or 0 to leave one out
    # the MLP's GEMMs: a dense one's, t ways split, or a MoE layer's on the busiest device
    mlp_matmul = (experts.mlp_matmul_flops(b * s / t, h, model.mlp == "swiglu") if experts
                  else 2 * mlp_mats * b * s * h * f / t) * wm
    matmul = (4 + 4 * g) * b * s * h * q * wa / t + mlp_matmul
    # the scores and context matmuls over every key; the model is causal: a FlashAttention kernel
    # skips the tiles above the diagonal (half the work), the unfused path computes them all and masks
    whole = 4 * b * s * keys * q / t * wa
    latent = mla_linears(model, t) if model.mla and wa else None
    if model.mla and latent:  # the projections through the latents; heads of qk_dim and v_head_dim
        matmul = 2 * b * s * sum(i * o for i, o in latent) + mlp_matmul
        whole = 2 * b * s * keys * a * (model.mla.qk_dim + model.mla.v_head_dim) / t
    window = model.attention_window if windowed else None
    attended = attended_keys(keys, window) / keys  # the model's share of every key: a half, or the window's band
    attention = whole * attended if flash_attention else whole
    masked = 0.0 if flash_attention else 3 * whole * (1 - attended)  # of the forward's and the input grad's
    # what the backward runs again: the recomputed forward (all of it, or the attention core), and
    # under FlashAttention half the attention core (the scores) whatever the recompute mode
    modules = selective_modules(recompute, recompute_modules)
    core = attention_mode(recompute, modules)  # the attention core's mode: selective without core_attn is none
    if flash_attention:  # the scores' share of the core: a half, or qk / (qk + v) with MLA's heads
        scores = model.mla.qk_dim / (model.mla.qk_dim + model.mla.v_head_dim) if model.mla else 0.5
        recomputed = (matmul + attention if recompute == "full" else 0) + attention * scores
    else:
        recomputed = {"none": 0, "selective": attention, "full": matmul + attention}[core]
    if model.mlp == "swiglu":  # Llama-style block: no biases, two RMSNorms
        block_params = int((2 + 2 * g) * h * q * wa + 3 * h * f * wm) // t + h * wa + h * wm
        attention_params, norms = (2 + 2 * g) * h * q * wa, h * wa + h * wm
    else:  # GPT-style block: biases, two LayerNorms (and the MLP's output bias with them)
        biases = ((2 + 2 * g) * h + (1 + 2 * g) * (q - h)) * wa  # QKV's (1 + 2g) q and the output's h
        block_params = int((2 + 2 * g) * h * q * wa + 2 * h * f * wm + biases + f * wm) // t + 2 * h * wa + 3 * h * wm
        attention_params, norms = (2 + 2 * g) * h * q * wa + biases, 2 * h * wa + 3 * h * wm
    linear_params = int((2 + 2 * g) * h * q * wa + mlp_mats * h * f * wm) // t
    # one device's attention parameters, and those of its linear layers
    device_attention, device_linear = int(attention_params) // t, int((2 + 2 * g) * h * q * wa) // t
    if model.mla and latent:  # the latents' norms besides the projections
        device_linear = int(sum(i * o for i, o in latent))
        device_attention = device_linear + (model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank
        block_params = device_attention + int(mlp_mats * h * f / t) * wm + norms
        linear_params = device_linear + int(mlp_mats * h * f / t) * wm
    expert_params = 0
    tokens = experts.tokens(s, b, t) if experts else 0.0
    e = DTYPE_BYTES[model.dtype]
    router = permute = 0.0
    if experts:  # the MLP's parameters are the device's experts', the shared experts' and the router's
        moe_params, expert_params = experts.params(model, t)
        # the norms; a GPT-style MLP's output bias (counted with them) has no counterpart in the experts
        block_params = device_attention + norms - (h if model.mlp != "swiglu" else 0) + moe_params
        linear_params = device_linear + moe_params - h * experts.moe.experts
        router = router_flops(tokens, h, experts.moe.experts)
        permute = experts.permute_bytes(tokens, h, e)
        matmul += router
        recomputed += router if recompute == "full" else 0.0
        # the busiest rank's routed work beyond the mean, in each of the three passes
        masked += (3 * 2 * mlp_mats * tokens * experts.routed_width(h) * experts.moe.top_k * (experts.skew - 1)
                   * experts.moe.ffn_hidden)
    traffic = block_traffic(s, b, h, a, f, e, tensor_parallel=t,
                            sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                            dropout=model.dropout, swiglu=model.mlp == "swiglu", recompute=core, kv_len=keys,
                            attention=bool(wa), mlp=bool(wm))
    traffic = Traffic(traffic.forward + permute, traffic.backward + 2 * permute,
                      traffic.recompute + (permute if recompute == "full" else 0.0))
    casts, weight_casts, extra_weight = Traffic(0.0, 0.0), 0.0, 0.0
    if narrow is not None:  # QKV, attention output, MLP up (gate and up together), MLP down: (in, out) widths
        # a MoE layer's experts see each token k x skew times (t ways split), its shared experts once
        mlp_linears = (experts.cast_linears(h, f, mlp_mats, t) if experts
                       else [(h, (mlp_mats - 1) * f / t), (f / t, h)])
        linears = (latent or [(h, (1 + 2 * g) * q / t), (q / t, h)]) * wa + mlp_linears * wm
        casts = narrow.cast_traffic(linears, b * s, e)
        weight_casts = narrow.weight_cast_bytes(linear_params, e)
        extra_weight = linear_params * (narrow.weight_bytes_per_param(e) - e)
    # MLA keeps Q and K of a x qk_dim and V and the output of a x v_head_dim: the (2 + 2 kv/a) x width
    # values of multi-head attention (kv = a) at half their sum
    keeps = partial(block_activation_bytes, s, b, h, a, e, tensor_parallel=t, kv_heads=model.kv, ffn_hidden=f,
                    mlp=model.mlp,
                    attention_width=q if not model.mla else a * (model.mla.qk_dim + model.mla.v_head_dim) // 2,
                    sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                    dropout=model.dropout, linear_input_bytes=narrow.value_bytes if narrow else None,
                    kv_len=keys, with_attention=bool(wa), with_mlp=bool(wm))
    held = keeps(recompute=core)
    routed_held = int(experts.extra_activation_bytes(tokens, h, e)) if experts else 0
    # a split backward whose input grad ran the whole forward again keeps what that forward saved
    rerun_held = keeps(recompute="none") + routed_held - held if recompute == "full" else 0
    if recompute != "full":
        held += routed_held
    gemms = block_gemms(s, b, h, a, model.kv, f, swiglu=model.mlp == "swiglu", tensor_parallel=t, head_dim=model.head_width,
                        recompute=core, flash_attention=flash_attention, kv_len=keys, mlp=experts is None and bool(wm),
                        attention_linears=latent, window=window, attention=bool(wa),
                        score_dims=(model.mla.qk_dim, model.mla.v_head_dim) if model.mla else None)
    if experts:
        gemms += experts.gemms(tokens, h, t, model.mlp == "swiglu", recomputed=recompute == "full")
    if modules - {"core_attn"}:  # the other modules selective recomputation recomputes
        mla = model.mla
        # moe checkpoints the whole MoE layer: a checkpoint listed inside it saves nothing more, and
        # its backward reruns that part once more (the outer rerun's inner checkpoint)
        nested = frozenset({"moe_act", "shared_experts"}) & modules if "moe" in modules and experts else frozenset()
        recomputing = partial(
            module_recompute, norms=wa + wm, tokens=b * s, hidden=h, tensor_parallel=t,
            sequence_parallel=sequence_parallel, dtype_bytes=e,
            linear_input_bytes=narrow.value_bytes if narrow else e, swiglu=model.mlp == "swiglu",
            routed_width=experts.moe.top_k * experts.skew * experts.moe.ffn_hidden if experts else 0.0,
            mla_up=[(i, o) for i, o in latent or [] if mla and i in (mla.q_lora_rank, mla.kv_lora_rank)],
            mla_kept=a * (2 * mla.qk_dim + mla.v_head_dim) / t if mla else 0.0,
            mlp_width=f * wm if not experts else 0.0,
            shared_width=experts.moe.shared_experts * experts.moe.shared_ffn if experts else 0.0)
        extra = recomputing(modules - nested)
        if "moe" in modules and experts:  # the MoE layer checkpointed whole: its MLP half's input kept
            mlp_half = keeps(recompute=core) - keeps(recompute=core, with_mlp=False) + routed_held
            whole = b * s * h / (t if sequence_parallel else 1)
            activation = (3 if model.mlp == "swiglu" else 2) * b * s * f / t * e
            extra = combined(extra, checkpointed_moe(
                mlp_half, (5 if model.dropout else 4) * whole * e / 2,
                experts.gemms(tokens, h, t, model.mlp == "swiglu", recomputed=False).forward, permute + activation))
            masked += (2 * mlp_mats * tokens * experts.routed_width(h) * experts.moe.top_k * (experts.skew - 1)
                       * experts.moe.ffn_hidden)
            if nested:
                extra = combined(extra, replace(recomputing(nested), saved_bytes=0.0))
        kept = max(0, held - int(extra.saved_bytes))
        rerun_held += held - kept  # the input grad runs the modules again: what they save waits for W
        held = kept
        recomputed += extra.flops
        traffic = Traffic(traffic.forward, traffic.backward, traffic.recompute + extra.traffic_bytes)
        gemms += PassGemms(input_grad=extra.gemms)
    hbm = layer_bytes(traffic, casts, recompute)
    # the norms' output gradients besides the linears': a token's h each (split under sequence parallelism)
    norm_grads = (wa + wm) * b * s * h / (t if sequence_parallel else 1)
    block = LayerCost(
        name="block",
        forward_flops=matmul + attention,
        input_grad_flops=matmul + 2 * attention + recomputed,
        weight_grad_flops=matmul,
        params=block_params,
        activation_bytes=held,
        recompute_flops=recomputed,
        masked_flops=masked,
        forward_bytes=hbm[0],
        backward_bytes=hbm[1],
        step_bytes=weight_casts,
        extra_weight_bytes=extra_weight,
        gemms=gemms,
        expert_params=expert_params,
        alltoall_bytes=experts.dispatch_bytes(tokens, h, e) if experts else 0.0,
        tp_collectives=0.5 * wa + (0.5 if experts.moe.shared_experts else 0.0) if experts else 0.5 * wa + 0.5 * wm,
        weight_grad_pending_bytes=e * (weight_grad_output_values(gemms) + norm_grads) + rerun_held,
        weight_grad_store_bytes=weight_grad_store_bytes(gemms, e, narrow.value_bytes if narrow else e) + e * norm_grads,
    )
    embedding = LayerCost(
        name="embedding",
        forward_flops=0.0,
        input_grad_flops=0.0,
        weight_grad_flops=0.0,
        params=V * h // t + (keys * h if model.positions == "learned" else 0),  # a table of every position
        # its output is the first block's input, which the block holds; the embedding keeps its
        # dropout mask (1 byte per element, split t ways under sequence parallelism) and the token
        # ids (int64), as Megatron-LM's theoretical_memory_usage counts them
        activation_bytes=(s * b * h // (t if sequence_parallel else 1) if model.dropout else 0) + 8 * s * b,
        forward_bytes=(lookup := embedding_traffic(s, b, h, DTYPE_BYTES[model.dtype])).forward,
        backward_bytes=lookup.backward,
    )
    logits = 2 * b * s * h * V / t
    lm_gemms = head_gemms(s, b, h, V, t)
    final_norm = e * b * s * h / (t if sequence_parallel else 1)  # the final norm's output gradient
    head = LayerCost(
        name="lm_head",
        forward_flops=logits,
        input_grad_flops=logits,
        weight_grad_flops=logits,
        params=V * h // t + 2 * h,
        activation_bytes=4 * s * b * V // t,
        forward_bytes=(loss := head_traffic(s, b, V, t)).forward,
        backward_bytes=loss.backward,
        gemms=lm_gemms,
        weight_grad_pending_bytes=e * weight_grad_output_values(lm_gemms) + final_norm,  # and the logits'
        weight_grad_store_bytes=weight_grad_store_bytes(lm_gemms, e, e) + final_norm,
    )
    return embedding, block, head


def mtp_module(model: ModelSpec, micro_batch: int, head: LayerCost, tensor_parallel: int = 1, *,
               context_parallel: int = 1, embedding_copy: bool = False) -> LayerCost:
    """What one multi-token prediction module (DeepSeek-V3, Megatron's ``--mtp-num-layers``) adds
    besides its transformer block, per micro-batch and device: the normalised hidden state and the
    next token's embedding, concatenated and projected from 2h to h (a GEMM, two RMSNorms), then
    another pass of the shared LM head and its loss (``head``'s FLOPs, activations and traffic; no
    parameters of its own). With ``embedding_copy`` the stage also holds the word embeddings the
    module reads (Megatron keeps a copy on the last stage when the first is elsewhere)."""
    b, h, t = micro_batch, model.hidden, tensor_parallel
    s = model.seq_len // context_parallel
    e = DTYPE_BYTES[model.dtype]
    projection = 2 * b * s * (2 * h) * h / t
    tokens = b * s
    projecting = PassGemms((Gemm(tokens, 2 * h, h / t, linear=True),), (Gemm(tokens, h / t, 2 * h, linear=True),),
                           (Gemm(2 * h, tokens, h / t, linear=True),))
    norms = 2 * tokens * h  # the two RMSNorms' output gradients
    return LayerCost(
        name="mtp",
        forward_flops=head.forward_flops + projection,
        input_grad_flops=head.input_grad_flops + projection,
        weight_grad_flops=head.weight_grad_flops + projection,
        params=2 * h * h // t + 2 * h + (model.vocab * h // t if embedding_copy else 0),
        activation_bytes=head.activation_bytes + 2 * tokens * h * e,  # the concatenated input of the projection
        tp_collectives=0.0,
        forward_bytes=head.forward_bytes,
        backward_bytes=head.backward_bytes,
        gemms=head.gemms + projecting,
        # the head pass's, the projection's and the two norms'
        weight_grad_pending_bytes=head.weight_grad_pending_bytes + e * (weight_grad_output_values(projecting) + norms),
        weight_grad_store_bytes=head.weight_grad_store_bytes + weight_grad_store_bytes(projecting, e, e) + e * norms,
    )
