"""A run's results: what its ranks recorded, as measured ppsim Traces (the same format, metrics and
exports as a prediction), and the run folder's outputs.

``execute`` runs a scenario (``ppexec.launch``: prepare it, start its ranks, watch them) and
collects it; ``collect`` reads a run folder any launcher ran (``ppexec collect``);
``write_run_outputs`` writes each step's trace, the median step's trace, its Chrome trace, the
summary and the plan into the run folder.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ppexec.launch.cluster import run_deepspeed
from ppexec.launch.local import run_local
from ppexec.launch.prepare import RunOptions, check_environment, check_fits, deadline_s, prepare_run
from ppexec.launch.pulse import hang_limit_s
from ppexec.worker.events import RankState, events_path, exchanges, read_events
from ppexec.worker.run_spec import RunSpec
from ppsim.api import (
    COMM_KINDS,
    Action,
    Counter,
    Plan,
    Profile,
    Scenario,
    Span,
    Summary,
    Trace,
    TraceMeta,
    measured_skew,
    peer_stage,
    plan_meta,
    summarize,
)
from ppsim.errors import PpsimError


@dataclass
class RunResult:
    """A run, collected: its traces, losses and summary, and what its ranks' events said."""

    runtime: str
    plan: Plan
    traces: list[Trace]  #: one per recorded step (replica 0)
    losses: list[float | None]  #: None where no rank recorded the step's loss
    representative: Trace  #: the step with the median step time
    summary: Summary
    states: list[RankState]


def clock_offsets(states: list[RankState]) -> tuple[dict[int, int], str]:
    """ns to subtract from each rank's clock. Ranks of one host share CLOCK_MONOTONIC; across hosts
    the clocks are aligned on the barrier every rank passed just before its ``ready`` event."""
    hosts = {st.ready.host for st in states if st.ready}
    if len(hosts) <= 1:
        return {st.rank: 0 for st in states}, "CLOCK_MONOTONIC, one host"
    ref = states[0].ready.clock_ns if states[0].ready else 0
    return {st.rank: (st.ready.clock_ns - ref) if st.ready else 0 for st in states}, "aligned at a barrier across hosts"


def step_trace(states: list[RankState], plan: Plan, step: int, meta: TraceMeta, message_bytes: int,
               comm: str, replica: int = 0) -> Trace:
    """The measured Trace of recorded step ``step`` of data-parallel replica ``replica``."""
    offsets, clock = clock_offsets(states)
    # the trace shows one device per pipeline rank: tensor-parallel rank 0 of the replica
    shown = sorted(((st.ready.pipe_rank, st) for st in states
                    if st.ready and st.ready.replica == replica and st.ready.tp_rank == 0), key=lambda x: x[0])
    raw: list[tuple[int, Action, int, int]] = []
    for pipe_rank, st in shown:
        for text, t0, t1 in st.steps[step].spans:
            raw.append((pipe_rank, Action.parse(text), t0 - offsets[st.rank], t1 - offsets[st.rank]))
    origin = min(t0 for _, _, t0, _ in raw)
    where = plan.stage_to_rank
    spans = []
    for rank, a, t0, t1 in raw:
        message = a.kind in COMM_KINDS
        peer = where[peer_stage(a)] if message else None
        spans.append(Span(rank, a.lane, a, (t0 - origin) / 1e6, (t1 - origin) / 1e6,
                          message_bytes if message else None, peer))
    counters = []
    for pipe_rank, st in shown:
        points = tuple(((t - offsets[st.rank] - origin) / 1e6, float(b)) for t, b in st.steps[step].memory)
        if points:
            counters.append(Counter(pipe_rank, "memory_bytes", "bytes", points))
    records = [st.steps[step] for _, st in shown]
    sources = {r.memory_source for r in records} - {None}
    losses = [r.loss for r in records if r.loss is not None]
    forwards: dict[str, int] = {}
    for r in records:  # how often the blocks and their attention cores ran, recomputation included
        for name, n in r.forwards.items():
            forwards[name] = forwards.get(name, 0) + n
    full_meta: TraceMeta = {**meta, **plan_meta(plan, source="measured", clock=clock, comm=comm,
                                                 message_bytes=message_bytes)}
    full_meta.update({
        "step": step,
        "loss": losses[0] if losses else None,
        # "rss": a CPU process's resident memory (interpreter and libraries included), "allocator":
        # the device allocator's bytes in use, which is what ppsim predicts
        "memory_measured": sources.pop() if len(sources) == 1 else None,
        "forward_calls": forwards or None,
    })
    alltoall = [alltoall_ms(r.marks) for r in records]
    if any(alltoall):
        full_meta["alltoall_ms"] = alltoall
        full_meta["alltoall_spans"] = [
            [[(t0 - offsets[st.rank] - origin) / 1e6, (t1 - offsets[st.rank] - origin) / 1e6]
             for t0, t1 in exchanges(st.steps[step].marks)] for _, st in shown]
    return Trace(spans=spans, meta=full_meta, counters=counters)


def alltoall_ms(marks: list[tuple[str, int]]) -> float:
    """The time a rank spent in all-to-alls (ms)."""
    return sum(t1 - t0 for t0, t1 in exchanges(marks)) / 1e6


def routing_skew(states: list[RankState], step: int, ep: int) -> float | None:
    """The routing's imbalance in recorded step ``step``: per MoE layer forward of each
    expert-parallel group, the token copies its busiest rank's experts received over the group's
    mean, and the mean of those (what ``model.moe.skew`` assumes: a stage's time adds its layers',
    each paced by its busiest rank; :func:`~ppsim.costs.moe.measured_skew`, each rank's copies one
    load); None without expert parallelism."""
    groups: dict[tuple[int, int], list[list[int]]] = {}
    for st in states:
        if st.ready is not None and st.steps[step].received:
            groups.setdefault((st.ready.pipe_rank, st.ready.replica // ep), []).append(st.steps[step].received)
    calls = [list(forward) for members in groups.values() for forward in zip(*members, strict=True)]
    return measured_skew(calls, ep) if calls else None


def execute(s: Scenario, opts: RunOptions, on_progress: Callable[[list[RankState]], None] | None = None,
            hostfile: Path | None = None, profile: Profile | None = None) -> RunResult:
    """Run the scenario (locally, one process per rank; or through DeepSpeed's launcher with a
    hostfile) and collect the measured traces."""
    check_environment("torch" if opts.runtime == "torch" else "deepspeed")
    prepared, world = prepare_run(s, opts, profile)
    s = prepared.scenario
    if hostfile is None:
        if s.model is not None and s.model.dtype == "fp16":
            raise PpsimError("fp16 does not train on a CPU (DeepSpeed runs none; it needs loss scaling); for a local "
                             "run set model.dtype (or the DeepSpeed config's fp16.enabled) to bf16 or fp32",
                             field="model.dtype")
        check_fits(s, world)
        states = run_local(opts.out, world, deadline_s(opts), on_progress, hang_limit_s(opts.timeout_s))
    else:
        states = run_deepspeed(opts.out, world, hostfile, deadline_s(opts), on_progress, hang_limit_s(opts.timeout_s))
    return collect(opts.out, states)


def collect(out: Path, states: list[RankState] | None = None) -> RunResult:
    """Read a finished run folder (after any launcher) into measured traces and a summary."""
    from ppsim.api import scenario_workload, step_time_ms, workload_meta

    spec = RunSpec.read(out)
    s, plan = spec.scenario, spec.plan
    if states is None:
        states = [RankState(r) for r in range(spec.world_size)]
        read_events(out, states)
    unfinished = [st.rank for st in states if not st.done]
    if unfinished:
        raise PpsimError(f"ranks {unfinished} of the run in {out} did not finish; see {out / 'logs'}")
    check_recorded(out, spec, states)
    workload = scenario_workload(s)
    meta = workload_meta(s, workload, training=True)
    meta.update({"backend": spec.backend, "runtime": spec.runtime})
    traces = [step_trace(states, plan, k, meta, workload.costs.message_bytes, s.pipeline.comm)
              for k in range(spec.steps)]
    for k, trace in enumerate(traces):
        skew = routing_skew(states, k, s.expert_parallel)
        trace.meta.pop("routing_skew", None)  # the prediction's, which the run's own replaces
        if skew is not None:
            trace.meta["routing_skew"] = skew
    times = [step_time_ms(t) for t in traces]
    rep = traces[times.index(statistics.median_low(times))]
    losses = [t.meta.get("loss") for t in traces]
    return RunResult(runtime=spec.runtime, plan=plan, traces=traces, losses=losses, representative=rep,
                     summary=summarize(rep), states=states)


def check_recorded(out: Path, spec: RunSpec, states: list[RankState]) -> None:
    """Every rank's events hold what run.json asked of it: a ``ready`` naming its place, every step,
    each step's spans actions of the plan; else an error naming the rank's event file."""
    actions = {str(a) for row in spec.plan.actions for a in row}
    for st in states:
        path = events_path(out, st.rank)
        if st.ready is None:
            raise PpsimError(f"{path} has no 'ready' event, though the rank says it is done; the events are damaged")
        if not 0 <= st.ready.pipe_rank < spec.plan.num_ranks:
            raise PpsimError(f"{path}: the rank says it is pipeline rank {st.ready.pipe_rank}, and run.json's plan has "
                             f"{spec.plan.num_ranks}; these events are not this run's")
        if len(st.steps) < spec.steps:
            raise PpsimError(f"{path} records {len(st.steps)} steps and run.json asks for {spec.steps}; the events "
                             "are damaged or not this run's")
        for step in st.steps[:spec.steps]:
            foreign = next((text for text, _, _ in step.spans if text not in actions), None)
            if foreign is not None or not step.spans:
                raise PpsimError(f"{path}: step {step.step} records "
                                 + (f"action {foreign!r}, which run.json's plan does not have" if foreign else "no action")
                                 + "; these events are not this run's")


def summary_doc(result: RunResult) -> dict[str, object]:
    """``summary.json`` and ``ppexec run --json``: ppsim's figures of the median step, the runtime
    that ran it, every step's loss and time."""
    from ppsim.api import step_time_ms

    doc = result.summary.to_json_dict()
    doc.update(runtime=result.runtime, losses=result.losses, step_times_ms=[step_time_ms(t) for t in result.traces])
    return doc


def write_run_outputs(result: RunResult, out: Path) -> None:
    """Write a run's measured traces (each step and the median one), Chrome trace, summary and plan."""
    from ppsim.api import write_chrome_trace

    steps_dir = out / "steps"
    steps_dir.mkdir(exist_ok=True)
    for k, trace in enumerate(result.traces):
        trace.save(steps_dir / f"step-{k}.trace.json")
    result.representative.save(out / "trace.json")
    write_chrome_trace(result.representative, out / "trace.chrome.json")
    (out / "summary.json").write_text(json.dumps(summary_doc(result), indent=2))
    (out / "plan.json").write_text(json.dumps(result.plan.to_dict(), indent=1))
