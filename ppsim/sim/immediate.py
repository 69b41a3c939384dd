"""A kernel without a clock, for runs whose waits depend only on data, not on when they happen.

On static links (no network model) every time the engine computes comes from the ranks' own
clocks and the messages' recorded ends: a rank that waits on a message only needs to know *that*
it has been sent (its end is then known), not to be woken at that instant. So the ranks can run
in any order that respects what they wait on: each runs until it must wait, and is resumed as soon
as what it waits on has happened. No event queue is kept and no time is ordered, which is what
makes this kernel several times cheaper than SimPy's for the same handlers (and the same trace).

It offers the part of SimPy's interface the engine's static path uses: ``event()``, ``fire_at``,
``process``, ``run`` and ``now``; and one of its own for the commonest wait, a receive whose message
is not sent yet: a process that yields None is parked, and whoever sends the message hands it to
``resume`` (no event is made for it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any


class Flag:
    """An event that is triggered once; processes waiting on it resume when it is."""

    __slots__ = ("triggered", "waiters", "callbacks")

    def __init__(self) -> None:
        self.triggered = False
        self.waiters: list[Generator[Flag | None, Any, None]] = []
        self.callbacks: list[Callable[[Flag], None]] = []


class ImmediateKernel:
    """Runs generator processes that yield :class:`Flag` s, resuming each when its flag fires."""

    now = 0.0  #: there is no clock: delays are recorded by the engine, not waited out

    def __init__(self) -> None:
        self.ready: deque[Generator[Flag | None, Any, None]] = deque()

    @staticmethod
    def event() -> Flag:
        return Flag()

    def fire_at(self, event: Flag, delay: float) -> None:
        """Trigger ``event`` (its delay is already in the times the engine recorded)."""
        if event.triggered:  # pragma: no cover - the engine fires each event once
            raise RuntimeError("event fired twice")
        event.triggered = True
        if event.waiters:
            self.ready.extend(event.waiters)
            event.waiters = []
        for callback in event.callbacks:
            callback(event)

    def process(self, generator: Generator[Flag | None, Any, None]) -> None:
        self.ready.append(generator)

    def resume(self, generator: Generator[Flag | None, Any, None]) -> None:
        """Let a parked process (one that yielded None) go on."""
        self.ready.append(generator)

    def run(self) -> None:
        """Run until no process can go on: every one finished, or the rest wait on each other."""
        ready = self.ready
        while ready:
            process = ready.popleft()
            try:
                flag = next(process)
                while flag is not None and flag.triggered:
                    flag = next(process)
            except StopIteration:
                continue
            if flag is not None:  # else parked: it is handed to resume() when what it waits for is done
                flag.waiters.append(process)
