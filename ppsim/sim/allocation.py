"""Activation memory as a rank's actions allocate and free it: one table for the simulator and for
the exact peak that needs no simulation.

A forward allocates its micro-batch's activations of its stage; the backward frees them (or, when
the backward is split, the weight-grad half does). An overlapped forward and backward allocates
the forward's at its start and frees the backward's at its end. A rank runs its actions one at a time in plan
order, so its held bytes after each action — and so its peak — depend on that order alone, not on
when the actions run: :func:`peak_memory_bytes` is the simulated peak, without simulating.
"""

from __future__ import annotations

from ppsim.costs.table import CostTable
from ppsim.plan import Kind, Plan


def memory_deltas(plan: Plan, costs: CostTable) -> dict[tuple[int, Kind], tuple[int, int]]:
    """(bytes allocated at its start, bytes freed at its end, negative) of each (stage, kind) that computes."""
    split = {a.stage for r in plan.actions for a in r if a.kind is Kind.W}  # (a W is never inside an overlap)
    out: dict[tuple[int, Kind], tuple[int, int]] = {}
    for st, c in enumerate(costs.stages):
        held = c.activation_bytes
        out[(st, Kind.F)] = (held, 0)
        out[(st, Kind.B)] = (0, -held)
        out[(st, Kind.I)] = (0, 0 if st in split else -held)
        out[(st, Kind.W)] = (0, -held)
        out[(st, Kind.OPT)] = (0, 0)
    return out


def static_memory_bytes(plan: Plan, costs: CostTable) -> list[dict[str, int]] | None:
    """Per rank, what its stages hold all step (weights, gradients, optimizer, buffers, total)."""
    if not all(c.memory is not None for c in costs.stages):
        return None
    out = []
    for r in range(plan.num_ranks):
        mine = [costs.stages[s].memory for s in plan.stages_of_rank(r)]
        parts = {k: sum(getattr(m, k) for m in mine) for k in ("weights", "gradients", "optimizer", "buffers")}
        parts["total"] = sum(parts.values())
        out.append(parts)
    return out


def peak_memory_bytes(plan: Plan, costs: CostTable) -> list[float]:
    """Each rank's peak memory (static + activations held), exactly as the simulation would find it."""
    deltas = memory_deltas(plan, costs)
    static = static_memory_bytes(plan, costs)
    peaks = []
    for r, actions in enumerate(plan.actions):
        held = peak = 0
        for a in actions:
            if a.kind is Kind.OVERLAP_F_B:  # the forward's activations at its start, the backward's freed at its end
                f, b = a.parts
                op = (deltas[(f.stage, f.kind)][0], deltas[(b.stage, b.kind)][1])
            else:
                op = deltas.get((a.stage, a.kind))  # type: ignore[assignment]
                if op is None:
                    continue
            held += op[0]
            peak = max(peak, held)
            held += op[1]
        peaks.append(float(peak + (static[r]["total"] if static else 0)))
    return peaks
