"""SimPy itself as the engine's kernel (``simulate(..., kernel="simpy")``): the reference the lean
kernels (:mod:`ppsim.sim.clocked`, :mod:`ppsim.sim.immediate`) are tested against, loaded only
when asked for. It offers the kernel interface (:class:`ppsim.sim.kernel.ClockKernel`): SimPy's
own, with ``event()`` giving events that ``fire_at`` processes ``delay`` from now, and
``call_later`` (a function called then)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ppsim.errors import PpsimError

try:
    import simpy
    from simpy.core import NORMAL
except ImportError:  # an extra: the lean kernels need no SimPy
    raise PpsimError("the simpy kernel needs SimPy: pip install 'ppsim[reference]' (or choose another kernel: the "
                     "same trace)", field="simulator.kernel") from None


class Arrival(simpy.Event):
    """An event that succeeds ``delay`` after it is told to: a message's arrival, known only once
    its transfer is under way. It sets itself up as SimPy's own Timeout does, later than created."""

    def succeed_after(self, delay: float) -> None:
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, max(0.0, delay))


class SimPyKernel(simpy.Environment):
    """SimPy's environment with the lean kernels' ``fire_at`` and ``call_later``."""

    def event(self) -> Arrival:  # SimPy's own event, able to be fired later too
        """An event to fire later with :meth:`fire_at` (or to ``succeed()`` now)."""
        return Arrival(self)

    @staticmethod
    def fire_at(event: Arrival, delay: float) -> None:
        event.succeed_after(delay)

    def call_later(self, delay: float, call: Callable[[], object]) -> None:
        """Call ``call`` ``delay`` from now: a timeout's callback."""
        self.timeout(delay).callbacks.append(partial(_call, call))


def _call(call: Callable[[], object], _event: simpy.Event) -> None:
    call()
