"""Scenario -> costs -> Plan -> simulate -> Trace: the one path every command takes to a prediction.

:func:`build` makes the compute-only plan and the costs it runs on (:class:`Built`); for every
schedule but ``auto`` they are the scenario's schedule and costs. ``auto`` searches
(:mod:`ppsim.prediction.auto`) and may pick a schedule of several chunks, whose costs are laid out
over its own virtual stages: so everything downstream — lowering, simulation, ppexec's partition —
takes the plan and its costs together from one Built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppsim.costs import Workload, build_workload
from ppsim.costs.links import exchange_link_given
from ppsim.costs.moe import ExpertShard
from ppsim.inputs.hardware import get_device
from ppsim.inputs.scenario import Scenario
from ppsim.plan import Plan, lower, schedules
from ppsim.prediction.alltoall import alltoall_intervals
from ppsim.sim import compute_ms, simulate
from ppsim.sim.durations import alltoall_ms
from ppsim.trace import Trace, TraceMeta

if TYPE_CHECKING:  # pragma: no cover - a profile's reader is imported where a profile is read
    from ppsim.inputs.profile import Profile


@dataclass(frozen=True)
class Prediction:
    scenario: Scenario
    plan: Plan  #: lowered
    workload: Workload
    trace: Trace


@dataclass(frozen=True)
class Built:
    """A compute-only plan and what it runs on: the scenario that describes it (the scenario
    itself, or, when ``auto`` picked a schedule of several chunks, the scenario with that schedule
    and chunks) and that scenario's costs."""

    scenario: Scenario
    plan: Plan
    workload: Workload


def build(s: Scenario, profile: Profile | None = None, workload: Workload | None = None) -> Built:
    """The scenario's compute-only plan and its costs (``workload``: the scenario's, when the
    caller has them already); ``auto`` searches on them. The scenario stays as given (a mixture of
    experts' costs take the routing ``profile`` measured where it gives none: :func:`build_workload`)."""
    w = workload or scenario_workload(s, profile)
    if s.pipeline.schedule == schedules.SEARCHED:
        from ppsim.prediction.auto import auto_build

        return auto_build(s, w, profile)
    info = schedules.get(s.pipeline.schedule)
    return Built(s, info.build(s.pipeline.stages, s.microbatches, s.pipeline.chunks), w)


def stage_to_rank(s: Scenario) -> tuple[int, ...]:
    """Which rank runs each virtual stage under the scenario's schedule (its sizes checked)."""
    info = schedules.describe(s.pipeline.schedule)
    info.check(s.pipeline.stages, s.microbatches, s.pipeline.chunks)
    return info.stage_to_rank(s.pipeline.stages, s.pipeline.chunks)


def scenario_workload(s: Scenario, profile: Profile | None = None) -> Workload:
    """The scenario's costs for its schedule's placement of the virtual stages and its copies of the
    model (and, from a profile, its way of running backwards: split in I and W by every zero-bubble
    and V schedule but DualPipe(V), which runs whole ones too)."""
    info = schedules.describe(s.pipeline.schedule)
    return build_workload(s, profile, stage_to_rank(s), split_backward=info.splits_backward and not info.overlaps,
                          pipes=info.pipes)


def lower_built(b: Built) -> Plan:
    """The built plan with sends, receives and the end-of-step actions. Messages are placed by the
    ideal timeline of its own costs and ordered for the scenario's send semantics."""
    s = b.scenario
    return lower(b.plan, s.weight_replicas, compute_ms(b.workload.costs), rendezvous=s.pipeline.comm == "rendezvous",
                 clip=s.training.grad_clip > 0)


def workload_meta(s: Scenario, w: Workload, training: bool) -> TraceMeta:
    """Trace metadata the metrics read (what a step does, on how many devices); ``fp8`` only when on."""
    device = get_device(s.hardware.device, s.hardware.device_file)
    meta: TraceMeta = {
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
        "num_devices": s.devices,
        "tensor_parallel": s.tensor_parallel,
        "partition": w.partition,
        "costs_from": w.costs_from,
        "costs_source": w.costs_source,
        "device_memory_bytes": device.memory_gb * 2**30,
        "recompute": s.training.recompute,
        "zero_stage": s.training.zero_stage,
    }
    if (even := w.balance()) is not None:
        meta["partition_balance"] = {
            "slowest": even.slowest, "slowest_share": even.slowest_share, "holds": even.holds,
            "layer_share": even.layer_share, "best_share": even.best_share,
            "moved": None if even.moved is None else {"stage": even.moved[0], "share": even.moved[1]}}
    if s.training.recompute_layers is not None:
        meta["recompute_layers"] = s.training.recompute_layers
    if s.training.fp8:
        meta["fp8"] = s.training.fp8
    if s.training.fp4:
        meta["fp4"] = s.training.fp4
    if s.context_parallel > 1:
        meta["context_parallel"] = s.context_parallel
    if s.model is not None and s.model.moe is not None and s.expert_parallel > 1:
        meta["expert_parallel"] = s.expert_parallel
        meta["routing_skew"] = ExpertShard.of(s.model, s.expert_parallel, s.expert_tensor).skew
        if s.training.moe_dispatcher != "alltoall":
            rate = device.dispatch_rate(s.training.moe_dispatcher)
            meta["moe_dispatcher"] = s.training.moe_dispatcher
            meta["moe_dispatch_share"] = rate.nvlink if rate else None
            if rate and not exchange_link_given(s):  # a share of the datasheet's link, whatever the collectives' rate
                meta["moe_dispatch_gb_s"] = rate.nvlink * device.intra_node_gb_s
    if w.costs.overlap_sm_share and s.training.moe_comm_sms is not None:
        meta["moe_comm_sms"] = s.training.moe_comm_sms
        meta["overlap_sm_share"] = w.costs.overlap_sm_share
    return meta


def predict(s: Scenario, profile: Profile | None = None, workload: Workload | None = None,
            built: Built | None = None, placements: bool = True) -> Prediction:
    """Simulate one training step of the scenario (with measured costs when a profile is given;
    ``workload``: the scenario's costs, ``built``: its plan and costs, when the caller has them;
    ``placements``: record where the experts' all-to-alls fall, for the timelines; a caller that
    reads only the figures, the tuner, leaves it)."""
    given, unmeasured = s, False
    if profile is not None:  # a profile's reader (pydantic models) imported only where one is used
        from ppsim.costs.profiled import unmeasured_routing, with_profiled_routing

        s, unmeasured = with_profiled_routing(s, profile), unmeasured_routing(s, profile)
    b = built or build(s, profile, workload)
    plan = lower_built(b)
    trace = simulate(plan, b.workload.costs, s.pipeline.comm, kernel=s.simulator.kernel)
    trace.meta.update(workload_meta(s, b.workload, schedules.describe(s.pipeline.schedule).training))
    if s is not given:
        trace.meta["routing_from_profile"] = True
    elif unmeasured:
        trace.meta["routing_unmeasured"] = True
    costs = b.workload.costs
    if any(c.forward_overlap_ms or c.backward_overlap_ms for c in costs.stages):  # the experts' all-to-alls
        trace.meta["alltoall_ms"] = [alltoall_ms(costs, rank) for rank in b.plan.actions]
        if placements:
            trace.meta["alltoall_spans"] = [[[round(t0, 6), round(t1, 6)] for t0, t1 in r]
                                            for r in alltoall_intervals(trace, costs)]
    return Prediction(scenario=s, plan=plan, workload=b.workload, trace=trace)
