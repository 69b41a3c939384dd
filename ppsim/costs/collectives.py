"""What the collectives cost on a link: ring and tree all-reduce, ring all-gather, and the data-parallel
gradient all-reduce in buckets.

Ring all-reduce over n devices: 2(n-1)/n x bytes / bandwidth + 2(n-1) x latency; (double binary)
tree: 2 x bytes / bandwidth + 2 ceil(log2 n) x latency; ring all-gather (or reduce-scatter) of
``nbytes`` in all: half a ring all-reduce.
"""

from __future__ import annotations

import math

from ppsim.costs.table import Link


def ring_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-reduce over ``ranks`` devices: 2(n-1)/n x bytes / bandwidth + 2(n-1) x latency."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (ranks - 1) / ranks * link.serialization_ms(int(nbytes)) + 2 * (ranks - 1) * link.latency_ms


def ring_allgather_ms(nbytes: float, ranks: int, link: Link) -> float:
    """Ring all-gather of ``nbytes`` in all (1/n from each of n devices): (n-1)/n x bytes / bandwidth
    + (n-1) x latency, half of a ring all-reduce (a reduce-scatter costs the same)."""
    return ring_allreduce_ms(nbytes, ranks, link) / 2


def tree_allreduce_ms(nbytes: float, ranks: int, link: Link) -> float:
    """(Double binary) tree all-reduce: reduce up and broadcast down a tree of depth log2(n):
    2 x bytes / bandwidth + 2 ceil(log2 n) x latency."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2 * link.serialization_ms(int(nbytes)) + 2 * math.ceil(math.log2(ranks)) * link.latency_ms


def grad_allreduce(grad_bytes: float, ranks: int, link: Link, algorithm: str, bucket_bytes: float) -> tuple[float, int]:
    """(total ms, buckets) of the data-parallel gradient all-reduce, run in buckets of ``bucket_bytes``
    (``algorithm``: ring or tree), each bucket paying the latency terms."""
    if ranks <= 1 or grad_bytes <= 0:
        return 0.0, 1
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    one = (tree_allreduce_ms if algorithm == "tree" else ring_allreduce_ms)(grad_bytes / buckets, ranks, link)
    return one * buckets, buckets
