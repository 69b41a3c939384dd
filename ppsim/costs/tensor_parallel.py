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


def gathering(links: tuple[Link, ...], comm: TensorParallelComm) -> tuple[Link, ...]:
    """The stage-to-stage links with the receiving group's all-gather after each message."""
    if comm.gather_ms <= 0:
        return links
    return tuple(replace(x, recv_overhead_ms=x.recv_overhead_ms + comm.gather_ms) for x in links)
