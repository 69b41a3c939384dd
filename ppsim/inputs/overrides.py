"""The plan laid over a scenario: stages, micro-batches, schedule, chunks, partition, send semantics,
data and tensor parallelism, micro-batch size, recompute, ZeRO.

One function applies it, :func:`apply_overrides`, whichever way the overrides come in: the command
line's plan options (``ppsim run``, ``sweep``, ``compare-schedules``, ``ppexec``), the public API
(``ppsim.load_scenario(path, schedule=...)``, :meth:`Scenario.with_overrides`), the TUI's keys,
sweep's points, schedule ``auto``'s candidates and the scenario files ``ppsim tune --write`` writes
(:func:`plan_mapping`, the same rules on the scenario's mapping). So the same overrides give the
same scenario every way in.

A schedule named without chunks runs the chunks it takes: the scenario's where it takes them (and
they are not 1 for a schedule that needs several), else its registry entry's default (2 for an
interleaved schedule, whose one chunk would only repeat 1F1B).

The global batch: a new micro-batch count sets it to micro-batch size x count x data parallelism;
a new data parallelism or micro-batch size without a count keeps the scenario's global batch (the
count follows) when the scenario gives one, else keeps the count (the global batch follows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ppsim.errors import PpsimError

if TYPE_CHECKING:  # pragma: no cover
    from ppsim.inputs.scenario import Scenario

#: the pipeline section's keys among the plan options
PIPELINE_KEYS = ("schedule", "stages", "microbatches", "chunks", "partition", "comm")
#: plan option -> key of the training section
TRAINING_KEYS = {"micro_batch": "micro_batch", "recompute": "recompute", "zero_stage": "zero_stage"}
TOP_KEYS = ("data_parallel", "tensor_parallel", "context_parallel", "expert_parallel", "expert_tensor_parallel")
#: plan option -> key of the simulator section
SIMULATOR_KEYS = {"kernel": "kernel"}


@dataclass(frozen=True)
class PlanOverrides:
    """The plan options given (None: keep the scenario's)."""

    schedule: str | None = None
    stages: int | None = None
    microbatches: int | None = None
    chunks: int | None = None
    partition: str | None = None
    comm: str | None = None
    data_parallel: int | None = None
    tensor_parallel: int | None = None
    context_parallel: int | None = None
    expert_parallel: int | None = None
    expert_tensor_parallel: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    zero_stage: int | None = None
    kernel: str | None = None  #: the simulator's (simulator.kernel)

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def plan_mapping(data: dict[str, Any], plan: PlanOverrides) -> dict[str, Any]:
    """A copy of the scenario mapping ``data`` with ``plan`` laid over it (not validated)."""
    given = plan.given()
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    pipeline, training = dict(out.get("pipeline", {})), dict(out.get("training", {}))
    relaid = any(given.get(k) not in (None, pipeline.get(k, 1)) for k in ("stages", "chunks"))
    if relaid and isinstance(pipeline.get("partition"), list) and plan.partition is None:
        pipeline["partition"] = "balanced"  # a listed partition only fits its own virtual stages
    pipeline.update({k: v for k, v in given.items() if k in PIPELINE_KEYS})
    training.update({TRAINING_KEYS[k]: v for k, v in given.items() if k in TRAINING_KEYS})
    drop_partial_recompute(training)
    out.update({k: v for k, v in given.items() if k in TOP_KEYS})
    if "expert_parallel" in given or "tensor_parallel" in given:
        sequence_parallel_for_experts(out, training)
    if any(k in SIMULATOR_KEYS for k in given):
        out["simulator"] = {**out.get("simulator", {}), **{SIMULATOR_KEYS[k]: v for k, v in given.items()
                                                           if k in SIMULATOR_KEYS}}
    if plan.microbatches is not None:
        gb = training.get("global_batch")
        if gb is not None and gb != plan.microbatches * training.get("micro_batch", 1) * out.get("data_parallel", 1):
            training.pop("global_batch")  # the count sets the global batch
    elif (plan.data_parallel is not None or plan.micro_batch is not None) and training.get("global_batch"):
        pipeline.pop("microbatches", None)  # the global batch holds: the count follows
    out["pipeline"], out["training"] = pipeline, training
    return out


def drop_partial_recompute(training: dict[str, Any]) -> None:
    """Drop ``recompute_layers`` from a training mapping whose recompute mode is no longer ``full``
    (it counts fully recomputed blocks; a plan that recomputes otherwise has none), and
    ``recompute_modules`` from one whose mode is no longer ``selective``."""
    if training.get("recompute", "none") != "full":
        training.pop("recompute_layers", None)
    if training.get("recompute", "none") != "selective":
        training.pop("recompute_modules", None)


def sequence_parallel_for_experts(data: dict[str, Any], training: dict[str, Any]) -> None:
    """Turn on sequence parallelism in a training mapping where the scenario mapping ``data`` runs
    expert parallelism beside tensor parallelism: Megatron needs it there."""
    if int(data.get("expert_parallel") or 1) > 1 and int(data.get("tensor_parallel") or 1) > 1:
        training["sequence_parallel"] = True


def apply_overrides(s: Scenario, plan: PlanOverrides, source: str = "command-line options") -> tuple[Scenario, list[str]]:
    """``s`` with ``plan`` applied and validated (errors name ``source``), and notes for the user: the
    chunks a schedule runs when none are stated (its default: 2 for interleaved schedules), a listed
    partition balanced over new virtual stages, and a global batch that changed."""
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.plan import schedules

    notes: list[str] = []
    name = plan.schedule or s.pipeline.schedule
    stated = plan.chunks is not None or (plan.schedule in (None, s.pipeline.schedule)
                                         and "chunks" in s.pipeline.model_fields_set)
    if not stated and not name.startswith(schedules.FILE_PREFIX) and name in schedules.NAMES:
        v = schedules.describe(name).chunks_for(s.pipeline.chunks)
        if v != s.pipeline.chunks:
            plan = PlanOverrides(**{**plan.given(), "chunks": v})
            had = "the scenario has " + (str(s.pipeline.chunks) if "chunks" in s.pipeline.model_fields_set
                                         else "none")
            if name != schedules.SEARCHED:  # auto's search picks its chunks, which the plan line shows
                notes.append(f"schedule {name} runs {v} chunk{'s' if v > 1 else ''} per rank ({had}); "
                             "--chunks chooses")
    if not plan.given():
        return s, notes
    new = parse_scenario(plan_mapping(s.model_dump(exclude_none=True), plan), source=source)
    if isinstance(s.pipeline.partition, list) and not isinstance(new.pipeline.partition, list):
        notes.append("the partition is balanced over the new virtual stages (the scenario's list fits its own)")
    if new.global_batch != s.global_batch:
        notes.append(f"global batch {s.global_batch} -> {new.global_batch} "
                     f"(micro-batch {new.training.micro_batch} x {new.microbatches} micro-batches x "
                     f"data parallel {new.data_parallel})")
    return new, notes


def plan_warnings(s: Scenario) -> list[str]:
    """What the plan does that users rarely mean: fewer micro-batches than stages. Whatever the
    schedule, a step lasts at least one micro-batch's way through every stage, W, while the ranks
    work m x W in all: on average they idle at least (p - m) / p of the step."""
    from ppsim.plan import schedules

    p, m = s.pipeline.stages, s.microbatches
    try:
        trains = schedules.describe(s.pipeline.schedule).training
    except PpsimError:
        return []
    if trains and 1 < p and m < p:
        return [f"pipeline.microbatches: {m} micro-batch{'es' * (m > 1)} on {p} stages: the ranks idle at least "
                f"{(p - m) / p:.0%} of the step on average, whatever the schedule; use at least {p} micro-batches "
                "(a smaller micro_batch, or a larger global batch)"]
    return []
