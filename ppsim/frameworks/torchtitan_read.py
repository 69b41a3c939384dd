"""torchtitan's TOML job config (v0.2.2's keys) and its schedule CSV read back into a ppsim
scenario mapping laid over a base scenario (torchtitan names its model by a flavor, so the model,
the device and the cluster come from the base): the reverse of :mod:`ppsim.frameworks.torchtitan`.

The schedule: the CSV when the TOML names one (as a ppsim schedule when it is one's exact order,
else ``file:PATH``), else the torch class ``pipeline_parallel_schedule`` names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ppsim.errors import ScenarioError
from ppsim.frameworks.names import TORCHTITAN as N
from ppsim.frameworks.placement import base_devices
from ppsim.plan import Plan
from ppsim.plan import schedules as registry
from ppsim.plan.schedules.from_file import read_plan

FIELD = "torchtitan config"
TORCH = "torch"  #: torch's schedule classes, in the schedule registry's native names


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file's tables (Python 3.11's tomllib)."""
    try:
        import tomllib  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError:  # Python 3.10
        raise ScenarioError("reading a TOML needs Python 3.11 or later (its tomllib)", field=FIELD) from None
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path.name}: not valid TOML ({exc})", field=FIELD) from None
    return data


def _get(config: dict[str, Any], key: str, default: Any = None) -> Any:
    section, name = N[key].name.rsplit(".", 1)
    node: Any = config
    for part in section.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node.get(name, default) if isinstance(node, dict) else default


def scenario_mapping(config: dict[str, Any], folder: Path, base: dict[str, Any], notes: list[str],
                     gpus: int | None = None) -> dict[str, Any]:
    """The scenario of ``config`` (a TOML read from ``folder``) over ``base``, which gives the model;
    ``gpus`` (or the base's plan) sizes a shard degree of -1, torchtitan's "the GPUs left over"."""
    if not base.get("model"):
        raise ScenarioError("torchtitan's TOML names its model by flavor, not by shape: give --base SCENARIO with "
                            "the model", field="--base")
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    model = dict(data["model"])
    training = dict(data.get("training") or {})
    pipeline = dict(data.get("pipeline") or {})
    replicate, shard = int(_get(config, "replicate", 1)), int(_get(config, "shard", -1))
    if shard < 0:
        others = replicate * int(_get(config, "tensor_parallel", 1)) * int(_get(config, "context_parallel", 1)) \
            * int(_get(config, "stages", 1))
        devices = gpus or base_devices(base)
        if devices is None or devices % others:
            raise ScenarioError("parallelism.data_parallel_shard_degree -1 takes the GPUs left over: give --gpus "
                                f"(a multiple of the other degrees' {others}) or the degree", field=FIELD)
        shard = devices // others
        notes.append(f"data_parallel_shard_degree -1: {shard}, the GPUs left over of {devices}")
    d = replicate * shard
    data["data_parallel"] = d
    training["zero_stage"] = 3 if shard > 1 else 0
    data["tensor_parallel"] = int(_get(config, "tensor_parallel", 1))
    data["context_parallel"] = int(_get(config, "context_parallel", 1))
    if model.get("moe"):
        data["expert_parallel"] = int(_get(config, "expert_parallel", 1))
        data["expert_tensor_parallel"] = int(_get(config, "expert_tensor", 1))
    p = int(_get(config, "stages", 1))
    mb = int(_get(config, "microbatch_size", 1))
    local = int(_get(config, "local_batch", 8))
    if p > 1 and local % mb:
        raise ScenarioError(f"training.local_batch_size {local} is not a multiple of the micro-batch size {mb}",
                            field=FIELD)
    training["micro_batch"] = mb if p > 1 else local
    training.pop("global_batch", None)
    gb = int(_get(config, "global_batch", -1))
    m = local // mb if p > 1 else max(1, gb // (local * d)) if gb > 0 else 1
    pipeline.update(stages=p, microbatches=m)
    if (seq := _get(config, "seq_len")) is not None:
        model["seq_len"] = int(seq)
    model["dtype"] = "fp32" if _get(config, "param_dtype", "bfloat16") == "float32" else "bf16"
    if (clip := _get(config, "max_norm")) is not None:
        training["grad_clip"] = float(clip)
    mode = _get(config, "ac_mode", "selective")
    training["recompute"] = {"none": "none", "full": "full", "selective": "selective"}.get(mode, "none")
    if mode == "memory_budget":
        notes.append("activation_checkpoint.mode memory_budget is priced as no recomputation")
    converters = _get(config, "converters", []) or []
    training.pop("fp8", None)
    training.pop("fp8_attention", None)  # torchtitan runs the attention in 16 bits
    if "quantize.linear.float8" in converters:
        training["fp8"] = _get(config, "float8_recipe") or "tensorwise"
    elif "quantize.linear.mx" in converters:
        training["fp8"] = "mxfp8"
    if p > 1:
        _schedule(config, folder, pipeline, p, m, notes)
    data.update(model=model, training=training, pipeline=pipeline)
    return data


def _schedule(config: dict[str, Any], folder: Path, pipeline: dict[str, Any], p: int, m: int, notes: list[str]) -> None:
    fqns = _get(config, "fqns")
    if fqns:
        pipeline["partition"] = [sum(1 for name in stage if name.startswith("layers.")) for stage in fqns]
        pipeline["chunks"] = len(fqns) // p
    csv = _get(config, "schedule_csv")
    if csv:
        path = Path(csv) if Path(csv).is_absolute() else folder / csv
        plan = read_plan(path)
        pipeline["chunks"] = plan.chunks
        pipeline["schedule"] = _named(plan) or f"file:{path}"
        return
    name = str(_get(config, "schedule", registry.describe(registry.DEFAULT).native_name(TORCH)))
    ours = registry.native_schedule(TORCH, name)
    if ours is None:
        known = ", ".join(str(info.native_name(TORCH)) for info in registry.native(TORCH))
        raise ScenarioError(f"parallelism.pipeline_parallel_schedule {name!r}: ppsim knows torch's {known} (or give "
                            "its CSV)", field=FIELD)
    pipeline["schedule"] = ours
    if not fqns:  # torchtitan's default stages per rank: one for a single-stage class, else two
        pipeline["chunks"] = registry.describe(ours).chunks.default
        pipeline["partition"] = "balanced"
        notes.append("no module_fqns_per_model_part: torchtitan splits the layers itself; ppsim balances them")


def _named(plan: Plan) -> str | None:
    """The ppsim schedule whose plan of the same sizes is exactly ``plan``'s order, if one is."""
    p, m, v = plan.num_ranks, plan.num_microbatches, plan.chunks
    for name, info in registry.SCHEDULES.items():
        if not info.training or name == registry.SEARCHED or not info.allows_chunks(p, v) \
                or info.microbatches.nearest(p, m, v) is not None:
            continue
        if info.build(p, m, v).actions == plan.actions:
            return name
    return None
