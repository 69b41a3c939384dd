"""A Mamba-2 mixer layer of a hybrid model (``model.pattern``'s ``M``, ``model.mamba``), per
micro-batch and device, as Megatron-Core's MambaMixer runs it: the heads (and the B / C groups)
split over the t tensor-parallel devices, like an MLP's columns.

Per layer and micro-batch (T = b s tokens, width h, H heads of P, d_inner = H P, G groups, state N,
convolution width K, scan chunks of Q):

- in_proj, h to 2 d_inner + 2 G N + H (z, x, B, C, dt), and out_proj, d_inner to h: linear layers,
  as GEMMs (narrow under FP8), their weight grads besides;
- the causal depthwise convolution over x, B, C (d_inner + 2 G N channels, K taps) and its SiLU,
  the gated RMSNorm over d_inner, the layer's norm and residual add: memory-bound work (HBM bytes);
- the SSD scan, chunked (the Mamba-2 paper's algorithm): per chunk C B^T within it (2 Q^2 N per
  group), its scores times x (2 Q^2 P per head), the chunk's state B^T x (2 Q N P per head) and the
  states' output C h (2 Q N P per head): 2 T (Q G N + Q H P + 2 H N P) FLOPs forward, as batched
  GEMMs; its backward twice that (no weight of its own but A, D and dt's bias);
- the SSD scan's own HBM traffic (its kernels are memory-bound, far from a GEMM's speed): the
  chunk states (T / Q chunks of H P N values: fp32 where made, the state dtype where passed on) and
  the per-chunk C B^T (T G Q values, fp32) written and read again, x, B, C and the output read or
  written by each kernel that takes them (:func:`scan_traffic`);
- held for the backward (none recomputed): the layer's input and its norm's output, in_proj's
  output, the convolution's output, the scan's output and the gated norm's (out_proj's input), and
  dt and its cumulative sum in fp32 (what mamba_chunk_scan_combined keeps); with full recomputation
  only the input;
- parameters: in_proj, out_proj, the convolution's weights and biases, A, D, dt's bias, the gated
  norm's weight, the layer norm's.

Tensor parallelism's collectives: those of an MLP (half a dense block's). The scan's GEMMs are
batched (one kernel runs a pass's chunks and heads), so a measured curve prices each batch by its
FLOPs, not each chunk's tiny GEMM at one call's fixed cost; the bytes its kernels move are priced
as memory-bound work besides. Not modelled: how far the scan's Triton kernels fall short of the
device's copy rate (no measurement of them), context parallelism of the scan.
"""

from __future__ import annotations

from ppsim.costs.elementwise import Traffic
from ppsim.costs.gemms import Gemm, PassGemms, weight_grad_output_values
from ppsim.costs.layers import LayerCost, layer_bytes, weight_grad_store_bytes
from ppsim.costs.low_precision import LowPrecision
from ppsim.inputs.scenario import DTYPE_BYTES, ModelSpec


def mamba_layer(model: ModelSpec, micro_batch: int, recompute: str = "none", tensor_parallel: int = 1, *,
                sequence_parallel: bool = False, narrow: LowPrecision | None = None) -> LayerCost:
    """One Mamba-2 layer for one micro-batch on one of ``tensor_parallel`` devices (module docstring)."""
    mb = model.mamba
    assert mb is not None  # the model has Mamba layers
    t, h, e = tensor_parallel, model.hidden, DTYPE_BYTES[model.dtype]
    tokens = micro_batch * model.seq_len
    heads, groups, inner = mb.heads / t, mb.groups / t, mb.inner / t
    state, q, p = mb.state, mb.chunk, mb.head_dim
    in_out = 2 * inner + 2 * groups * state + heads  # z, x, B, C, dt
    channels = inner + 2 * groups * state  # what the convolution runs over
    linears = [(h, in_out), (inner, h)]
    dense = tuple(Gemm(tokens, i, o, linear=True) for i, o in linears)
    chunks = tokens / q
    # one kernel each, batched over the chunks and heads (the chunked scan's Triton kernels)
    scan = (Gemm(q, state, q, chunks * groups, batched=True),  # C B^T
            Gemm(q, q, p, chunks * heads, batched=True),  # its scores times x
            Gemm(state, q, p, chunks * heads, batched=True),  # a chunk's state
            Gemm(q, state, p, chunks * heads, batched=True))  # the states' output
    projections = sum(g.flops for g in dense)
    ssd = sum(g.flops for g in scan)
    recomputed = projections + ssd if recompute == "full" else 0.0
    whole = tokens * h / (t if sequence_parallel else 1)  # the layer's input, on this device
    linear_bytes = narrow.value_bytes if narrow else e
    if recompute == "full":
        held = whole * e  # the layer's input
    else:
        held = (whole * e + whole * linear_bytes  # the input, the norm's output (in_proj's input)
                + tokens * (in_out + channels + inner) * e + tokens * inner * linear_bytes  # ..., out_proj's input
                + 2 * 4 * tokens * heads)  # dt and its cumulative sum, fp32
    # the norm (read, write), the convolution and its SiLU (read, write each), the gated norm (read
    # the scan's output and z, write), the residual add (read two, write one)
    forward = (2 * whole + 4 * tokens * channels + 3 * tokens * inner + 3 * whole) * e
    scan_bytes = scan_traffic(tokens, heads, groups, p, state, q, e)
    traffic = Traffic(forward + scan_bytes.forward, 2 * forward + scan_bytes.backward,
                      forward + scan_bytes.forward if recompute == "full" else 0.0)
    casts, weight_casts, extra_weight = Traffic(0.0, 0.0), 0.0, 0.0
    params = int(h * in_out + inner * h + channels * (mb.conv_kernel + 1) + 3 * heads + inner) + h
    linear_params = int(h * in_out + inner * h)
    if narrow is not None:
        casts = narrow.cast_traffic(linears, tokens, e)
        weight_casts = narrow.weight_cast_bytes(linear_params, e)
        extra_weight = linear_params * (narrow.weight_bytes_per_param(e) - e)
    gemms = PassGemms(forward=dense + scan,
                      input_grad=tuple(Gemm(tokens, o, i, linear=True) for i, o in linears)
                      + tuple(g.times(2) for g in scan) + ((dense + scan) if recompute == "full" else ()),
                      weight_grad=tuple(Gemm(i, tokens, o, linear=True) for i, o in linears))
    hbm = layer_bytes(traffic, casts, recompute)
    # the output gradients of the convolution, the gated norm and the layer norm (their weights' too)
    others = e * (tokens * (channels + inner) + whole)
    return LayerCost(
        name="mamba",
        forward_flops=projections + ssd,
        input_grad_flops=projections + 2 * ssd + recomputed,
        weight_grad_flops=projections,
        params=params,
        activation_bytes=int(held),
        recompute_flops=recomputed,
        forward_bytes=hbm[0],
        backward_bytes=hbm[1],
        step_bytes=weight_casts,
        extra_weight_bytes=extra_weight,
        gemms=gemms,
        tp_collectives=0.5,
        weight_grad_pending_bytes=e * weight_grad_output_values(gemms) + others,  # and the projections'
        weight_grad_store_bytes=weight_grad_store_bytes(gemms, e, linear_bytes) + others,
    )


def scan_traffic(tokens: float, heads: float, groups: float, head_dim: int, state: int, chunk: int,
                 dtype_bytes: int) -> Traffic:
    """HBM bytes of the SSD scan's kernels for ``tokens`` tokens of ``heads`` heads and ``groups``
    groups on one device, as mamba_ssm's Triton kernels run it (``mamba_chunk_scan_combined``,
    which Megatron's memory-efficient path calls; states passed on in the parameters' dtype, its
    default ``mamba_training_ssm_states_dtype``). With S = T / Q x H x P x N state values, X = T H P,
    V = T G N (each of B and C) and W = T G Q (C B^T per chunk):

    - forward: the chunk states written in fp32 (4 S), read and passed on in the state dtype
      (4 S + e S) and read by the output's kernel (e S); x read twice and the output written
      (3 e X); B and C read twice each (4 e V); C B^T written and read in fp32 (8 W);
    - backward: the states made again (4 S written, 4 S read, 4 S written: passed on in fp32),
      their grads written (4 S), both read by the backward state passing (8 S) and written in the
      state dtype (2 e S), then read by the kernels of dx, dB and dC (3 e S); x, the output's grad
      and dx 11 e X; B, C and their grads 15 e V; C B^T made again, read by dx's and dA's kernels,
      its grad written and read by both of B's and C's (24 W)."""
    e = dtype_bytes
    states = tokens / chunk * heads * head_dim * state
    x, bc, cb = tokens * heads * head_dim, tokens * groups * state, tokens * groups * chunk
    forward = (8 + 2 * e) * states + 3 * e * x + 4 * e * bc + 8 * cb
    backward = (24 + 5 * e) * states + 11 * e * x + 15 * e * bc + 24 * cb
    return Traffic(forward, backward)
