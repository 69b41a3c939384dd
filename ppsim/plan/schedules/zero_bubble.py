"""Zero-bubble schedules (Qi et al., ICLR'24) that split the backward into input grad (I) and
weight grad (W) so that weight grads fill the bubbles."""

from __future__ import annotations

from ppsim.plan.action import Action, Kind
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import check_sizes, make_plan, require_one_chunk


def zb_h1(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """ZB-H1: stage s warms up with min(p - s, m) forwards, then repeats I, (W), F, deferring its
    weight grads by s micro-batches so the input-grad chain reaches stage 0 sooner; the deferred
    W's fill the drain. With F = I = W its idle time is a third of 1F1B's, and no stage holds more
    than p micro-batches of activations (1F1B's peak)."""
    check_sizes("zb-h1", num_ranks, num_microbatches, chunks)
    require_one_chunk("zb-h1", chunks)
    p, m = num_ranks, num_microbatches
    orders: list[list[Action]] = []
    for s in range(p):
        warmup = min(p - s, m)
        order = [Action(s, Kind.F, i) for i in range(warmup)]
        next_f, next_w = warmup, 0
        for i in range(m):
            order.append(Action(s, Kind.I, i))
            if i + 1 - next_w > s:
                order.append(Action(s, Kind.W, next_w))
                next_w += 1
            if next_f < m:
                order.append(Action(s, Kind.F, next_f))
                next_f += 1
        order.extend(Action(s, Kind.W, i) for i in range(next_w, m))
        orders.append(order)
    return make_plan("zb-h1", p, m, chunks, orders)
