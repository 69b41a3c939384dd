"""The discrete-event simulator: executes a lowered Plan against a CostTable and returns a Trace, in
SimPy's event order (SimPy itself, an extra, is the reference kernel the lean ones are tested against).

Imports plan, costs, trace and inputs (the words a scenario chooses from); knows no schedule names.
"""

from ppsim.sim.allocation import peak_memory_bytes
from ppsim.sim.durations import compute_ms
from ppsim.sim.engine import CommSemantics, simulate

__all__ = ["CommSemantics", "compute_ms", "peak_memory_bytes", "simulate"]
