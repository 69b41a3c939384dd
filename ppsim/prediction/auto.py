"""Schedule ``auto``: the fastest plan that fits each rank's memory, found by simulating.

Two families compete:

- plans of one stage per rank on the scenario's own costs: the hand-written ones and the orders
  the search makes (:func:`ppsim.plan.order_search.candidates.candidates`: the list scheduler,
  the zero-bubble authors' greedy, the local search, ranked by their own timeline); the
  hand-written ones and the best :data:`SHORTLIST` of the others are simulated;
- every hand-written schedule of several chunks per rank (interleaved, V-shaped, DualPipeV), each
  on its own layout of the model over its virtual stages (a partition the scenario lists for one
  chunk per rank is balanced again), where its sizes allow.

A plan competes only if it fits: its activations within ``pipeline.memory_budget`` micro-batches
per rank (when given) and its peak within the device's memory (when the costs know bytes). The
fastest simulated step wins; ``plan.meta["search"]`` records it, the runners-up, and for a plan of
one stage per rank a bound no such plan can beat (and, where the exact search finished, the
shortest timeline any such plan has).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppsim.costs import CostTable, Workload
from ppsim.errors import PpsimError, ScheduleError
from ppsim.inputs.hardware import get_device
from ppsim.inputs.scenario import Scenario
from ppsim.plan import COMPUTE_KINDS, Plan, schedules
from ppsim.plan.held import peak_held
from ppsim.plan.order_search.bound import lower_bound
from ppsim.plan.order_search.candidates import candidates
from ppsim.plan.order_search.timeline import Timing
from ppsim.prediction.path import Built, lower_built, scenario_workload
from ppsim.sim import peak_memory_bytes, simulate
from ppsim.trace import SearchRecord
from ppsim.trace.metrics import step_bounds

if TYPE_CHECKING:  # pragma: no cover - a profile's reader is imported where a profile is read
    from ppsim.inputs.profile import Profile

#: how many of the list scheduler's best orders the simulator runs (besides every hand-written one)
SHORTLIST = 6


@dataclass(frozen=True)
class Timed:
    """A simulated candidate: how it was made, its step and when its last pass ends."""

    how: str
    built: Built
    step_ms: float
    passes_ms: float
    hand_written: bool


def auto_build(s: Scenario, workload: Workload, profile: Profile | None = None, *,
               several_chunks: bool = True) -> Built:
    """The fastest plan that fits (see the module docstring), as a plan of schedule ``auto``;
    without ``several_chunks``, the fastest of one stage per rank."""
    info = schedules.describe(s.pipeline.schedule)
    p, m = s.pipeline.stages, s.microbatches
    info.check(p, m, s.pipeline.chunks)
    timing, budget = auto_inputs(s, workload.costs)
    found = candidates(p, m, timing, budget)
    shortlist = [c for c in found if c.hand_written] + [c for c in found if not c.hand_written][:SHORTLIST]
    timed = [_simulate(c.how, Built(s, c.plan, workload), c.hand_written) for c in shortlist]
    if several_chunks:
        timed += [t for t in (_several_chunks(s, name, profile) for name in _chunked_schedules(p, m)) if t is not None]
    best = min(timed, key=lambda t: (t.step_ms, not t.hand_written))
    won = best.built.plan
    search: SearchRecord = {"chosen": best.how, "step_ms": best.step_ms,
                            "considered": len(found) + len(timed) - len(shortlist),
                            "simulated": {t.how: t.step_ms for t in timed}, "passes_ms": best.passes_ms}
    if won.chunks == 1:  # the bound holds for plans of one stage per rank
        search["bound_ms"] = lower_bound(p, m, timing, budget)
        shortest = [c.makespan for c in found if c.proven]
        if shortest:  # the exact search (or the bound itself) proved no order's timeline is shorter
            search["shortest_ms"] = shortest[0]
    # the winner's own actions and placement: built by a schedule or not, as the winner was
    plan = Plan(schedule=schedules.SEARCHED, num_ranks=won.num_ranks, num_microbatches=won.num_microbatches,
                chunks=won.chunks, stage_to_rank=won.stage_to_rank, actions=won.actions, pipes=won.pipes,
                meta={"search": search}, built=won.built)
    return Built(best.built.scenario, plan, best.built.workload)


def _simulate(how: str, b: Built, hand_written: bool) -> Timed:
    trace = simulate(lower_built(b), b.workload.costs, b.scenario.pipeline.comm)
    start, end = step_bounds(trace)
    passes = max(sp.end for sp in trace.spans if sp.action.kind in COMPUTE_KINDS) - start
    return Timed(how, b, end - start, passes, hand_written)


def _chunked_schedules(p: int, m: int) -> list[str]:
    """The hand-written training schedules of several chunks that run p ranks and m micro-batches on
    one copy of the model (DualPipe's second copy is a choice of the model's layout, which ``tune``
    weighs, and no runtime builds it)."""
    out = []
    for name, info in schedules.SCHEDULES.items():
        v = info.chunks.default
        if not info.training or v == 1 or info.pipes > 1:  # plans of one copy of the model, as the runtimes run
            continue
        try:
            info.check(p, m, v)
        except ScheduleError:
            continue
        out.append(name)
    return out


def _several_chunks(s: Scenario, name: str, profile: Profile | None) -> Timed | None:
    """Schedule ``name`` on its default chunks, simulated on its own costs, if it fits (else None)."""
    info = schedules.get(name)
    try:
        s2 = s.with_overrides(schedule=name, chunks=info.chunks.default)
        w = scenario_workload(s2, profile)
    except PpsimError:  # e.g. fewer blocks than virtual stages
        return None
    plan = info.build(s2.pipeline.stages, s2.microbatches, s2.pipeline.chunks)
    if not _fits(s, plan, w.costs):
        return None
    return _simulate(name, Built(s2, plan, w), hand_written=True)


def _fits(s: Scenario, plan: Plan, costs: CostTable) -> bool:
    """Whether ``plan`` keeps each rank within ``pipeline.memory_budget`` micro-batches (of the
    rank's whole share) and within the device's memory (when the costs know bytes)."""
    cap = s.pipeline.memory_budget
    if cap is not None:
        share = [0.0] * len(costs.stages)
        for r in range(plan.num_ranks):
            mine = plan.stages_of_rank(r)
            total = sum(costs.stages[k].activation_bytes for k in mine)
            for k in mine:
                share[k] = costs.stages[k].activation_bytes / total if total else 1 / len(mine)
        if max(peak_held(plan, share, None, costs.input_grad_frees, costs.overlap_layerwise)) > cap + 1e-9:
            return False
    if all(c.memory is not None for c in costs.stages):
        device = get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30
        return max(peak_memory_bytes(plan, costs)) <= device
    return True


def auto_inputs(s: Scenario, costs: CostTable) -> tuple[Timing, list[float]]:
    """The stage costs as the search of one stage per rank reads them, and each rank's activation
    budget in the same units: bytes when the costs know them (what the device holds beyond the
    stage's model states, at most ``pipeline.memory_budget`` micro-batches), else micro-batches."""
    stages = costs.stages
    n = len(stages)
    by_bytes = all(c.activation_bytes > 0 for c in stages)
    timing = Timing(
        forward=[c.forward_ms for c in stages], backward=[c.backward_ms for c in stages],
        input_grad=[c.input_grad_ms for c in stages], weight_grad=[c.weight_grad_ms for c in stages],
        latency=[costs.p2p_ms(b) for b in range(max(1, n - 1))],
        # a split backward's gradients counted as held from the forward on (the search's orders
        # split every backward): an upper bound that keeps its orders within the device
        activation=[float(c.activation_bytes + c.weight_grad_pending_bytes) if by_bytes else 1.0 for c in stages])
    cap = s.pipeline.memory_budget
    budget = []
    device = get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30
    for c, unit in zip(stages, timing.activation, strict=True):
        allowed = float(s.microbatches) * unit if cap is None else cap * unit
        if by_bytes and c.memory is not None:
            allowed = min(allowed, device - c.memory.total)
        budget.append(allowed)
    return timing, budget
