"""Fill-drain schedules: GPipe (all forwards, then all backwards) and forward-only inference."""

from __future__ import annotations

from ppsim.plan.action import Action, Kind
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import check_sizes, make_plan, require_one_chunk


def gpipe(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """GPipe: every stage runs all forwards, then all backwards in micro-batch order."""
    check_sizes("gpipe", num_ranks, num_microbatches, chunks)
    require_one_chunk("gpipe", chunks)
    m = num_microbatches
    orders = [
        [Action(r, Kind.F, i) for i in range(m)] + [Action(r, Kind.B, i) for i in range(m)]
        for r in range(num_ranks)
    ]
    return make_plan("gpipe", num_ranks, m, chunks, orders)


def inference(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """Forward only: every stage runs all forwards in order (pipelined inference)."""
    check_sizes("inference", num_ranks, num_microbatches, chunks)
    require_one_chunk("inference", chunks)
    orders = [[Action(r, Kind.F, i) for i in range(num_microbatches)] for r in range(num_ranks)]
    return make_plan("inference", num_ranks, num_microbatches, chunks, orders)
