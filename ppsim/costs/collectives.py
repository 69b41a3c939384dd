"""What the collectives cost on a link: ring and tree all-reduce, ring all-gather and reduce-scatter,
and the data-parallel gradient all-reduce in buckets.

Each collective is the traffic every device sends (its *volume*) and the steps that each pay the
link's latency (its *hops*): ring all-reduce over n devices, 2(n-1)/n x bytes in 2(n-1) steps;
(double binary) tree, 2 x bytes in 2 ceil(log2 n) steps; ring all-gather or reduce-scatter of
``nbytes`` in all, (n-1)/n x bytes in n-1 steps. Its time on a link: volume / bandwidth + hops x
latency. The simulator's network model moves the same volume as a flow (:mod:`ppsim.sim.network`).
"""

from __future__ import annotations

import math
from typing import Literal

from ppsim.costs.table import Link

Collective = Literal["ring", "tree", "reduce_scatter", "allgather"]
GRAD_NORM_BYTES = 4  #: what gradient clipping all-reduces over the pipeline: the squared norm, one fp32


def traffic(kind: Collective, nbytes: float, ranks: int) -> tuple[float, int]:
    """(bytes each device sends, latency steps) of a collective of ``nbytes`` over ``ranks`` devices."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0, 0
    if kind == "ring":
        return 2 * (ranks - 1) / ranks * nbytes, 2 * (ranks - 1)
    if kind == "tree":
        return 2 * nbytes, 2 * math.ceil(math.log2(ranks))
    return (ranks - 1) / ranks * nbytes, ranks - 1  # all-gather, reduce-scatter


def collective_ms(kind: Collective, nbytes: float, ranks: int, link: Link) -> float:
    volume, hops = traffic(kind, nbytes, ranks)
    return link.serialization_ms(volume) + hops * link.latency_ms if hops else 0.0


def ring_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce over ``ranks`` devices: 2(n-1)/n x bytes / bandwidth + 2(n-1) x latency."""
    return collective_ms("ring", nbytes, ranks, link)


def ring_allgather_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-gather of ``nbytes`` in all (1/n from each of n devices): (n-1)/n x bytes / bandwidth
    + (n-1) x latency, half of a ring all-reduce (a reduce-scatter costs the same)."""
    return collective_ms("allgather", nbytes, ranks, link)


def tree_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """(Double binary) tree all-reduce: reduce up and broadcast down a tree of depth log2(n):
    2 x bytes / bandwidth + 2 ceil(log2 n) x latency."""
    return collective_ms("tree", nbytes, ranks, link)


def grad_buckets(grad_bytes: float, bucket_bytes: float) -> int:
    """How many buckets the gradient all-reduce runs in."""
    return max(1, math.ceil(grad_bytes / bucket_bytes))


def grad_allreduce(grad_bytes: float, ranks: int, link: Link, algorithm: str, bucket_bytes: float) -> tuple[float, int]:
    """(total ms, buckets) of the data-parallel gradient all-reduce, run in buckets of ``bucket_bytes``
    (``algorithm``: ring or tree), each bucket paying the latency terms."""
    if ranks <= 1 or grad_bytes <= 0:
        return 0.0, 1
    buckets = grad_buckets(grad_bytes, bucket_bytes)
    one = collective_ms("tree" if algorithm == "tree" else "ring", grad_bytes / buckets, ranks, link)
    return one * buckets, buckets
