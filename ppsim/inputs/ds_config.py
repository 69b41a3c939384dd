"""Import a DeepSpeed config (``ds_config.json``) into a scenario, with DeepSpeed's own rules.

What is imported: the batch sizes (``train_batch_size``, ``train_micro_batch_size_per_gpu``,
``gradient_accumulation_steps``, which for a pipeline is the micro-batch count per step),
the precision (``fp16`` / ``bf16``), the ZeRO stage with ``overlap_comm`` and ``reduce_bucket_size``
(elements), ``gradient_clipping`` and activation
checkpointing (``pipeline.activation_checkpoint_interval`` > 0: every block recomputed, i.e.
``recompute: full``). The rules are DeepSpeed's: train_batch_size = micro-batch x accumulation x
data-parallel, any two giving the third; fp16 and bf16 not both; ZeRO 2 and 3 not with a pipeline.
Keys DeepSpeed silently ignores — above all ``pipeline.stages`` and ``pipeline.stage_id``, which
many tutorials show — come back as notes that say how the stage count is really set.

Every key read is checked: a value of the wrong type, out of range, NaN or infinite is one error
naming the key (``"auto"``, as the Hugging Face Trainer writes, counts as not given; ``null`` does
for the batch sizes only: elsewhere DeepSpeed fails on it).
"""

from __future__ import annotations

import json
import math
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


def _bad(name: str, key: str, want: str, value: Any) -> ScenarioError:
    return ScenarioError(f"{name}: {key} must be {want}, got {value!r}", field="deepspeed")


def _section(ds: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """The object under ``key`` ({} if absent)."""
    value = ds.get(key, {})
    if not isinstance(value, dict):
        raise _bad(name, key, "an object of keys", value)
    return value


def _enabled(ds: dict[str, Any], key: str, name: str) -> bool | None:
    """``key.enabled`` (None: "auto", the Trainer decides)."""
    value = _section(ds, key, name).get("enabled", False)
    if value == "auto":
        return None
    if not isinstance(value, bool):
        raise _bad(name, f"{key}.enabled", "true or false", value)
    return value


def _flag(section: dict[str, Any], key: str, name: str, within: str = "") -> bool | None:
    """A true/false setting (None: not given); ``within`` is the section's key, for the message."""
    value = section.get(key)
    if key in section and not isinstance(value, bool):
        raise _bad(name, within + key, "true or false", value)
    return value


def _number(section: dict[str, Any], key: str, name: str, want: str, *, positive: bool, within: str = ""
            ) -> float | None:
    """A finite number >= 0 (> 0 if ``positive``); None if not given or "auto"; null is refused."""
    if key not in section or section[key] == "auto":
        return None
    value = section[key]
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        raise _bad(name, within + key, want, value)
    return value


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
    fp16, bf16 = _enabled(ds, "fp16", name), _enabled(ds, "bf16", name)
    if fp16 and bf16:
        raise ScenarioError(f"{name}: fp16 and bf16 are both enabled; DeepSpeed allows one: disable the other",
                            field="deepspeed")
    dtype = "fp16" if fp16 else "bf16" if bf16 else None if None in (fp16, bf16) else "fp32"
    if "model" in data and dtype is not None:  # "auto": the scenario's dtype stands
        _set(data, "model", "dtype", dtype, "fp16/bf16.enabled", name)
    dp = int(data.get("data_parallel", 1))
    train, micro, acc = batch_sizes(_int(ds, "train_batch_size", name), _int(ds, "train_micro_batch_size_per_gpu", name),
                                    _int(ds, "gradient_accumulation_steps", name), dp, name)
    _set(data, "training", "micro_batch", micro, "train_micro_batch_size_per_gpu", name)
    _set(data, "pipeline", "microbatches", acc, "gradient_accumulation_steps", name)
    _set(data, "training", "global_batch", train, "train_batch_size", name)
    zero = _section(ds, "zero_optimization", name)
    if "stage" in zero:
        stage = zero["stage"]
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise _bad(name, "zero_optimization.stage", "0, 1, 2 or 3", stage)
        if stage >= 2 and data.get("pipeline", {}).get("stages", 1) > 1:
            raise ScenarioError(f"{name}: zero_optimization.stage is {stage}, and DeepSpeed's pipeline engine "
                                "refuses stages 2 and 3 (they partition the gradients a pipeline accumulates); "
                                "use 0 or 1", field="deepspeed")
        _set(data, "training", "zero_stage", stage, "zero_optimization.stage", name)
    multi = _flag(zero, "use_multi_rank_bucket_allreduce", name, "zero_optimization.")
    if multi is not None:
        _set(data, "training", "zero_reduce", "allreduce" if multi else "reduce_scatter",
             "zero_optimization.use_multi_rank_bucket_allreduce", name)
    overlap = _flag(zero, "overlap_comm", name, "zero_optimization.")
    if overlap is not None:
        _set(data, "training", "overlap_grad_reduce", overlap, "zero_optimization.overlap_comm", name)
    bucket = _number(zero, "reduce_bucket_size", name, "a number of elements > 0", positive=True,
                     within="zero_optimization.")
    if bucket is not None:
        dtype_bytes = DTYPE_BYTES.get(data.get("model", {}).get("dtype", ""), DTYPE_BYTES["fp32"])
        _set(data, "training", "bucket_mb", bucket * dtype_bytes / 1e6, "zero_optimization.reduce_bucket_size", name)
    clip = _number(ds, "gradient_clipping", name, "a number >= 0 (0: no clipping)", positive=False)
    if clip is not None:
        _set(data, "training", "grad_clip", float(clip), "gradient_clipping", name)
    pipe = _section(ds, "pipeline", name)
    interval = pipe.get("activation_checkpoint_interval", 0)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise _bad(name, "pipeline.activation_checkpoint_interval", "an integer >= 0 (0: no checkpointing)", interval)
    _section(ds, "activation_checkpointing", name)
    if interval > 0:
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
