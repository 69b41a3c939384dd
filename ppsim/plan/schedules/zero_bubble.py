"""Zero-bubble schedules (Qi et al., ICLR'24 and "Pipeline Parallelism with Controllable Memory"):
the backward is split into input grad (I) and weight grad (W), and the weight grads, which nothing
waits for, fill the bubbles.

- ZB-H1 and ZB-H2: one stage per rank, W's deferred by s (resp. 2s) micro-batches on stage s;
- ZB-V: two chunks per rank in V placement (rank r holds stages r and 2p - 1 - r);
- interleaved zero bubble: Megatron's interleaved order over loop-placed chunks with I and W.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ppsim.plan.action import Action, Kind
from ppsim.plan.plan import Plan, v_placement
from ppsim.plan.schedules.base import make_plan


def _deferred_weight_grads(name: str, p: int, m: int, warmup: Callable[[int], int], lag: Callable[[int], int]) -> Plan:
    """Stage s: ``warmup(s)`` forwards, then for each micro-batch i its I, the W of micro-batch
    i - lag(s) once that far behind, and the next F; then the W's still owed."""
    orders: list[list[Action]] = []
    for s in range(p):
        first = min(warmup(s), m)
        order = [Action(s, Kind.F, i) for i in range(first)]
        next_f, next_w = first, 0
        for i in range(m):
            order.append(Action(s, Kind.I, i))
            if i - next_w >= lag(s):
                order.append(Action(s, Kind.W, next_w))
                next_w += 1
            if next_f < m:
                order.append(Action(s, Kind.F, next_f))
                next_f += 1
        order.extend(Action(s, Kind.W, i) for i in range(next_w, m))
        orders.append(order)
    return make_plan(name, p, m, 1, orders)


def zb_h1(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """ZB-H1: stage s warms up with min(p - s, m) forwards, then repeats I, (W), F, deferring its
    weight grads by s micro-batches so the input-grad chain reaches stage 0 sooner; the deferred
    W's fill the drain. With F = I = W its idle time is a third of 1F1B's, and no stage holds more
    than p micro-batches of activations (1F1B's peak)."""
    p = num_ranks
    return _deferred_weight_grads("zb-h1", p, num_microbatches, lambda s: p - s, lambda s: s)


def zb_h2(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """ZB-H2: ZB-H1 with both numbers doubled — min(2p - 1 - 2s, m) warm-up forwards and weight
    grads deferred by 2s — so the extra forwards fill the warm-up too: with F = I = W and
    m >= 2p - 1 every stage computes without a gap from its first action to its last, holding up
    to 2p - 1 micro-batches."""
    p = num_ranks
    return _deferred_weight_grads("zb-h2", p, num_microbatches, lambda s: 2 * p - 1 - 2 * s, lambda s: 2 * s)


class _Order:
    """One rank's order as it is written: each stage numbers its forwards, input grads and weight
    grads in turn."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.count: dict[tuple[int, Kind], int] = {}

    def run(self, stage: int, kind: Kind) -> None:
        n = self.count.get((stage, kind), 0)
        self.actions.append(Action(stage, kind, n))
        self.count[(stage, kind)] = n + 1

    def done(self, stage: int, kind: Kind) -> int:
        return self.count.get((stage, kind), 0)


def zb_v(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """ZB-V (torch's ScheduleZBVZeroBubble): rank r holds stage r (going down the V) and stage
    2p - 1 - r (coming back up). The order is built for n = max(m, 2p - 1) micro-batches and the
    ones past m are dropped: a warm-up on the first chunk, then forwards of both chunks
    interleaved, each second-chunk forward followed by its I and W, then a steady state of
    F, I, W on either chunk, and a cool-down that defers the first r W's. With F = I = W and
    m >= 2p - 1 a rank's span has no gap, holding 1F1B's peak (2p chunk micro-batches = p)."""
    p, m = num_ranks, num_microbatches
    n = max(m, 2 * p - 1)
    F, I, W = Kind.F, Kind.I, Kind.W
    orders: list[list[Action]] = []
    for r in range(p):
        down, up = r, 2 * p - 1 - r
        o = _Order()
        for _ in range(2 * (p - r) - 1):
            o.run(down, F)
        for _ in range(r):
            o.run(up, F)
            o.run(down, F)
        for _ in range(p - r):
            for kind in (F, I, W):
                o.run(up, kind)
        while o.done(up, F) < o.done(down, F) or o.done(down, F) < n:
            if o.done(down, F) < n:
                o.run(down, F)
            for stage, kind in ((down, I), (down, W), (up, F), (up, I), (up, W)):
                o.run(stage, kind)
        for _ in range(r):  # their W's wait until the end
            o.run(down, I)
            o.run(up, I)
        for _ in range(p - r):
            o.run(down, I)
            o.run(down, W)
        for stage in (up, down):
            while o.done(stage, W) < o.done(stage, I):
                o.run(stage, W)
        orders.append([a for a in o.actions if a.microbatch is not None and a.microbatch < m])
    return make_plan("zb-v", p, m, 2, orders, v_placement(p))


def interleaved_zb(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """Interleaved zero bubble (torch's ScheduleInterleavedZeroBubble): loop-placed chunks,
    micro-batches in rounds of m / max(1, m // p); rank r warms up with (v - 1) x round + p - 1 - r
    forwards, then alternates F and I (chunks advancing a round at a time, backwards from the last
    chunk), and from its (r + 1)-th I on adds the oldest owed W after each I. ZB-H1's bubble over
    v, holding p micro-batches when m is a multiple of p."""
    p, m, v = num_ranks, num_microbatches, chunks
    per_round = m // max(1, m // p)
    total = m * v
    orders: list[list[Action]] = []
    for r in range(p):
        warm = min((v - 1) * per_round + p - 1 - r, total)
        o = _Order()
        owed: deque[Action] = deque()
        for k in range(warm):
            o.run(((k // per_round) % v) * p + r, Kind.F)
        for j in range(total):
            if warm + j < total:
                o.run((((warm + j) // per_round) % v) * p + r, Kind.F)
            o.run((v - 1 - (j // per_round) % v) * p + r, Kind.I)
            owed.append(Action(o.actions[-1].stage, Kind.W, o.actions[-1].microbatch))
            if j >= r:
                o.actions.append(owed.popleft())
        o.actions.extend(owed)
        orders.append(o.actions)
    return make_plan("interleaved-zb", p, m, v, orders)
