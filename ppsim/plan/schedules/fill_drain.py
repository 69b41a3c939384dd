"""Fill-drain schedules: GPipe (all forwards, then all backwards), its breadth-first form over
chunks (looped BFS) and forward-only inference."""

from __future__ import annotations

from ppsim.plan.action import Action, Kind
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import make_plan


def gpipe(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """GPipe: every stage runs all forwards, then all backwards in micro-batch order."""
    m = num_microbatches
    orders = [
        [Action(r, Kind.F, i) for i in range(m)] + [Action(r, Kind.B, i) for i in range(m)]
        for r in range(num_ranks)
    ]
    return make_plan("gpipe", num_ranks, m, chunks, orders)


def looped_bfs(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """Breadth-first over chunks (Lamy-Poirier's looped BFS, torch's ScheduleLoopedBFS): a rank
    runs every micro-batch's forward of its first chunk, then of its next, ...; then the
    backwards chunk by chunk from its last, micro-batches last first. Holds m x v chunk
    micro-batches, as GPipe does, with the bubble of GPipe over chunks."""
    p, m, v = num_ranks, num_microbatches, chunks
    orders = []
    for r in range(p):
        mine = [c * p + r for c in range(v)]
        order = [Action(s, Kind.F, i) for s in mine for i in range(m)]
        order += [Action(s, Kind.B, i) for s in reversed(mine) for i in reversed(range(m))]
        orders.append(order)
    return make_plan("looped-bfs", p, m, v, orders)


def inference(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """Forward only: every stage runs all forwards in order (pipelined inference)."""
    orders = [[Action(r, Kind.F, i) for i in range(num_microbatches)] for r in range(num_ranks)]
    return make_plan("inference", num_ranks, num_microbatches, chunks, orders)
