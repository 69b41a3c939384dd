"""Memory in bytes as a rank's actions allocate and free it (:mod:`ppsim.plan.held`, priced with
the stages' activation bytes), plus what each rank holds all step: one table for the simulator
and for the exact peak that needs no simulation (:func:`peak_memory_bytes`).
"""

from __future__ import annotations

from ppsim.costs.table import CostTable
from ppsim.plan import Kind, Plan
from ppsim.plan.held import held_deltas, peak_held, trains
from ppsim.trace.meta import StaticMemory


def memory_deltas(plan: Plan, costs: CostTable) -> dict[tuple[int, Kind], tuple[int, int]]:
    """(bytes allocated at its start, bytes freed at its end, negative) of each (stage, kind) that computes."""
    return held_deltas(plan, [c.activation_bytes for c in costs.stages],
                       [c.weight_grad_pending_bytes for c in costs.stages], costs.input_grad_frees)


def static_memory_bytes(plan: Plan, costs: CostTable) -> list[StaticMemory] | None:
    """Per rank, what its stages hold all step (weights, gradients, optimizer, buffers, total)."""
    memory = [c.memory for c in costs.stages if c.memory is not None]
    if len(memory) < len(costs.stages):
        return None
    keeps = trains(plan)  # a forward-only plan holds no gradients and no optimizer state
    out = []
    for r in range(plan.num_ranks):
        mine = [m if keeps else m.forward_only() for m in (memory[s] for s in plan.stages_of_rank(r))]
        weights, gradients = sum(m.weights for m in mine), sum(m.gradients for m in mine)
        optimizer, buffers = sum(m.optimizer for m in mine), sum(m.buffers for m in mine)
        out.append(StaticMemory(weights=weights, gradients=gradients, optimizer=optimizer, buffers=buffers,
                                total=weights + gradients + optimizer + buffers))
    return out


def peak_memory_bytes(plan: Plan, costs: CostTable) -> list[float]:
    """Each rank's peak memory (static + activations held), exactly as the simulation would find it."""
    static = static_memory_bytes(plan, costs)
    held = peak_held(plan, [c.activation_bytes for c in costs.stages],
                     [c.weight_grad_pending_bytes for c in costs.stages], costs.input_grad_frees,
                     costs.overlap_layerwise)
    return [float(h + (static[r]["total"] if static else 0)) for r, h in enumerate(held)]
