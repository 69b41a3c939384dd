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
from typing import Any, Protocol, get_args

from ppsim.errors import PpsimError
from ppsim.inputs.choices import KernelChoice

KERNELS: tuple[str, ...] = get_args(KernelChoice)  #: the kernels' names


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


def make_kernel(name: KernelChoice | str, fabric: bool) -> Kernel:
    """The kernel called ``name`` (:data:`~ppsim.inputs.choices.KernelChoice`) for a run with or
    without a fabric (which needs a clock)."""
    if name not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, not {name!r}")
    if name == "immediate" and fabric:
        raise PpsimError("the immediate kernel has no clock: a fabric's flows need kernel clocked or simpy",
                         field="simulator.kernel")
    if name == "simpy":
        from ppsim.sim.simpy_kernel import SimPyKernel  # the reference, an extra: loaded only when asked for

        return SimPyKernel()
    from ppsim.sim.clocked import ClockedKernel
    from ppsim.sim.immediate import ImmediateKernel

    return ClockedKernel() if name == "clocked" or fabric else ImmediateKernel()
