"""Scenario -> Plan -> simulate -> Trace: the one path every command takes to a prediction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppsim.costs import CostTable, Workload, build_workload
from ppsim.inputs.hardware import get_device
from ppsim.inputs.profile import Profile
from ppsim.inputs.scenario import Scenario
from ppsim.plan import COMPUTE_KINDS, Plan, lower, schedules
from ppsim.plan.schedules.list_scheduler import Timing
from ppsim.sim import compute_ms, simulate
from ppsim.trace import Trace


@dataclass(frozen=True)
class Prediction:
    scenario: Scenario
    plan: Plan  #: lowered
    workload: Workload
    trace: Trace


def compute_plan(s: Scenario, workload: Workload | None = None) -> Plan:
    """The schedule's compute-only plan for the scenario's stages, micro-batches and chunks (a
    schedule that searches on the costs, ``auto``, gets the scenario's, or ``workload``)."""
    info = schedules.get(s.pipeline.schedule)
    if info.needs_costs:
        return auto_plan(s, workload or scenario_workload(s))
    return info.build(s.pipeline.stages, s.microbatches, s.pipeline.chunks)


#: how many of auto's own best candidates the simulator runs (besides every hand-written one)
AUTO_SHORTLIST = 6


def auto_plan(s: Scenario, workload: Workload) -> Plan:
    """Schedule ``auto``: of the candidates :func:`ppsim.plan.schedules.auto.candidates` makes on
    the stage costs under each rank's activation budget, simulate the hand-written ones and the
    best few of the rest, and keep the fastest (``meta["search"]`` says which and what it beat)."""
    from ppsim.plan.schedules import auto

    info = schedules.get(s.pipeline.schedule)
    info.check(s.pipeline.stages, s.microbatches, s.pipeline.chunks)
    costs = workload.costs
    timing, budget = auto_inputs(s, costs)
    found = auto.candidates(s.pipeline.stages, s.microbatches, timing, budget)
    shortlist = [c for c in found if c.hand_written] + [c for c in found if not c.hand_written][:AUTO_SHORTLIST]
    timed = []
    for c in shortlist:
        lowered = lower(c.plan, s.data_parallel, compute_ms(costs), rendezvous=s.pipeline.comm == "rendezvous",
                        clip=s.training.grad_clip > 0)
        trace = simulate(lowered, costs, s.pipeline.comm)
        start = min(sp.start for sp in trace.spans)
        passes_end = max(sp.end for sp in trace.spans if sp.action.kind in COMPUTE_KINDS) - start
        timed.append((max(sp.end for sp in trace.spans) - start, passes_end, c))
    step_ms, passes_ms, best = min(timed, key=lambda x: (x[0], not x[2].hand_written))
    plan = Plan(schedule=auto.NAME, num_ranks=best.plan.num_ranks, num_microbatches=best.plan.num_microbatches,
                chunks=1, stage_to_rank=best.plan.stage_to_rank, actions=best.plan.actions)
    plan.meta["search"] = {"chosen": best.how, "step_ms": step_ms, "considered": len(found),
                           "simulated": {c.how: t for t, _, c in timed},
                           # the passes' end against a time no plan's passes can beat on these costs
                           "passes_ms": passes_ms,
                           "bound_ms": auto.lower_bound(s.pipeline.stages, s.microbatches, timing, budget)}
    return plan


def auto_inputs(s: Scenario, costs: CostTable) -> tuple[Timing, list[float]]:
    """The stage costs as auto's search reads them, and each rank's activation budget in the same
    units: bytes when the costs know them (what the device holds beyond the stage's model states,
    at most ``pipeline.memory_budget`` micro-batches), else micro-batches."""
    from ppsim.inputs.hardware import get_device
    from ppsim.plan.schedules.list_scheduler import Timing

    stages = costs.stages
    n = len(stages)
    by_bytes = all(c.activation_bytes > 0 for c in stages)
    timing = Timing(
        forward=[c.forward_ms for c in stages], backward=[c.backward_ms for c in stages],
        input_grad=[c.input_grad_ms for c in stages], weight_grad=[c.weight_grad_ms for c in stages],
        latency=[costs.p2p_ms(b) for b in range(max(1, n - 1))],
        activation=[float(c.activation_bytes) if by_bytes else 1.0 for c in stages])
    cap = s.pipeline.memory_budget
    budget = []
    device = get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30
    for c, unit in zip(stages, timing.activation, strict=True):
        allowed = float(s.microbatches) * unit if cap is None else cap * unit
        if by_bytes and c.memory is not None:
            allowed = min(allowed, device - c.memory.total)
        budget.append(allowed)
    return timing, budget


def stage_to_rank(s: Scenario) -> tuple[int, ...]:
    """Which rank runs each virtual stage under the scenario's schedule (its sizes checked)."""
    info = schedules.get(s.pipeline.schedule)
    info.check(s.pipeline.stages, s.microbatches, s.pipeline.chunks)
    return info.stage_to_rank(s.pipeline.stages, s.pipeline.chunks)


def scenario_workload(s: Scenario, profile: Profile | None = None) -> Workload:
    """The scenario's costs for its schedule's placement of the virtual stages."""
    return build_workload(s, profile, stage_to_rank(s))


def lowered_plan(s: Scenario, workload: Workload | None = None) -> Plan:
    """The plan with sends, receives and the end-of-step actions, validated. Messages are placed
    by the ideal timeline of the scenario's own costs and ordered for its send semantics."""
    w = workload or scenario_workload(s)
    return lower(compute_plan(s, w), s.data_parallel, compute_ms(w.costs), rendezvous=s.pipeline.comm == "rendezvous",
                 clip=s.training.grad_clip > 0)


def workload_meta(s: Scenario, w: Workload, training: bool, profile: Profile | None = None) -> dict[str, Any]:
    """Trace metadata the metrics read (what a step does, on how many devices)."""
    return {
        "scenario": s.name,
        "device": s.hardware.device,
        "dtype": s.model.dtype if s.model else None,
        "data_parallel": s.data_parallel,
        "micro_batch": s.training.micro_batch,
        "global_batch": s.global_batch,
        "seq_len": s.model.seq_len if s.model else None,
        "samples_per_step": w.samples_per_step,
        "tokens_per_step": w.tokens_per_step,
        "model_flops_per_step": w.model_flops_per_step if training else w.forward_flops_per_step,
        "peak_flops_per_device": w.peak_flops_per_device,
        "num_devices": s.pipeline.stages * s.data_parallel * s.tensor_parallel,
        "tensor_parallel": s.tensor_parallel,
        "partition": w.partition,
        "costs_from": "explicit" if s.costs is not None else "profile" if profile is not None else "model",
        "device_memory_bytes": get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30,
        "recompute": s.training.recompute,
        "zero_stage": s.training.zero_stage,
    }


def predict(s: Scenario, profile: Profile | None = None, workload: Workload | None = None) -> Prediction:
    """Simulate one training step of the scenario (with measured costs when a profile is given;
    ``workload``: the scenario's costs when the caller has built them already)."""
    workload = workload or scenario_workload(s, profile)
    plan = lowered_plan(s, workload)
    trace = simulate(plan, workload.costs, s.pipeline.comm)
    trace.meta.update(workload_meta(s, workload, schedules.get(s.pipeline.schedule).training, profile))
    return Prediction(scenario=s, plan=plan, workload=workload, trace=trace)
