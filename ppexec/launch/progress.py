"""How far a run of ranks is, from their events, in the units of a progress bar: the ranks set up
(:attr:`RunUnits.setup` units), every step, warm-up steps included (which are not recorded: they
count when the first recorded step arrives), and every rank done (1, after what a profiling rank
measures at the end). Units stand for time, so that the bar's estimate of the time left holds:
starting the ranks (Python, torch, the model, the process group) takes seconds, about as long as a
short run's steps, so it weighs as much as the steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ppexec.worker.events import RankState

MIN_SETUP_UNITS = 5  #: what starting the ranks weighs at least, in steps


@dataclass(frozen=True)
class RunUnits:
    """One run of ``warmup`` steps that are not recorded, then ``steps`` that are."""

    steps: int
    warmup: int

    @property
    def setup(self) -> int:
        return max(MIN_SETUP_UNITS, self.warmup + self.steps)

    @property
    def total(self) -> int:
        return self.setup + self.warmup + self.steps + 1

    def done(self, states: list[RankState]) -> tuple[int, str]:
        """Units done by the slowest rank, and what the ranks are doing now."""
        ready = bool(states) and all(st.ready is not None for st in states)
        recorded = min((len(st.steps) for st in states), default=0)
        finished = bool(states) and all(st.done for st in states)
        units = self.setup * ready + (self.warmup + recorded if recorded else 0) + int(finished)
        if not ready:
            return units, "starting the ranks"
        if finished:
            return units, "done"
        if recorded == 0 and self.warmup:
            return units, f"warm-up ({self.warmup} step{'s' if self.warmup != 1 else ''}, not recorded)"
        if recorded < self.steps:
            return units, f"step {recorded + 1}/{self.steps}"
        return units, "finishing"


def follow(units: RunUnits, offset: float, label: str, to: Callable[[float], None],
           say: Callable[[str], None]) -> Callable[[list[RankState]], None]:
    """An ``on_progress`` for the launcher: puts the run's units (after ``offset`` earlier ones) on a bar."""
    def on_progress(states: list[RankState]) -> None:
        done, doing = units.done(states)
        to(offset + done)
        say(f"{label}: {doing}")

    return on_progress
