"""``ppexec run``: the scenario's plan, trained for real, recorded, summarised with ppsim's metrics."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ppexec.folders import check_run_folder, clear_run_folder
from ppexec.heartbeat import hang_limit_s
from ppexec.launch import RankState, run_local
from ppexec.results import step_trace
from ppexec.spec import RunSpec
from ppsim.errors import PpsimError
from ppsim.inputs.profile import Profile
from ppsim.inputs.scenario import Scenario
from ppsim.plan import Plan
from ppsim.trace import Trace
from ppsim.trace.metrics import Summary, summarize


@dataclass
class RunOptions:
    out: Path
    steps: int = 3
    warmup: int = 1
    seed: int = 1234
    lr: float = 1e-3
    timeout_s: float = 60.0  #: distributed timeout: a rank that waits this long on a peer fails
    backend: str = "gloo"
    save_params: bool = False
    mode: str = "train"  #: "profile": the ranks also measure layer times and the link (ppexec.profile)
    runtime: str = "auto"  #: deepspeed | torch | auto (DeepSpeed where it can run the plan, else torch)
    force: bool = False  #: replace an earlier run in ``out`` (else a folder holding one is refused)


@dataclass(frozen=True)
class Prepared:
    """A scenario as ppexec runs it."""

    scenario: Scenario  #: with the runtime's send semantics and the partition made explicit
    plan: Plan  #: lowered for those semantics, its messages placed by the scenario's (or profile's) costs
    partition: list[int]
    runtime: str


@dataclass
class RunResult:
    runtime: str
    plan: Plan
    traces: list[Trace]  #: one per recorded step (replica 0)
    losses: list[float]
    representative: Trace  #: the step with the median step time
    summary: Summary
    states: list[RankState]


def check_environment(runtime: str = "deepspeed") -> None:
    for module in ("torch", "deepspeed") if runtime == "deepspeed" else ("torch",):
        if importlib.util.find_spec(module) is None:
            raise PpsimError(
                f"{module} is not installed; install the executor with: pip install torch==2.13.0 && "
                "DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed (or `make test`, which does it)"
            )


def check_fits(s: Scenario, world: int) -> None:
    """Refuse a scenario whose local run would not fit in this machine's memory."""
    from ppsim.costs.host_memory import host_run_bytes

    if s.model is None:
        return
    need = host_run_bytes(s.model, s.training.micro_batch, s.microbatches, world)
    try:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - non-POSIX
        return
    if need > avail:
        raise PpsimError(
            f"this run needs about {need / 2**30:.1f} GiB of memory and {avail / 2**30:.1f} GiB are free; "
            "use a smaller model (model.layers / hidden / seq_len), fewer micro-batches, or a cluster",
            field="model",
        )


def prepare(s: Scenario, profile: Profile | None = None, runtime: str = "auto") -> Prepared:
    """The scenario as ppexec runs it: the runtime that runs its plan (``auto``: DeepSpeed where
    it can, else torch), the plan lowered for that runtime's sends, the partition made explicit.
    With a profile the partition and the order of sends and receives come from the measured costs,
    exactly as in ``ppsim run --profile``."""
    from ppexec.runtime import choose
    from ppsim.plan import schedules
    from ppsim.prediction import build, lower_built

    check_buildable(s)
    if schedules.get(s.pipeline.schedule).needs_costs and runtime == "auto":
        runtime = "torch"  # its plan depends on the sends' semantics: build it once, for the runtime that runs any
    built = build(s, profile)
    chosen = choose(runtime, built.plan, s)
    if chosen.comm != s.pipeline.comm:  # the plan for the runtime's sends (auto may pick another)
        s = s.with_overrides(comm=chosen.comm)
        built = build(s, profile)
        chosen = choose(chosen.name, built.plan, s)
    partition = built.workload.partition or []
    # the scenario that describes the plan (auto's choice of several chunks has its own), partition explicit
    described = built.scenario.with_overrides(comm=chosen.comm, partition=partition)
    return Prepared(described, lower_built(built), partition, chosen.name)


def check_buildable(s: Scenario) -> None:
    """Refuse, naming the key, what ppexec's model does not build (whatever the runtime)."""
    if s.model is None:
        raise PpsimError("ppexec needs a 'model' section to build a network; this scenario has only costs",
                         field="model")
    unbuilt = [(f"model.{k}", v, fix) for k, v, fix in (
        ("kv_heads", s.model.kv_heads if s.model.kv != s.model.heads else None, "leave it out (kv_heads = heads)"),
        ("mlp", s.model.mlp if s.model.mlp != "gelu" else None, "use mlp: gelu"),
        ("positions", s.model.positions if s.model.positions != "learned" else None, "use positions: learned"),
        ("tie_embeddings", True if s.model.tie_embeddings else None, "use tie_embeddings: false"),
    ) if v is not None]
    if unbuilt:
        name, value, fix = unbuilt[0]
        raise PpsimError(f"ppexec builds GPT-style blocks (multi-head attention, GELU MLP, learned positions, a head "
                         f"of its own), "
                         f"not {name}: {value}; ppsim predicts it, for a run {fix}", field=name)
    if s.training.sequence_parallel:
        raise PpsimError("ppexec's tensor parallelism keeps whole activations outside the split matmuls, without "
                         "Megatron's sequence parallelism; ppsim predicts it, for a run use sequence_parallel: false",
                         field="training.sequence_parallel")
    if s.training.zero_stage >= 2:
        raise PpsimError(f"pipelines run ZeRO stage 0 or 1 (DeepSpeed's PipelineEngine refuses stage "
                         f"{s.training.zero_stage} even with one stage); use zero_stage: 1 (optimizer states "
                         "sharded) or 0", field="training.zero_stage")


def prepare_run(s: Scenario, opts: RunOptions, profile: Profile | None = None) -> tuple[Prepared, int]:
    """Write ``run.json`` into the run folder: what every worker needs, whoever launches it.
    Returns the scenario as it runs and the world size."""
    check_run_folder(opts.out, opts.force)
    prepared = prepare(s, profile, opts.runtime)
    s = prepared.scenario
    world = s.pipeline.stages * s.data_parallel * s.tensor_parallel
    opts.out.mkdir(parents=True, exist_ok=True)
    clear_run_folder(opts.out)  # a previous run's files in this folder would be read, or shown, as this run's
    RunSpec(scenario=s, plan=prepared.plan, partition=prepared.partition, runtime=prepared.runtime, world_size=world,
            steps=opts.steps, warmup=opts.warmup, seed=opts.seed, lr=opts.lr, timeout_s=opts.timeout_s,
            backend=opts.backend, save_params=opts.save_params, mode=opts.mode).write(opts.out)
    return prepared, world


def deadline_s(opts: RunOptions) -> float:
    """How long a whole run may take before the watcher stops it (the ranks' own timeout is shorter)."""
    return 120 + opts.timeout_s * 2 + 30 * (opts.steps + opts.warmup)


def execute(s: Scenario, opts: RunOptions, on_progress: Callable[[list[RankState]], None] | None = None,
            hostfile: Path | None = None, profile: Profile | None = None) -> RunResult:
    """Run the scenario (locally, one process per rank; or through DeepSpeed's launcher with a
    hostfile) and collect the measured traces."""
    from ppexec.launch import run_deepspeed

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
    from ppexec.launch import read_events
    from ppsim.prediction import scenario_workload, workload_meta
    from ppsim.trace.metrics import step_time_ms

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
    meta.update(backend=spec.backend, runtime=spec.runtime)
    traces = [step_trace(states, plan, k, meta, workload.costs.message_bytes, s.pipeline.comm)
              for k in range(spec.steps)]
    times = [step_time_ms(t) for t in traces]
    rep = traces[times.index(statistics.median_low(times))]
    losses = [t.meta["loss"] for t in traces]
    return RunResult(runtime=spec.runtime, plan=plan, traces=traces, losses=losses, representative=rep,
                     summary=summarize(rep), states=states)


def check_recorded(out: Path, spec: RunSpec, states: list[RankState]) -> None:
    """Every rank's events hold what run.json asked of it: a ``ready`` naming its place, every step,
    each step's spans actions of the plan; else an error naming the rank's event file."""
    from ppexec.events import events_path

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
    from ppsim.trace.metrics import step_time_ms

    doc = result.summary.to_json_dict()
    doc.update(runtime=result.runtime, losses=result.losses, step_times_ms=[step_time_ms(t) for t in result.traces])
    return doc


def write_run_outputs(result: RunResult, out: Path) -> None:
    """Write a run's measured traces (each step and the median one), Chrome trace, summary and plan."""
    from ppsim.trace.chrome import write_chrome_trace

    steps_dir = out / "steps"
    steps_dir.mkdir(exist_ok=True)
    for k, trace in enumerate(result.traces):
        trace.save(steps_dir / f"step-{k}.trace.json")
    result.representative.save(out / "trace.json")
    write_chrome_trace(result.representative, out / "trace.chrome.json")
    (out / "summary.json").write_text(json.dumps(summary_doc(result), indent=2))
    (out / "plan.json").write_text(json.dumps(result.plan.to_dict(), indent=1))
