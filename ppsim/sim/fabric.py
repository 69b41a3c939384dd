"""The network model on a kernel's clock: messages and gradient-reduction buckets as flows that
share the links (:mod:`ppsim.sim.network`), started in time order, each pair's messages in order."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Hashable
from functools import partial
from typing import Any

from ppsim.costs.table import FabricCollective
from ppsim.sim.kernel import ClockKernel
from ppsim.sim.network import Flow, Network


class Fabric:
    """Starts flows now, and wakes at the next one to finish."""

    def __init__(self, env: ClockKernel, capacity: Any) -> None:
        self.env = env
        self.call_later: Callable[[float, Callable[[], object]], None] = env.call_later  #: call a function later
        self.net = Network(capacity)
        #: the earliest wake-up booked and not yet come; it is no later than any active flow's finish,
        #: so a start books one only for a flow it makes finish earlier
        self.booked = math.inf
        self.queues: dict[Hashable, deque[Flow]] = {}

    def start(self, flow: Flow) -> None:
        now = self.env.now
        at = self.net.start(now, flow)  # no other finish changed: the booked wake-up still comes in time
        if at < now:
            at = now
        if at < self.booked:
            self._book(at, now)

    def send(self, pair: Hashable, flow: Flow) -> None:
        """Start ``flow`` now, or after the flows of ``pair`` queued before it."""
        queue = self.queues.get(pair)
        if queue is None:
            queue = self.queues[pair] = deque()
        queue.append(flow)
        if len(queue) == 1:
            self.start(flow)

    def send_at(self, when: float, pair: Hashable, flow: Flow) -> None:
        """:meth:`send` once the kernel's clock reaches ``when`` (flows start in time order)."""
        if when <= self.env.now:
            self.send(pair, flow)
        else:
            self.call_later(when - self.env.now, partial(self.send, pair, flow))

    def sent(self, pair: Hashable) -> None:
        """The flow at the head of ``pair``'s queue has sent its last byte: the next one starts."""
        queue = self.queues[pair]
        queue.popleft()
        if queue:
            self.start(queue[0])

    def _on_wake(self, at: float) -> None:
        """Hand out the flows finished by now, then book a wake-up at the next finish. A wake-up
        booked before an earlier one (a start made some flow finish sooner) finds it stale and returns."""
        if at != self.booked:
            return  # an earlier wake-up was booked after this one, and has come
        self.booked = -math.inf  # the flows that start as these finish book nothing: the wake-up below
        now = self.env.now
        net = self.net
        for arrival, flow in net.finish_until(now):
            flow.on_done(arrival)  # type: ignore[misc]  # every flow the engine starts says what to do when done
        at = net.next_finish()
        if at < now:
            at = now
        self.booked = math.inf
        if at < math.inf:
            self._book(at, now)

    def _book(self, at: float, now: float) -> None:
        """Wake up at ``at`` (no later than any active flow's finish)."""
        self.booked = at
        self.call_later(at - now, partial(self._on_wake, at))


class Feeder:
    """A stage's gradient reduction on the fabric: its buckets go out one after the other, each when
    it is ready (``ready``: when the backward has produced it), after ``after`` (the rank's previous
    reduction); ``done`` fires when the last has arrived."""

    def __init__(self, fabric: Fabric, collective: FabricCollective, ready: list[float], after: Any | None) -> None:
        self.fabric = fabric
        self.collective = collective
        self.done = fabric.env.event()
        self.first: float | None = None
        self.end = 0.0
        fabric.env.process(self._run(ready, after))

    def _run(self, ready: list[float], after: Any | None) -> Generator[Any, Any, None]:
        env, c = self.fabric.env, self.collective
        if after is not None:
            yield after
        for at in ready:
            if at > env.now:
                yield env.timeout(at - env.now)
            if self.first is None:
                self.first = env.now
            arrived = env.event()
            self.fabric.start(Flow(c.route.load, c.volume_bytes, c.steps * c.route.latency_ms,
                                   on_done=partial(self._arrived, arrived)))
            yield arrived
        self.end = env.now
        self.done.succeed()

    def _arrived(self, event: Any, arrival: float) -> None:
        self.fabric.env.fire_at(event, arrival - self.fabric.env.now)
