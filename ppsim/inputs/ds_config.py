"""Import a DeepSpeed config (``ds_config.json``) into a scenario, with DeepSpeed's own rules.

What is imported: the batch sizes (``train_batch_size``, ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, which for a pipeline is the micro-batch count per step),
the precision (``fp16`` / ``bf16``), the ZeRO stage with ``overlap_comm`` and ``reduce_bucket_size``
(elements), ``gradient_clipping`` and activation
checkpointing (``pipeline.activation_checkpoint_interval`` > 0: every block recomputed, i.e.
``recompute: full``). The rules are DeepSpeed's: train_batch_size = micro-batch x accumulation x
data-parallel, any two giving the third; fp16 and bf16 not both; ZeRO 2 and 3 not with a pipeline
(checked with the rest of the scenario). Keys DeepSpeed silently ignores — above all
``pipeline.stages`` and ``pipeline.stage_id``, which many tutorials show — come back as notes that
say how the stage count is really set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import DTYPE_BYTES

#: the only keys of a config's ``pipeline`` section DeepSpeed reads (deepspeed/runtime/config.py)
PIPELINE_KEYS_READ = ("pipe_partitioned", "grad_partitioned", "activation_checkpoint_interval", "use_reentrant")


def read_ds_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a DeepSpeed config file; errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"DeepSpeed config {str(p)!r} does not exist; check the path", field="deepspeed")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise ScenarioError(f"{p}: not valid JSON{where}; fix the syntax", field="deepspeed") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}: a DeepSpeed config is a JSON object of keys", field="deepspeed")
    return data


def _int(ds: dict[str, Any], key: str, name: str) -> int | None:
    value = ds.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ScenarioError(f"{name}: {key} must be a positive integer, got {value!r}", field="deepspeed")
    return value


def _enabled(ds: dict[str, Any], key: str) -> bool:
    section = ds.get(key)
    return isinstance(section, dict) and bool(section.get("enabled", False))


def _set(data: dict[str, Any], section: str, key: str, value: Any, ds_key: str, name: str) -> None:
    """Set data[section][key], refusing a different value the scenario gives itself."""
    sec = data.setdefault(section, {})
    if key in sec and sec[key] != value:
        raise ScenarioError(
            f"the scenario says {section}.{key}: {sec[key]!r} but {name} says {ds_key} = {value!r}; "
            "remove one of them or make them agree",
            field=f"{section}.{key}",
        )
    sec[key] = value


def batch_sizes(train: int | None, micro: int | None, accumulation: int | None, dp: int, name: str
                ) -> tuple[int, int, int]:
    """DeepSpeed's rule: train = micro x accumulation x dp; any two give the third."""
    def fail(msg: str) -> ScenarioError:
        return ScenarioError(f"{name}: {msg}; DeepSpeed requires train_batch_size = train_micro_batch_size_per_gpu x "
                             "gradient_accumulation_steps x data-parallel size", field="deepspeed")

    if train is not None and micro is not None and accumulation is not None:
        if train != micro * accumulation * dp:
            raise fail(f"train_batch_size ({train}) != {micro} x {accumulation} x {dp} = {micro * accumulation * dp}")
        return train, micro, accumulation
    if train is not None and micro is not None:
        if train % (micro * dp):
            raise fail(f"train_batch_size ({train}) is not a multiple of micro-batch x data-parallel ({micro} x {dp})")
        return train, micro, train // (micro * dp)
    if train is not None and accumulation is not None:
        if train % (accumulation * dp):
            raise fail(f"train_batch_size ({train}) is not a multiple of accumulation x data-parallel "
                       f"({accumulation} x {dp})")
        return train, train // (accumulation * dp), accumulation
    if micro is not None:
        acc = accumulation or 1
        return micro * acc * dp, micro, acc
    if train is not None:
        if train % dp:
            raise fail(f"train_batch_size ({train}) is not a multiple of the data-parallel size ({dp})")
        return train, train // dp, 1
    raise fail("it gives none of train_batch_size and train_micro_batch_size_per_gpu")


def apply_ds_config(data: dict[str, Any], ds: dict[str, Any], name: str) -> tuple[dict[str, Any], list[str]]:
    """The scenario mapping ``data`` with ``ds``'s settings applied, and notes for the user."""
    data = json.loads(json.dumps(data))  # a deep copy; the caller's mapping stays as it was
    notes: list[str] = []
    if _enabled(ds, "fp16") and _enabled(ds, "bf16"):
        raise ScenarioError(f"{name}: fp16 and bf16 are both enabled; DeepSpeed allows one: disable the other",
                            field="deepspeed")
    if "model" in data:
        dtype = "fp16" if _enabled(ds, "fp16") else "bf16" if _enabled(ds, "bf16") else "fp32"
        _set(data, "model", "dtype", dtype, "fp16/bf16.enabled", name)
    dp = int(data.get("data_parallel", 1))
    train, micro, acc = batch_sizes(_int(ds, "train_batch_size", name), _int(ds, "train_micro_batch_size_per_gpu", name),
                                    _int(ds, "gradient_accumulation_steps", name), dp, name)
    _set(data, "training", "micro_batch", micro, "train_micro_batch_size_per_gpu", name)
    _set(data, "pipeline", "microbatches", acc, "gradient_accumulation_steps", name)
    _set(data, "training", "global_batch", train, "train_batch_size", name)
    zero = ds.get("zero_optimization")
    if isinstance(zero, dict) and "stage" in zero:
        _set(data, "training", "zero_stage", zero["stage"], "zero_optimization.stage", name)
    if isinstance(zero, dict) and isinstance(zero.get("use_multi_rank_bucket_allreduce"), bool):
        _set(data, "training", "zero_reduce", "allreduce" if zero["use_multi_rank_bucket_allreduce"] else "reduce_scatter",
             "zero_optimization.use_multi_rank_bucket_allreduce", name)
    if isinstance(zero, dict) and isinstance(zero.get("overlap_comm"), bool):
        _set(data, "training", "overlap_grad_reduce", zero["overlap_comm"], "zero_optimization.overlap_comm", name)
    if isinstance(zero, dict) and isinstance(zero.get("reduce_bucket_size"), int | float):
        dtype_bytes = DTYPE_BYTES.get(data.get("model", {}).get("dtype", ""), DTYPE_BYTES["fp32"])
        _set(data, "training", "bucket_mb", zero["reduce_bucket_size"] * dtype_bytes / 1e6,
             "zero_optimization.reduce_bucket_size", name)
    if "gradient_clipping" in ds:
        _set(data, "training", "grad_clip", float(ds["gradient_clipping"]), "gradient_clipping", name)
    pipe = ds.get("pipeline") if isinstance(ds.get("pipeline"), dict) else {}
    interval = pipe.get("activation_checkpoint_interval", 0)
    if isinstance(interval, int) and interval > 0:
        _set(data, "training", "recompute", "full", "pipeline.activation_checkpoint_interval", name)
    elif "activation_checkpointing" in ds:
        notes.append(f"{name}: 'activation_checkpointing' only tunes how checkpoints are kept; a pipeline "
                     "checkpoints its layers when pipeline.activation_checkpoint_interval (or PipelineModule's "
                     "activation_checkpoint_interval) is > 0, which this config does not set: recompute stays "
                     f"{data.get('training', {}).get('recompute', 'none')!r}")
    stages = data.get("pipeline", {}).get("stages", 1)
    for key in sorted(set(pipe) - set(PIPELINE_KEYS_READ)):
        extra = ""
        if key == "stages":
            extra = (f" (here {pipe[key]!r}; the scenario's pipeline.stages is {stages})"
                     if pipe[key] != stages else f" (here {pipe[key]!r}, as the scenario's pipeline.stages)")
        notes.append(f"{name}: DeepSpeed ignores pipeline.{key}{extra}: the stage count is PipelineModule(num_stages=...) "
                     "and a rank's stage comes from the process topology; in ppsim set pipeline.stages in the scenario")
    return data, notes
