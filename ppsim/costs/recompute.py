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

Not priced (refused by the scenario's schema): ``mlp``, ``moe``, ``shared_experts``.
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
                     mla_kept: float = 0.0) -> ModuleRecompute:
    """The layernorm, moe_act and mla_up_proj modules of ``modules`` for a block of ``tokens``
    tokens on one device (see the module docstring), of ``norms`` norms (a hybrid layer has one):
    ``routed_width`` the routed experts' k x skew x
    f_e (0 without experts), ``mla_up`` the (in, out) of the up projections per device, ``mla_kept``
    the values per token of the queries, keys and values they make (a x qk + a x qk + a x v, / t)."""
    t = tensor_parallel
    whole = tokens * hidden / (t if sequence_parallel else 1)  # a norm's output on this device
    out = ModuleRecompute()
    if "layernorm" in modules:
        out = _add(out, ModuleRecompute(saved_bytes=norms * whole * linear_input_bytes,
                                        traffic_bytes=norms * 2 * whole * dtype_bytes))
    if "moe_act" in modules and routed_width:
        values = tokens * routed_width / t
        out = _add(out, ModuleRecompute(saved_bytes=values * linear_input_bytes,
                                        traffic_bytes=(3 if swiglu else 2) * values * dtype_bytes))
    if "mla_up_proj" in modules and mla_up:
        gemms = tuple(Gemm(tokens, i, o, linear=True) for i, o in mla_up)
        out = _add(out, ModuleRecompute(saved_bytes=tokens * mla_kept * dtype_bytes,
                                        flops=sum(g.flops for g in gemms), gemms=gemms))
    return out


def _add(a: ModuleRecompute, b: ModuleRecompute) -> ModuleRecompute:
    return ModuleRecompute(a.saved_bytes + b.saved_bytes, a.flops + b.flops, a.traffic_bytes + b.traffic_bytes,
                           a.gemms + b.gemms)
