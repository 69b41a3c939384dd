"""The communication context parallelism adds to a transformer block, as Megatron-Core runs it.

With cp-way context parallelism each device holds s / cp of every sequence's tokens (Megatron cuts
the sequence in 2cp chunks and gives rank i chunks i and 2cp - 1 - i, so that under the causal
mask every rank does the same attention work); its queries need every other rank's keys and
values. Per block and micro-batch, with a rank's K and V of ``kv_bytes`` (2 x b x s/cp x kv heads
/ t x head dim x dtype bytes), by ``training.cp_comm`` (Megatron's ``--cp-comm-type``):

- ``p2p``: a ring of cp steps. At each step a rank computes attention on the K/V block it holds
  while it passes that block on and receives the next, so only what a step's transfer takes
  beyond a step's attention (1 / cp of the block's attention) is exposed, cp - 1 times. The
  backward passes the K/V blocks round again with their gradients (twice the bytes per step)
  beside the backward's attention;
- ``all_gather``: the K/V all-gathered before the attention (exposed), and in the backward
  gathered again and their gradients reduce-scattered;
- ``a2a`` (DeepSpeed-Ulysses): all-to-alls that trade the sequence split for a split of the
  heads: Q, K, V before the attention and its output after it, each a rank sending (cp - 1) / cp
  of its tensor; the backward the same four; exposed (heads must divide by t x cp);
- ``a2a+p2p`` (hierarchical): all-to-alls inside groups of ``a2a`` ranks as above (with a2a for
  cp), then the ``p2p`` ring over the cp / a2a groups: a rank's K/V block holds the same bytes
  (a2a times the tokens, 1 / a2a of the heads), each of the cp / a2a steps beside 1 / (cp / a2a)
  of the attention.

The time of a transfer is the CP group's link (inside a node before data parallelism, as
Megatron orders its groups: ``ppsim.inputs.cluster``); both levels of ``a2a+p2p`` run on it.

The exchange's buffers, beyond the activations the block keeps (Transformer Engine's attention
with context parallelism, :func:`exchange_buffer_bytes`), a working set that each block's
attention allocates again, so the caching allocator keeps it reserved for the step:

- ``p2p``: the forward keeps every step's received K/V block and every step's partial output
  until it combines them at the end, cp x (kv + q); the backward double-buffers the K/V blocks
  with their gradients, 4 kv; the larger of the two;
- ``all_gather``: the backward's gathered K/V and their gradients before the reduce-scatter, 2 cp kv;
- ``a2a``: the backward's output gradient and the Q, K, V gradients re-laid beside their inputs,
  2 q + kv;
- ``a2a+p2p``: the all-to-alls' then the ring's over cp / a2a groups, together.

Not modelled: attention kernels slowed by the copies beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppsim.costs.collectives import ring_allgather_ms
from ppsim.costs.table import Link

if TYPE_CHECKING:
    from ppsim.inputs.scenario import ModelSpec


@dataclass(frozen=True)
class ContextParallelComm:
    """One block's exposed context-parallel communication in each pass, per micro-batch."""

    forward_ms: float = 0.0
    backward_ms: float = 0.0


def context_parallel_comm(kind: str, cp: int, link: Link, *, kv_bytes: float, q_bytes: float,
                          attention_forward_ms: float, attention_backward_ms: float,
                          a2a_size: int | None = None) -> ContextParallelComm:
    """The exposed communication of one block's passes (``q_bytes``: a rank's queries, as its
    attention output is, for the all-to-alls; ``a2a_size``: the all-to-all groups of ``a2a+p2p``)."""
    if cp <= 1:
        return ContextParallelComm()
    if kind == "a2a+p2p":
        if not a2a_size or cp % a2a_size:
            raise ValueError(f"a2a+p2p needs all-to-all groups that divide cp = {cp}, not {a2a_size}")
        inner = context_parallel_comm("a2a", a2a_size, link, kv_bytes=kv_bytes, q_bytes=q_bytes,
                                      attention_forward_ms=attention_forward_ms,
                                      attention_backward_ms=attention_backward_ms)
        outer = context_parallel_comm("p2p", cp // a2a_size, link, kv_bytes=kv_bytes, q_bytes=q_bytes,
                                      attention_forward_ms=attention_forward_ms,
                                      attention_backward_ms=attention_backward_ms)
        return ContextParallelComm(inner.forward_ms + outer.forward_ms, inner.backward_ms + outer.backward_ms)
    if kind == "p2p":
        def ring(step_bytes: float, attention_ms: float) -> float:
            return (cp - 1) * max(0.0, link.transfer_ms(step_bytes) - attention_ms / cp)

        return ContextParallelComm(ring(kv_bytes, attention_forward_ms), ring(2 * kv_bytes, attention_backward_ms))
    if kind == "all_gather":
        gather = ring_allgather_ms(cp * kv_bytes, cp, link)  # everyone's K/V: cp x a rank's
        return ContextParallelComm(gather, 2 * gather)  # the backward: gather again, reduce-scatter the grads
    if kind == "a2a":
        def a2a(nbytes: float) -> float:
            return link.latency_ms * (cp - 1) + link.serialization_ms(nbytes * (cp - 1) / cp)

        per_pass = a2a(q_bytes) + a2a(kv_bytes) + a2a(q_bytes)  # Q, K and V, the output
        return ContextParallelComm(per_pass, per_pass)
    raise ValueError(f"unknown context-parallel communication {kind!r}")


def exchange_bytes(model: ModelSpec, micro_batch: int, cp: int, tensor_parallel: int) -> tuple[int, int]:
    """A rank's (keys and values, queries) of one block, in bytes, over its s / cp tokens and h / t
    heads (MLA: the keys and values after the up projection, per head)."""
    from ppsim.inputs.scenario import DTYPE_BYTES

    tokens, t, e = micro_batch * model.seq_len // cp, tensor_parallel, DTYPE_BYTES[model.dtype]
    if model.mla:
        return (tokens * model.heads * (model.mla.qk_dim + model.mla.v_head_dim) // t * e,
                tokens * model.heads * model.mla.qk_dim // t * e)
    return 2 * tokens * model.kv * model.head_width // t * e, tokens * model.q_width // t * e


def exchange_buffer_bytes(kind: str, cp: int, *, kv_bytes: float, q_bytes: float,
                          a2a_size: int | None = None) -> float:
    """The most one block's exchange holds beside the block's activations (the module's docstring)."""
    if cp <= 1:
        return 0.0
    if kind == "p2p":
        return max(cp * (kv_bytes + q_bytes), 4 * kv_bytes)
    if kind == "all_gather":
        return 2 * cp * kv_bytes
    if kind == "a2a":
        return 2 * q_bytes + kv_bytes
    if kind == "a2a+p2p":
        if not a2a_size or cp % a2a_size:
            raise ValueError(f"a2a+p2p needs all-to-all groups that divide cp = {cp}, not {a2a_size}")
        return (exchange_buffer_bytes("a2a", a2a_size, kv_bytes=kv_bytes, q_bytes=q_bytes)
                + exchange_buffer_bytes("p2p", cp // a2a_size, kv_bytes=kv_bytes, q_bytes=q_bytes))
    raise ValueError(f"unknown context-parallel communication {kind!r}")
