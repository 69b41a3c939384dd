"""``ppsim schedules``: every registered schedule with the capabilities it declares, and ``auto``."""

from __future__ import annotations

from rich.table import Table

from ppsim.plan.schedules import SCHEDULES, SEARCH, Capabilities
from ppsim.views.render.console import stdout_console

COLUMNS = ("schedule", "chunks", "placement", "backward", "micro-batches", "holds", "summary")


def schedule_row(info: Capabilities) -> tuple[str, ...]:
    """One schedule's cells, in COLUMNS order."""
    backward = "F&B overlap" if info.overlaps else "I + W" if info.splits_backward else "B" if info.training else "-"
    return (info.name, str(info.chunks), info.placement.value, backward, info.microbatches.text, info.memory or "-",
            info.summary)


def schedules_table() -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for c in COLUMNS:
        table.add_column(c, no_wrap=c != "summary", overflow="fold")
    for info in (*SCHEDULES.values(), SEARCH):
        table.add_row(*schedule_row(info))
    table.caption = ("holds: the most micro-batches of activations a rank holds (of its whole share; 1F1B holds p); "
                     "file:PATH reads a plan from a file")
    return table


def print_schedules() -> None:
    stdout_console().print(schedules_table())
