"""What selective recomputation recomputes (``training.recompute_modules``, Megatron's
``--recompute-modules``), per transformer block and micro-batch on one device: the activations each
module no longer holds between the forward and the backward, and what the backward runs again.

- ``core_attn`` (Megatron's default): the attention core, as ``recompute: selective`` always meant:
  the s x s scores (and their softmax and dropout) are not kept, the scores and context matmuls run
  again (:mod:`ppsim.costs.layers`, :mod:`ppsim.costs.memory`).
- ``layernorm``: the two norms' outputs (the QKV projection's and the MLP's inputs, kept in the
  linear layers' input format: narrow under FP8) are not kept; both norms run again (HBM work:
  each reads its input and writes its output).
- ``moe_act``: the routed experts' activation output (the down projections' input, k x skew x f_e
  wide per token) is not kept; the activation runs again (SwiGLU reads the gate and up outputs and
  writes one; GELU reads one and writes one).
- ``mla_up_proj``: multi-head latent attention's queries, keys and values (a x qk and a x v wide per
  token) are not kept; the up projections from the latents run again (GEMMs).
- ``mlp`` (a dense block's MLP) and ``shared_experts`` (a MoE layer's shared experts): checkpointed
  whole, as Megatron does (its input kept, in the dtype: under FP8 the up projection no longer keeps
  its narrow copy), so nothing of width f inside is held (the up projections' outputs, the
  activation's, the down projection's input); the backward runs their forward again (GEMMs, and the
  activation as HBM work).

- ``moe``: a MoE layer checkpointed whole (Megatron wraps its router, dispatch, experts and combine
  in one checkpoint): of what its MLP half held (the dense-MLP equivalent of width k x skew x f_e
  plus the shared experts, the permuted copies and the router's probabilities) only its input, the
  pre-MLP norm's output, stays (in the dtype); the backward runs the router's, the experts' and the
  shared experts' GEMMs, the permutation and the activation again, and the dispatch and combine
  all-to-alls once more (:func:`~ppsim.costs.analytic.expert_alltoalls`). It contains ``moe_act``
  and ``shared_experts`` (the scenario refuses them beside it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppsim.costs.gemms import Gemm
from ppsim.inputs.choices import Recompute

#: what ``recompute: selective`` recomputes when the scenario does not list its modules
DEFAULT_MODULES = ("core_attn",)


@dataclass(frozen=True)
class ModuleRecompute:
    """One block's selective recomputation beyond the attention core: activations not held (bytes),
    the forward FLOPs and HBM bytes its backward runs again, and those FLOPs as GEMMs."""

    saved_bytes: float = 0.0
    flops: float = 0.0
    traffic_bytes: float = 0.0
    gemms: tuple[Gemm, ...] = ()


def selective_modules(recompute: str, modules: Sequence[str] | None) -> frozenset[str]:
    """The modules selective recomputation recomputes (none in another mode)."""
    if recompute != "selective":
        return frozenset()
    return frozenset(modules or DEFAULT_MODULES)


def attention_mode(recompute: Recompute, modules: frozenset[str]) -> Recompute:
    """How the attention core is recomputed: the scenario's mode, but ``none`` when selective
    recomputation leaves ``core_attn`` out."""
    if recompute == "selective" and "core_attn" not in modules:
        return "none"
    return recompute


def module_recompute(modules: frozenset[str], *, norms: int = 2, tokens: float, hidden: int, tensor_parallel: int,
                     sequence_parallel: bool, dtype_bytes: float, linear_input_bytes: float, swiglu: bool,
                     routed_width: float = 0.0, mla_up: Sequence[tuple[float, float]] = (),
                     mla_kept: float = 0.0, mlp_width: float = 0.0, shared_width: float = 0.0) -> ModuleRecompute:
    """The layernorm, moe_act, mla_up_proj, mlp and shared_experts modules of ``modules`` for a block
    of ``tokens`` tokens on one device (see the module docstring), of ``norms`` norms (a hybrid layer
    has one): ``routed_width`` the routed experts' k x skew x f_e (0 without experts), ``mla_up`` the
    (in, out) of the up projections per device, ``mla_kept`` the values per token of the queries,
    keys and values they make (a x qk + a x qk + a x v, / t); ``mlp_width`` a dense MLP's f (0 for a
    MoE layer or none), ``shared_width`` the shared experts' n_s x f_s (0 without)."""
    t = tensor_parallel
    whole = tokens * hidden / (t if sequence_parallel else 1)  # a norm's output on this device
    out = ModuleRecompute()
    if "layernorm" in modules:
        out = combined(out, ModuleRecompute(saved_bytes=norms * whole * linear_input_bytes,
                                        traffic_bytes=norms * 2 * whole * dtype_bytes))
    if "moe_act" in modules and routed_width:
        values = tokens * routed_width / t
        out = combined(out, ModuleRecompute(saved_bytes=values * linear_input_bytes,
                                        traffic_bytes=(3 if swiglu else 2) * values * dtype_bytes))
    if "mla_up_proj" in modules and mla_up:
        gemms = tuple(Gemm(tokens, i, o, linear=True) for i, o in mla_up)
        out = combined(out, ModuleRecompute(saved_bytes=tokens * mla_kept * dtype_bytes,
                                        flops=sum(g.flops for g in gemms), gemms=gemms))
    for module, width in (("mlp", mlp_width), ("shared_experts", shared_width)):
        if module in modules and width:
            # its input is the pre-MLP norm's output: not held at all when layernorm discards it
            kept = 0.0 if "layernorm" in modules else whole
            out = combined(out, _checkpointed_mlp(tokens, hidden, width, t, kept, dtype_bytes, linear_input_bytes, swiglu))
    return out


def checkpointed_moe(held: float, input_kept: float, forward: tuple[Gemm, ...], traffic_bytes: float) -> ModuleRecompute:
    """A MoE layer checkpointed whole (``moe``, see the module docstring): of the ``held`` bytes of
    its MLP half only ``input_kept`` stay; its ``forward`` GEMMs and ``traffic_bytes`` of HBM work
    run again in the backward."""
    return ModuleRecompute(saved_bytes=max(0.0, held - input_kept), flops=sum(g.flops for g in forward),
                           traffic_bytes=traffic_bytes, gemms=forward)


def _checkpointed_mlp(tokens: float, hidden: int, width: float, t: int, whole: float, dtype_bytes: float,
                      linear_input_bytes: float, swiglu: bool) -> ModuleRecompute:
    """An MLP of ``width`` checkpointed whole on one of ``t`` devices (its input, ``whole`` values
    on this device, kept in the dtype): the values of width f it held (the up projections' outputs
    and the activation's, the last being the down projection's input, kept in the linear layers'
    input format) are not held; its GEMMs and activation run again."""
    inner = tokens * width / t
    up = 2 if swiglu else 1
    held = up * inner * dtype_bytes + inner * linear_input_bytes  # the up outputs, the down projection's input
    gemms = tuple(Gemm(tokens, i, o, linear=True) for i, o in [(hidden, width / t)] * up + [(width / t, hidden)])
    return ModuleRecompute(saved_bytes=held - whole * (dtype_bytes - linear_input_bytes),
                           flops=sum(g.flops for g in gemms),
                           traffic_bytes=(3 if swiglu else 2) * inner * dtype_bytes, gemms=gemms)


def combined(a: ModuleRecompute, b: ModuleRecompute) -> ModuleRecompute:
    """Two modules' recomputation together."""
    return ModuleRecompute(a.saved_bytes + b.saved_bytes, a.flops + b.flops, a.traffic_bytes + b.traffic_bytes,
                           a.gemms + b.gemms)
