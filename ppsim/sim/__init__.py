"""The discrete-event simulator (SimPy)."""

from ppsim.sim.engine import CommSemantics, simulate

__all__ = ["CommSemantics", "simulate"]
