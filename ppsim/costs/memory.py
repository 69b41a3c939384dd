"""Device memory of a stage: model states (weights, gradients, optimizer), buffers and activations.

Model states per parameter, mixed-precision Adam (16-bit dtypes): 2 bytes of weights, 2 of
gradients and 12 of optimizer state (fp32 master weights, momentum, variance); in fp32: 4 + 4 + 8
(momentum, variance). ZeRO stage 1 shards the optimizer state over the d data-parallel replicas.

Activations kept per transformer block and micro-batch, from Korthikanti et al. (2022), in 16-bit
values (scaled by dtype bytes / 2), for s tokens, b sequences, width h and a heads:

- ``none``:      sbh(34 + 5as/h)  — everything the backward needs;
- ``selective``: 34 sbh           — the attention core (QK^T, softmax, dropout, AV) is recomputed;
- ``full``:      2 sbh            — only the block's input; the backward runs the forward again.

With tensor parallelism over t devices (no sequence parallelism) each device keeps
sbh(10 + 24/t + 5as/(ht)), sbh(10 + 24/t) and 2 sbh; with sequence parallelism the 10 sbh of layer
norms and dropouts are split too: sbh(34/t + 5as/(ht)), 34 sbh / t and 2 sbh / t.

The 24 sbh split by tensor parallelism are the attention's Q, K, V and output-projection inputs
(8 sbh) and the MLP's intermediate values (16 sbh = 4 sbf for f = 4h). The same accounting covers
grouped-query attention (K and V are kv/a of Q's size: (4 + 4 kv/a) sbh) and SwiGLU MLPs (gate, up
and their product: 6 sbf). FlashAttention keeps no s x s scores: the 5as/h term goes (its backward
recomputes them, as selective recomputation does). Without it, grouped-query attention's unfused
matmuls keep K and V expanded to every query head (Megatron's core attention repeats them), 4(1 -
kv/a) sbh more; measured by ppexec's blocks (docs/calibration.md). A model without dropout keeps neither the two
1-byte masks of the block (2 sbh of the 10) nor the attention's dropout mask and output (3as/h of
the 5as/h).

A split backward (zero-bubble schedules' ``I`` then ``W``) keeps, from a micro-batch's input grad
to its weight grad, the gradient of every weight op's output besides these (torch's split keeps
all the forward saved too): ``LayerCost.weight_grad_pending_bytes``, counted by :mod:`ppsim.plan.held`.

Communication buffers: a receive and a send buffer of one stage-to-stage message for each
neighbouring stage, and the working set of context parallelism's K/V exchange
(:func:`ppsim.costs.context_parallel.exchange_buffer_bytes`).

A forward-only plan (schedule ``inference``) holds the weights and the buffers, and a micro-batch's
activations only while its forward runs (:meth:`StaticMemory.forward_only`, ``ppsim.plan.held``):
one micro-batch of the stage's activations at most, an upper bound of the forward's working set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ppsim.errors import ScenarioError

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


def block_activation_bytes(seq_len: int, micro_batch: int, hidden: int, heads: int, dtype_bytes: int,
                           recompute: Recompute = "none", tensor_parallel: int = 1, *,
                           kv_heads: int | None = None, ffn_hidden: float | None = None, mlp: str = "gelu",
                           sequence_parallel: bool = False, flash_attention: bool = False,
                           dropout: bool = True, linear_input_bytes: float | None = None,
                           kv_len: int | None = None, attention_width: int | None = None,
                           with_attention: bool = True, with_mlp: bool = True) -> int:
    """Bytes one transformer block keeps per micro-batch between its forward and its backward, on
    each of ``tensor_parallel`` devices (Megatron's tensor parallelism: the layer norms' and
    dropouts' 10 sbh stay whole unless ``sequence_parallel`` splits them too). With
    ``linear_input_bytes`` (FP8 training) the inputs of the four linear layers are kept at that many
    bytes per value instead of the dtype's: QKV's and the MLP up projection's (2 sbh of the whole
    part), the attention output's and the down projection's (sbh and sbf of the split part).
    ``kv_len``: the keys each query sees when it is not ``seq_len`` (context parallelism: s / cp
    queries per rank, s keys), for the scores' term; ``attention_width``: the queries' width when it
    is not ``hidden`` (heads x head_dim), for Q, K, V and the attention's output. Without
    ``with_attention`` or ``with_mlp``: the other half alone, with its norm, as a hybrid model's layer."""
    if recompute not in RECOMPUTE_MODES:
        raise ScenarioError(f"unknown recompute mode {recompute!r}; use one of {', '.join(RECOMPUTE_MODES)}",
                            field="training.recompute")
    sbh = seq_len * micro_batch * hidden
    scale = dtype_bytes / 2
    t = tensor_parallel
    whole_t = t if sequence_parallel else 1
    if recompute == "full":
        return int(2 * sbh / whole_t * scale)
    kv = heads if kv_heads is None else kv_heads
    ffn = 4 * hidden if ffn_hidden is None else ffn_hidden
    mlp_values = 6 if mlp == "swiglu" else 4  # 16-bit values of width f kept by the MLP
    sbq = seq_len * micro_batch * (attention_width or hidden)
    wa, wm = int(with_attention), int(with_mlp)
    split = (4 + 4 * kv / heads) * sbq * wa + mlp_values * seq_len * micro_batch * ffn * wm
    kept = (5 if dropout else 4) * (wa + wm) * sbh / whole_t + split / t  # each half: its norm's input and output
    if recompute == "none" and not flash_attention and with_attention:
        kept += (5 if dropout else 2) * heads * (kv_len or seq_len) * sbh / (hidden * t)
        # the unfused matmuls take K and V expanded to every query head (grouped-query attention)
        kept += 4 * (1 - kv / heads) * sbq / t
    saved = 0.0
    if linear_input_bytes is not None:  # values of the linear layers' inputs, each kept in fewer bytes
        values = (wa + wm) * sbh / whole_t + (sbh * wa + seq_len * micro_batch * ffn * wm) / t
        saved = values * (dtype_bytes - linear_input_bytes)
    return int(kept * scale - saved)


def model_state_bytes_per_param(dtype_bytes: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) bytes per parameter with (mixed-precision) Adam."""
    if dtype_bytes >= 4:
        return 4, 4, 8
    return dtype_bytes, dtype_bytes, 12


@dataclass(frozen=True)
class StaticMemory:
    """What a stage holds for the whole step, in bytes."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.buffers

    def forward_only(self) -> StaticMemory:
        """What the stage holds when it only runs forwards (inference): weights and message buffers;
        no gradients, no optimizer state."""
        return replace(self, gradients=0, optimizer=0)


def static_memory(params: int, dtype_bytes: int, *, zero_stage: int = 0, data_parallel: int = 1,
                  message_bytes: int = 0, neighbours: int = 0, extra_weight_bytes: int = 0,
                  expert_params: int = 0, expert_replicas: int = 1, workspace_bytes: int = 0,
                  layers: tuple[tuple[int, int], ...] = ()) -> StaticMemory:
    """Model states of ``params`` parameters, sharded over ``data_parallel`` replicas as ZeRO's
    stage says (1: the optimizer state, 2: also the gradients, 3: also the weights), the
    ``expert_params`` among them over their ``expert_replicas`` (:mod:`ppsim.costs.moe`), plus send
    and receive buffers for each of ``neighbours`` neighbouring stages; ``extra_weight_bytes`` (FP8
    training's weight copies) count with the weights, unsharded; ``workspace_bytes`` (a working set
    every block allocates again, such as context parallelism's exchange buffers) with the buffers.
    Under ZeRO-3 the narrow copies are cast from each gathered layer and dropped with it: what is
    held instead is :func:`gathered_bytes` of the largest of the stage's ``layers`` (each one's
    parameters and its narrow copies' bytes), with the buffers."""
    w, g, o = model_state_bytes_per_param(dtype_bytes)
    dense = params - expert_params

    def sharded(per_param: int, stage: int) -> int:
        if zero_stage < stage:
            return params * per_param
        return -(-dense * per_param // data_parallel) + -(-expert_params * per_param // expert_replicas)

    held, working = (extra_weight_bytes, 0) if zero_stage < 3 else (
        0, max((gathered_bytes(p, x, dtype_bytes) for p, x in layers), default=0))
    return StaticMemory(weights=sharded(w, 3) + held, gradients=sharded(g, 2), optimizer=sharded(o, 1),
                        buffers=2 * message_bytes * neighbours + workspace_bytes + working)


def gathered_bytes(layer_params: int, narrow_bytes: int, dtype_bytes: int) -> int:
    """What ZeRO-3 / FSDP holds unsharded beside the shards while a stage runs: the gathered
    weights of the layer computing and of the one prefetched, each with the narrow copies cast from
    it (``narrow_bytes``), and one layer's whole gradients before their reduce-scatter."""
    w, g, _ = model_state_bytes_per_param(dtype_bytes)
    return 2 * (layer_params * w + narrow_bytes) + layer_params * g
