"""A progress bar on stderr for long work (sweep here; ppexec's profile and validate): what is being
done, a bar, done / total, elapsed and remaining time, and a spinner that turns while one unit takes
long. Transient, and drawn only on a terminal, so stdout (``--json``) and piped stderr stay clean."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class Bar:
    """The running bar: ``advance`` counts finished units, ``say`` changes what it says is being done."""

    _progress: Any  #: rich.progress.Progress
    _task: Any  #: its TaskID

    def advance(self, units: float = 1.0) -> None:
        """Count ``units`` more as done."""
        self._progress.advance(self._task, units)

    def to(self, units: float) -> None:
        """Set the units done (never backwards)."""
        self._progress.update(self._task, completed=max(units, self.done))

    def say(self, what: str) -> None:
        """Show ``what`` as what is being done."""
        self._progress.update(self._task, description=what)

    def total(self, units: float) -> None:
        """Change how many units there are (when the work turns out longer or shorter)."""
        self._progress.update(self._task, total=units)

    @property
    def done(self) -> float:
        return float(self._progress.tasks[0].completed)


@contextmanager
def progress_bar(what: str, total: float) -> Iterator[Bar]:
    """A transient bar on ppsim's stderr console (``ppsim.cli.common.err``, looked up when called)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from ppsim.cli import common

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"))
    with Progress(*columns, console=common.err, transient=True) as progress:
        task = progress.add_task(what, total=total)
        yield Bar(progress, task)
