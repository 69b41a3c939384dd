"""What every schedule builder shares: the registry entry and the argument checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ppsim.errors import ScheduleError
from ppsim.plan.action import Action
from ppsim.plan.plan import Plan, loop_placement

Builder = Callable[[int, int, int], Plan]


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered schedule: its builder and what it accepts."""

    name: str
    summary: str
    build: Builder
    chunks: str = "1"  #: "1" (one chunk per rank) or ">=1" / ">=2"
    splits_backward: bool = False  #: uses I and W instead of B
    training: bool = True  #: False for forward-only schedules
    min_microbatches: str = "1"  #: "1", "p" (at least the stage count) or "multiple of p"


def check_sizes(name: str, num_ranks: int, num_microbatches: int, chunks: int) -> None:
    """Reject sizes no schedule accepts, naming the field to change."""
    if num_ranks < 1:
        raise ScheduleError(f"must be at least 1, got {num_ranks}", field="pipeline.stages")
    if num_microbatches < 1:
        raise ScheduleError(f"must be at least 1, got {num_microbatches}", field="pipeline.microbatches")
    if chunks < 1:
        raise ScheduleError(f"must be at least 1, got {chunks}", field="pipeline.chunks")


def require_one_chunk(name: str, chunks: int) -> None:
    if chunks != 1:
        raise ScheduleError(
            f"schedule {name!r} runs one chunk per rank, got chunks={chunks}; "
            "set chunks: 1 or use interleaved-1f1b",
            field="pipeline.chunks",
        )


def make_plan(name: str, num_ranks: int, num_microbatches: int, chunks: int, orders: list[list[Action]]) -> Plan:
    return Plan(
        schedule=name,
        num_ranks=num_ranks,
        num_microbatches=num_microbatches,
        chunks=chunks,
        stage_to_rank=loop_placement(num_ranks, chunks),
        actions=tuple(tuple(o) for o in orders),
    )
