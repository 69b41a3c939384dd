"""What runs the ranks' processes: the part of SimPy's interface the engine uses, declared once, and
the choice among the three kernels that offer it.

- :class:`~ppsim.sim.immediate.ImmediateKernel`: no clock (static links: every wait depends on data
  only); a process may also park (yield None) until :meth:`resume` hands it back.
- :class:`~ppsim.sim.clocked.ClockedKernel`: SimPy's order of events, lean (a fabric's flows).
- :class:`~ppsim.sim.simpy_kernel.SimPyKernel`: SimPy itself, the reference the two are checked
  against (an extra: ``pip install 'ppsim[reference]'``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from enum import Enum
from typing import Any, Protocol


class KernelName(str, Enum):
    """Which kernel runs a step (``simulate(..., kernel=...)``)."""

    AUTO = "auto"  #: the clock-free kernel on static links, the clocked one on a fabric
    SIMPY = "simpy"
    CLOCKED = "clocked"
    IMMEDIATE = "immediate"


class Kernel(Protocol):
    """A kernel: processes are generators that yield the events they wait for."""

    @property
    def now(self) -> float:
        """The kernel's clock (the clock-free kernel's stays 0)."""

    def event(self) -> Any:
        """An event to fire later with :meth:`fire_at` (or, on a kernel with a clock, ``succeed()``)."""

    def fire_at(self, event: Any, delay: float) -> None:
        """Process ``event`` ``delay`` from now: whoever waits on it goes on."""

    def process(self, generator: Generator[Any, Any, None]) -> Any:
        """Start a process."""

    def run(self) -> None:
        """Run until no process can go on."""


class ClockKernel(Kernel, Protocol):
    """A kernel with a clock, which a fabric's flows need: it also waits out delays."""

    def timeout(self, delay: float) -> Any:
        """An event processed ``delay`` from now."""

    def call_later(self, delay: float, call: Callable[[], object]) -> None:
        """Call ``call`` ``delay`` from now, in the events' order."""


def make_kernel(name: KernelName | str, fabric: bool) -> Kernel:
    """The kernel called ``name`` for a run with or without a fabric (which needs a clock)."""
    try:
        kind = KernelName(name)
    except ValueError:
        raise ValueError(f"kernel must be one of {', '.join(k.value for k in KernelName)}, not {name!r}") from None
    if kind is KernelName.IMMEDIATE and fabric:
        raise ValueError("the immediate kernel has no clock: a fabric's flows need kernel='clocked' or 'simpy'")
    if kind is KernelName.SIMPY:
        from ppsim.sim.simpy_kernel import SimPyKernel  # the reference, an extra: loaded only when asked for

        return SimPyKernel()
    from ppsim.sim.clocked import ClockedKernel
    from ppsim.sim.immediate import ImmediateKernel

    return ClockedKernel() if kind is KernelName.CLOCKED or fabric else ImmediateKernel()
