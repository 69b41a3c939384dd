"""What fully sharded data parallelism and activation offloading add to a block's passes.

ZeRO-3 / FSDP (``training.zero_stage: 3``; Megatron FSDP, PyTorch FSDP): every device holds 1/d of
the weights, gradients and optimizer state (d = the replicas of the stage). Each block's weights
are all-gathered before its forward and again before its backward, and its gradients
reduce-scattered after its backward, each over the d replicas; the next block's gather is
prefetched while a block computes, so a block exposes only what its collectives take beyond its
own compute in that pass. The weights travel in their stored format (16 bits, or the narrow format
with ``low_precision_params``), the gradients in 16 bits. No gradient reduction or parameter gather
is left for the step's end. What it holds unsharded beside the shards is priced in
:func:`ppsim.costs.memory.gathered_bytes`.

Activation offloading (``training.offload_layers``, Megatron's ``--cpu-offloading-num-layers``):
the activations of that many blocks of each virtual stage are copied to host memory during the
forward and back before their backward, over the device's host link (``host_link_gb_s``: PCIe, or
NVLink-C2C on a Grace-Blackwell superchip), beside the stage's compute: a pass exposes only what
its copies take beyond the pass's compute; the device holds those blocks' activations no longer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsim.costs.collectives import ring_allgather_ms
from ppsim.costs.table import Link


@dataclass(frozen=True)
class Exposed:
    """Communication left uncovered in each pass, per micro-batch."""

    forward_ms: float = 0.0
    backward_ms: float = 0.0


def fsdp_stage(params: float, layers: int, weight_bytes: float, grad_bytes: float, replicas: int, link: Link,
               forward_ms: float, backward_ms: float) -> Exposed:
    """A stage's exposed FSDP collectives per micro-batch: its ``params`` weights of ``weight_bytes``
    gathered before each pass, their gradients of ``grad_bytes`` reduce-scattered after the
    backward (a reduce-scatter moves what an all-gather does), layer by layer over ``layers``
    layers beside the stage's ``forward_ms`` and ``backward_ms`` of compute: each layer's share
    hidden behind the layer before it, so what the collectives take beyond the compute is exposed,
    and at least the first layer's share, which nothing precedes."""
    if replicas <= 1 or params <= 0:
        return Exposed()
    gather = ring_allgather_ms(params * weight_bytes, replicas, link)
    scatter = ring_allgather_ms(params * grad_bytes, replicas, link)
    n = max(1, layers)
    return Exposed(max(gather / n, gather - forward_ms), max((gather + scatter) / n, gather + scatter - backward_ms))


def offload(activation_bytes: float, host: Link, forward_ms: float, backward_ms: float) -> Exposed:
    """The exposed copies of ``activation_bytes`` to the host in the forward and back in the
    backward, beside a stage's ``forward_ms`` and ``backward_ms`` of compute."""
    if activation_bytes <= 0:
        return Exposed()
    copy = host.transfer_ms(activation_bytes)
    return Exposed(max(0.0, copy - forward_ms), max(0.0, copy - backward_ms))
