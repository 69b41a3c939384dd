"""The collectives tensor parallelism adds, as Megatron-LM runs them (one place for every cost builder).

Per transformer block and micro-batch, over the t ranks of a tensor-parallel group, of one whole
s x b x h activation (``activation_bytes``):

- without sequence parallelism: two all-reduces in the forward (after attention and after the
  MLP) and their two conjugates in the backward;
- with sequence parallelism (Korthikanti et al. 2022): each all-reduce becomes a reduce-scatter
  and the block's two inputs are all-gathered, in the forward and (conjugate) in the backward:
  per pass 2 all-gathers + 2 reduce-scatters, the bytes of 2 all-reduces. The backward also
  all-gathers the two sharded inputs again for the weight gradients (Megatron keeps only the
  shards): 2 more all-gathers;
- a fully recomputed forward runs its collectives again inside the backward.

With ``training.tp_comm_overlap`` (Megatron's ``--tp-comm-overlap``, Transformer Engine's
userbuffers; sequence parallelism only) each collective runs beside the linear layer's GEMM that
consumes or produces it, split in t chunks around the ring (:func:`overlapped_ms`): the all-gather
of a block's input with QKV's and the MLP up projection's GEMMs, the reduce-scatter of an output
with the attention output's and the down projection's; in the backward each linear layer's input-
and weight-grad GEMMs hide its share of the pass's collectives. Only what the GEMM cannot cover is
exposed. Not modelled: the GEMM slowed by the copies running beside it (measured on a device).

The stage-to-stage message: with sequence parallelism each rank holds and sends 1/t of it. Without
it, Megatron's scatter-gather (DeepSpeed's partitioned activations likewise) sends 1/t from each
rank and the receiving group all-gathers the whole message over its own link
(``pipeline.scatter_gather``); otherwise every rank sends the whole message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppsim.costs.collectives import ring_allgather_ms, ring_allreduce_ms
from ppsim.costs.table import Link


@dataclass(frozen=True)
class TensorParallelComm:
    """The tensor-parallel collectives' time, per block in each pass and per received message."""

    forward_ms: float = 0.0  #: one block's collectives in its forward
    backward_ms: float = 0.0  #: in its backward (a recomputed forward's included)
    gather_ms: float = 0.0  #: the receiving group's all-gather of a scattered stage-to-stage message


def message_split(t: int, *, sequence_parallel: bool, scatter_gather: bool) -> int:
    """How many ways each tensor rank's stage-to-stage message is split (1: every rank sends it whole)."""
    return t if t > 1 and (sequence_parallel or scatter_gather) else 1


def tensor_parallel_comm(activation_bytes: float, t: int, link: Link, *, sequence_parallel: bool,
                         full_recompute: bool, scatter_gather: bool) -> TensorParallelComm:
    """The collectives of one block's passes and of a received message over ``t`` ranks on ``link``."""
    if t <= 1:
        return TensorParallelComm()
    allreduce = ring_allreduce_ms(activation_bytes, t, link)
    allgather = ring_allgather_ms(activation_bytes, t, link)
    forward = 2 * allreduce  # with sequence parallelism: 2 all-gathers + 2 reduce-scatters, the same bytes
    backward = 2 * allreduce + (2 * allgather if sequence_parallel else 0.0)
    if full_recompute:
        backward += forward
    gather = allgather if scatter_gather and not sequence_parallel else 0.0
    return TensorParallelComm(forward, backward, gather)


def overlapped_ms(comm_ms: float, gemm_ms: float, chunks: int) -> float:
    """What of a collective of ``comm_ms`` stays exposed when it runs beside a GEMM of ``gemm_ms``,
    both split in ``chunks`` steps around the ring: each step moves one chunk while the GEMM works on
    the one before, so the pair takes max(comm, gemm) plus one chunk of the shorter to fill the
    pipeline, and the exposed part is that less the GEMM."""
    if comm_ms <= 0:
        return 0.0
    both = max(comm_ms, gemm_ms) + min(comm_ms, gemm_ms) / max(1, chunks)
    return both - gemm_ms


def exposed_comm(comm: TensorParallelComm, t: int, forward_gemms_ms: list[float],
                 backward_gemms_ms: list[float]) -> TensorParallelComm:
    """One block's collectives with the userbuffers overlap: per pass, each linear layer's GEMMs
    (``*_gemms_ms``: QKV, attention output, MLP up, MLP down, one block's) hide an equal share of
    the pass's collectives (the forward's four: two all-gathers, two reduce-scatters)."""
    def exposed(total: float, gemms: list[float]) -> float:
        return sum(overlapped_ms(total / len(gemms), g, t) for g in gemms) if gemms else total

    return replace(comm, forward_ms=exposed(comm.forward_ms, forward_gemms_ms),
                   backward_ms=exposed(comm.backward_ms, backward_gemms_ms))


def gathering(links: tuple[Link, ...], comm: TensorParallelComm) -> tuple[Link, ...]:
    """The stage-to-stage links with the receiving group's all-gather after each message."""
    if comm.gather_ms <= 0:
        return links
    return tuple(replace(x, recv_overhead_ms=x.recv_overhead_ms + comm.gather_ms) for x in links)
