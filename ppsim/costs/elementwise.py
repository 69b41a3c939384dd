"""The memory-bound work of a layer: bytes its elementwise kernels move through HBM per micro-batch.

A matmul's time is its FLOPs; a layer norm, an activation function, a softmax, a dropout or a
residual add does almost no arithmetic and takes the time to read and write its tensors. Per
transformer block and micro-batch (s x b tokens, width h, MLP width f, a heads; E = sbh elements,
e bytes per element), as Megatron-LM's kernels run them (bias-GeLU and bias-dropout-add fused,
scale-mask-softmax fused), per device of a t-way tensor-parallel group:

- forward: two layer norms (read and write E each: 4E), two bias-dropout-adds (read the input and
  the residual, write the sum: 3E each; plus a one-byte mask per element with dropout), the MLP's
  activation (read and write the f-wide tensor, 2Ef/h; SwiGLU reads two and writes one, 3Ef/h),
  and, without FlashAttention, the softmax over the b x a x s x s scores (read and write) and its
  dropout (read, write, mask). The norms and dropout-adds work on the whole E on every tensor rank
  unless sequence parallelism splits them; the MLP and the scores are split t ways.
- backward: every kernel reads what its forward read plus the incoming gradient and writes the
  outgoing one: twice the forward's traffic; a recomputed forward (full: everything, selective:
  the attention core) runs its kernels again.
- the LM head: the softmax and cross entropy over b x s x V / t logits, in fp32 (read and write:
  8 bytes per logit forward and backward each); the embedding: the lookup writes E, its backward
  reads the gradient (2E e bytes in all).

What the bytes cost is their transfer at the device's HBM bandwidth (the analytic cost model).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Traffic:
    """HBM bytes of one layer's elementwise work per micro-batch: forward, backward (the input-grad
    side), and what a recomputed forward adds to the backward."""

    forward: float
    backward: float
    recompute: float = 0.0


def block_traffic(seq_len: int, micro_batch: int, hidden: int, heads: int, ffn_hidden: float, dtype_bytes: int, *,
                  tensor_parallel: int = 1, sequence_parallel: bool = False, flash_attention: bool = False,
                  dropout: bool = True, swiglu: bool = False, recompute: str = "none",
                  kv_len: int | None = None, attention: bool = True, mlp: bool = True) -> Traffic:
    """A transformer block's elementwise traffic (see the module docstring); ``kv_len``: the keys
    each query sees when it is not ``seq_len`` (context parallelism: a rank's queries, every key);
    without ``attention`` or ``mlp``, only the other half's, with its norm and residual add."""
    e, t = dtype_bytes, tensor_parallel
    elements = seq_len * micro_batch * hidden
    whole = elements / (t if sequence_parallel else 1)  # norms and dropout-adds
    mask = 1 if dropout else 0
    halves = int(attention) + int(mlp)  # each half has its norm and its (dropout and) residual add
    norms = halves * 2 * whole * e
    dropout_adds = halves * (3 * e + mask) * whole
    activation = (3 if swiglu else 2) * elements * ffn_hidden / hidden / t * e * int(mlp)
    scores = 0.0 if flash_attention or not attention else micro_batch * heads * seq_len * (kv_len or seq_len) / t
    core = scores * (2 * e + (2 * e + mask if dropout else 0))
    forward = norms + dropout_adds + activation + core
    again = {"full": forward, "selective": core}.get(recompute, 0.0)
    return Traffic(forward=forward, backward=2 * forward, recompute=again)


def head_traffic(seq_len: int, micro_batch: int, vocab: int, tensor_parallel: int = 1) -> Traffic:
    """The LM head's softmax and cross entropy over the logits, in fp32."""
    logits = seq_len * micro_batch * vocab / tensor_parallel
    return Traffic(forward=8 * logits, backward=8 * logits)


def embedding_traffic(seq_len: int, micro_batch: int, hidden: int, dtype_bytes: int) -> Traffic:
    """The lookup writes its output; its backward reads the gradient."""
    out = seq_len * micro_batch * hidden * dtype_bytes
    return Traffic(forward=out, backward=out)
