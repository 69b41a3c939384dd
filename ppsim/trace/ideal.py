"""The bubble a trace's own order would have with communication free: every rank's compute
actions in the order it ran them, each taking the time it took, each as soon as its rank is free
and its inputs exist (:func:`~ppsim.plan.deps.ideal_times`). Beside the real bubble it says how much
of the idle time the order and the compute set (the schedule's own bubble, a slow stage) and how
much the messages and collectives add. From the trace alone: a prediction and a measured run alike.
"""

from __future__ import annotations

from ppsim.errors import PlanError
from ppsim.plan import Action, Overlap, Plan
from ppsim.plan.action import COMPUTE_KINDS
from ppsim.plan.deps import ideal_times
from ppsim.trace.trace import Trace


def ideal_bubble_fraction(trace: Trace) -> float | None:
    """Idle over total of the trace's compute with communication free (None when the trace does
    not say where its stages run, or its actions do not form a plan: a partial measurement)."""
    meta = trace.meta
    where = meta.get("stage_to_rank")
    if not where:
        return None
    orders: list[list[tuple[float, Action | Overlap]]] = [[] for _ in range(trace.num_ranks)]
    took: dict[Action | Overlap, float] = {}
    for s in trace.spans:
        if s.lane == "compute" and s.action.kind in COMPUTE_KINDS and s.action not in took:
            orders[s.rank].append((s.start, s.action))
            took[s.action] = s.end - s.start
    if not took:
        return None
    try:
        plan = Plan(schedule=str(meta.get("schedule", "trace")), num_ranks=len(orders),
                    num_microbatches=int(meta.get("num_microbatches", 1)), chunks=int(meta.get("chunks", 1)),
                    stage_to_rank=tuple(where), pipes=int(meta.get("pipes", 1)),
                    actions=tuple(tuple(a for _, a in sorted(o, key=lambda x: x[0])) for o in orders))  # type: ignore[misc]  # Overlaps stand in for Actions
        _, ends = ideal_times(plan, lambda a: took[a])
    except (PlanError, KeyError):
        return None
    makespan = max((e[-1][0] for e in ends if e), default=0.0)
    if makespan <= 0:
        return None
    return max(0.0, 1.0 - sum(took.values()) / (len(orders) * makespan))
