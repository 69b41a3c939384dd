"""Schedule registry: a schedule is a pure function of integers that returns a compute-only Plan.

To add a schedule, write a builder ``(ranks, microbatches, chunks) -> Plan`` in a module here and
register it in ``SCHEDULES`` with one line of summary.
"""

from __future__ import annotations

from ppsim.errors import ScheduleError
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import ScheduleInfo
from ppsim.plan.schedules.fill_drain import gpipe, inference
from ppsim.plan.schedules.one_f_one_b import interleaved_1f1b, one_f_one_b
from ppsim.plan.schedules.zero_bubble import zb_h1

SCHEDULES: dict[str, ScheduleInfo] = {
    info.name: info
    for info in (
        ScheduleInfo("gpipe", "GPipe: all forwards, then all backwards; holds m micro-batches", gpipe),
        ScheduleInfo(
            "1f1b", "1F1B (PipeDream-flush, DeepSpeed TrainSchedule): holds at most p - s on stage s", one_f_one_b
        ),
        ScheduleInfo(
            "interleaved-1f1b",
            "Megatron interleaved 1F1B: v chunks per rank, bubble / v, v x more messages",
            interleaved_1f1b,
            chunks=">=1",
            min_microbatches="multiple of p",
        ),
        ScheduleInfo(
            "zb-h1",
            "Zero-bubble H1: backward split into input grad (I) and weight grad (W); 1/3 of 1F1B's bubble",
            zb_h1,
            splits_backward=True,
        ),
        ScheduleInfo("inference", "Forward only, pipelined (no backward, no optimizer)", inference, training=False),
    )
}


def get(name: str) -> ScheduleInfo:
    """Look a schedule up by name; an unknown name lists the known ones."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise ScheduleError(
            f"unknown schedule {name!r}; choose one of: {', '.join(SCHEDULES)}", field="pipeline.schedule"
        ) from None


def build(name: str, num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """Build the compute-only plan of schedule ``name``."""
    return get(name).build(num_ranks, num_microbatches, chunks)


__all__ = ["SCHEDULES", "ScheduleInfo", "build", "get"]
