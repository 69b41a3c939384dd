"""A lean kernel with a clock, for runs on a fabric: SimPy's order of events, less of its generality.

On a fabric the network's flows must start and end in time order, so the run needs a clock. SimPy
gives one, but its generality (event values, failures, interrupts, conditions, a process that is
itself an event) costs on every one of the tens of thousands of events a large plan makes. This
kernel keeps exactly what the engine uses, in SimPy's order: events are processed by time, then
priority (a process's start is urgent), then the order they were scheduled in; a process resumes
when the event it yields is processed, at once if it was already. So it gives the same trace as
SimPy (the tests compare the two on every cluster scenario).

It offers the part of SimPy's interface the engine uses: ``now``, ``event()``, ``timeout()``,
``process()``, ``run()``, ``fire_at`` (an event processed ``delay`` from now) and ``call_later`` (a
function called ``delay`` from now, in the same order, without an event).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from heapq import heappop, heappush
from itertools import count
from typing import Any

URGENT, NORMAL = 0, 1  #: SimPy's priorities: a process starts before the events of the same instant


class Event:
    """Something that happens once; its callbacks run when it is processed (then they are None)."""

    __slots__ = ("kernel", "callbacks", "triggered")

    def __init__(self, kernel: ClockedKernel) -> None:
        self.kernel = kernel
        self.callbacks: list[Callable[[Event], None]] | None = []
        self.triggered = False  #: scheduled to be processed (or processed)

    def succeed(self) -> None:
        """Process this event now, after the events already scheduled for now."""
        self.kernel.fire_at(self, 0.0)


Process = Generator[Event, Any, None]


class ClockedKernel:
    """Runs generator processes that yield :class:`Event` s, in time order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, int, Any]] = []  #: (time, priority, order, an Event or a call)
        self._order = count()

    def event(self) -> Event:
        return Event(self)

    def fire_at(self, event: Event, delay: float) -> None:
        """Schedule ``event`` to be processed ``delay`` from now (a negative delay counts as 0)."""
        if event.triggered:  # pragma: no cover - the engine fires each event once
            raise RuntimeError("event fired twice")
        event.triggered = True
        heappush(self._queue, (self.now + delay if delay > 0 else self.now, NORMAL, next(self._order), event))

    def timeout(self, delay: float) -> Event:
        """An event processed ``delay`` from now."""
        event = Event(self)
        event.triggered = True
        heappush(self._queue, (self.now + delay, NORMAL, next(self._order), event))
        return event

    def call_later(self, delay: float, call: Callable[[], object]) -> None:
        """Call ``call`` ``delay`` from now, in the order of the events (as a timeout's callback would
        be, without the event)."""
        heappush(self._queue, (self.now + delay, NORMAL, next(self._order), call))

    def process(self, generator: Process) -> None:
        """Start ``generator`` now, before the other events of this instant."""
        start = Event(self)
        start.triggered = True
        start.callbacks.append(partial(self._resume, generator))  # type: ignore[union-attr]  # a fresh event: its callbacks are a list until it is processed
        heappush(self._queue, (self.now, URGENT, next(self._order), start))

    def _resume(self, generator: Process, _event: Event) -> None:
        while True:
            try:
                event = next(generator)
            except StopIteration:
                return
            if event.callbacks is not None:  # not processed yet: wait for it
                event.callbacks.append(partial(self._resume, generator))
                return

    def run(self) -> None:
        """Process events until none is left."""
        queue = self._queue
        while queue:
            self.now, _, _, event = heappop(queue)
            if event.__class__ is not Event:  # a call booked by call_later
                event()
                continue
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:  # type: ignore[union-attr]  # a list until the event is processed, once
                callback(event)
