"""Prepare a run: the runtime that runs the scenario's plan, the plan lowered for that runtime's
sends, the partition made explicit, the run folder checked, and ``run.json`` (``RunSpec``) written:
everything a rank needs, whoever launches it. ``ppexec prepare`` stops here; ``ppexec run`` goes on
to start the ranks (``ppexec.launch.local``, ``ppexec.launch.cluster``)."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ppexec.launch.folders import check_run_folder, clear_run_folder
from ppexec.runtimes.base import RuntimeName
from ppexec.worker.run_spec import RunSpec
from ppsim.api import Plan, Profile, Scenario
from ppsim.errors import PpsimError


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
    mode: str = "train"  #: "profile": the ranks also measure layer times and the link (ppexec.measure.profile)
    runtime: str = "auto"  #: deepspeed | torch | auto (DeepSpeed where it can run the plan, else torch)
    force: bool = False  #: replace an earlier run in ``out`` (else a folder holding one is refused)


@dataclass(frozen=True)
class Prepared:
    """A scenario as ppexec runs it."""

    scenario: Scenario  #: with the runtime's send semantics and the partition made explicit
    plan: Plan  #: lowered for those semantics, its messages placed by the scenario's (or profile's) costs
    partition: list[int]
    runtime: RuntimeName


def check_environment(runtime: str = "deepspeed") -> None:
    for module in ("torch", "deepspeed") if runtime == "deepspeed" else ("torch",):
        if importlib.util.find_spec(module) is None:
            raise PpsimError(
                f"{module} is not installed; install the executor with: pip install torch==2.13.0 && "
                "DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed (or `make test`, which does it)"
            )
    if runtime == "deepspeed" and "DS_ACCELERATOR" not in os.environ:
        import torch

        if not torch.cuda.is_available():  # named, so that DeepSpeed's own detection does not warn at its import
            os.environ["DS_ACCELERATOR"] = "cpu"


def check_fits(s: Scenario, world: int) -> None:
    """Refuse a scenario whose local run would not fit in this machine's memory."""
    from ppsim.api import host_run_bytes

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
    from ppexec.runtimes.base import choose
    from ppsim.api import SEARCHED_SCHEDULE, build, lower_built

    check_buildable(s)
    if s.pipeline.schedule == SEARCHED_SCHEDULE and runtime == "auto":
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
        ("tie_embeddings", True if s.model.tie_embeddings else None, "use tie_embeddings: false"),
        ("mla", "latent attention" if s.model.mla is not None else None, "leave it out (multi-head attention)"),
        ("mtp_layers", s.model.mtp_layers or None, "leave it out (no multi-token prediction)"),
        ("attention_window", s.model.attention_window, "leave it out (every earlier key)"),
        ("pattern", s.model.pattern, "leave it out (GPT-style blocks)"),
        ("moe.latent", s.model.moe.latent if s.model.moe else None, "leave it out (experts at the hidden width)"),
    ) if v is not None]
    if unbuilt:
        name, value, fix = unbuilt[0]
        raise PpsimError(f"ppexec builds GPT- and Llama-style blocks (multi-head or grouped-query attention, GELU or "
                         f"SwiGLU MLPs, learned or rotary positions, a head of its own), not {name}: {value}; ppsim "
                         f"predicts it, for a run {fix}", field=name)
    plain = s.model.mlp == "gelu" and s.model.kv == s.model.heads and s.model.q_width == s.model.hidden
    if s.tensor_parallel > 1 and not plain:
        raise PpsimError("ppexec's tensor parallelism splits GPT-style multi-head blocks (GELU MLP, kv_heads = heads, "
                         "hidden / heads wide heads); ppsim predicts this model's, for a run use tensor_parallel: 1",
                         field="tensor_parallel")
    if s.model.moe is not None and s.model.mlp != "gelu":
        raise PpsimError("ppexec's experts are GELU MLPs; ppsim predicts SwiGLU experts, for a run use mlp: gelu",
                         field="model.mlp")
    if s.model.moe is not None and s.tensor_parallel > 1:
        raise PpsimError("ppexec's MoE layers run without tensor parallelism (their experts are split over the "
                         "replicas by expert_parallel); ppsim predicts it, for a run use tensor_parallel: 1",
                         field="tensor_parallel")
    if s.training.recompute_modules not in (None, ["core_attn"]):
        raise PpsimError("ppexec's selective recomputation recomputes the attention core; ppsim predicts "
                         f"recompute_modules {s.training.recompute_modules}, for a run leave it out",
                         field="training.recompute_modules")
    if s.model.moe is not None and s.expert_tensor > 1:
        raise PpsimError("ppexec runs each expert whole on the replicas that hold it; ppsim predicts "
                         f"expert_tensor_parallel {s.expert_tensor}, for a run use expert_tensor_parallel: 1",
                         field="expert_tensor_parallel")
    if s.model.moe is not None and s.training.moe_dispatcher != "alltoall":
        raise PpsimError(f"ppexec's experts exchange their tokens by the backend's all-to-all after exchanging their "
                         f"counts, as NCCL's dispatcher does, not by {s.training.moe_dispatcher}'s kernels; ppsim "
                         "predicts them, for a run leave training.moe_dispatcher out", field="training.moe_dispatcher")
    if s.training.sequence_parallel:
        raise PpsimError("ppexec's tensor parallelism keeps whole activations outside the split matmuls, without "
                         "Megatron's sequence parallelism; ppsim predicts it, for a run use sequence_parallel: false",
                         field="training.sequence_parallel")
    if s.context_parallel > 1:
        raise PpsimError("ppexec's models see whole sequences, without context parallelism; ppsim predicts it, for "
                         "a run use context_parallel: 1", field="context_parallel")
    for key, on in (("fp8", s.training.fp8), ("fp4", s.training.fp4)):
        if on:
            raise PpsimError(f"ppexec's models multiply in the model's dtype, without Transformer Engine's "
                             f"{key.upper()}; ppsim predicts it, for a run leave training.{key} out",
                             field=f"training.{key}")
    if s.training.recompute_layers is not None:
        raise PpsimError("ppexec recomputes every block or none; ppsim predicts recomputing some of them, for a run "
                         "leave training.recompute_layers out", field="training.recompute_layers")
    if s.training.offload_layers:
        raise PpsimError("ppexec keeps every activation on the device; ppsim predicts offloading, for a run leave "
                         "training.offload_layers out", field="training.offload_layers")
    if s.training.overlap_param_gather:
        raise PpsimError("ppexec's runtimes all-gather ZeRO-1's parameters at the end of the step; ppsim predicts "
                         "the overlapped gather, for a run leave training.overlap_param_gather out",
                         field="training.overlap_param_gather")
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
