"""A framework's configuration read back into a ppsim scenario (``ppsim import``): Megatron-LM's
arguments, torchtitan's TOML (with its schedule CSV), or a DeepSpeed config (with the pipeline
parts ``ppsim export`` writes); what the framework does not say (the device, the cluster, a
torchtitan model's shape) comes from a base scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ppsim.errors import ScenarioError, file_error, shown_path

#: the DeepSpeed config keys that tell its JSON from the parts file
_DS_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{shown_path(path)} does not exist; check the path", field="FILES") from None
    except (OSError, UnicodeDecodeError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            raise ScenarioError(f"{shown_path(path)} is not text", field="FILES") from None
        raise file_error(path, exc, writing=False, field="FILES") from None


def framework_of(paths: list[Path]) -> str:
    """Which framework's files these are: a TOML is torchtitan's, a JSON with a batch size
    DeepSpeed's, anything holding ``--flags`` Megatron's arguments."""
    if any(p.suffix == ".toml" for p in paths):
        return "torchtitan"
    if any(p.suffix == ".json" for p in paths):
        return "deepspeed"
    if "--" in _text(paths[0]):
        return "megatron"
    raise ScenarioError(f"{shown_path(paths[0])} is none of a Megatron argument list, a torchtitan TOML or a "
                        "DeepSpeed config JSON", field="FILES")


def import_scenario(paths: list[Path], base: dict[str, Any], gpus: int | None) -> tuple[dict[str, Any], str, list[str]]:
    """(the scenario mapping, the framework, notes) of the framework files ``paths`` over ``base``."""
    framework = framework_of(paths)
    notes: list[str] = []
    if framework == "megatron":
        if len(paths) != 1:
            raise ScenarioError("Megatron's arguments are one file", field="FILES")
        from ppsim.frameworks.megatron_read import argument_tokens, flags, scenario_mapping

        words = argument_tokens(_text(paths[0]))
        data = scenario_mapping(flags(words), base, gpus, notes)
    elif framework == "torchtitan":
        from ppsim.frameworks.torchtitan_read import read_toml
        from ppsim.frameworks.torchtitan_read import scenario_mapping as titan

        toml = next(p for p in paths if p.suffix == ".toml")
        _text(toml)
        data = titan(read_toml(toml), toml.parent, base, notes, gpus)
    else:
        data = _deepspeed(paths, base, notes)
    data = {"name": data.get("name") or paths[0].stem, **{k: v for k, v in data.items() if k != "name"}}
    return data, framework, notes


def scenario_yaml(data: dict[str, Any]) -> str:
    """The scenario mapping as YAML in its own key order, lists of numbers on one line."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def short_lists(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.Node:
        flat = all(isinstance(x, (int, float, str)) for x in value)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flat)

    Dumper.add_representer(list, short_lists)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, width=120)


def _deepspeed(paths: list[Path], base: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    from ppsim.frameworks.deepspeed import blocks_of_parts
    from ppsim.inputs.ds_config import apply_ds_config

    if not base.get("model"):
        raise ScenarioError("a DeepSpeed config holds no model: give --base SCENARIO with the model", field="--base")
    docs = {}
    for p in paths:
        try:
            docs[p] = json.loads(_text(p))
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{shown_path(p)}: not valid JSON (line {exc.lineno})", field="FILES") from None
    configs = [p for p, d in docs.items() if isinstance(d, dict) and any(k in d for k in _DS_KEYS)]
    if len(configs) != 1:
        raise ScenarioError("give one DeepSpeed config JSON (with train_batch_size or its parts), and its pipeline parts "
                            "file if any", field="FILES")
    data, ds_notes = apply_ds_config(dict(base), docs[configs[0]], configs[0].name)
    notes += ds_notes
    for p, d in docs.items():
        if p == configs[0]:
            continue
        cuts = d.get("parts") if isinstance(d, dict) else d
        if not (isinstance(cuts, list) and len(cuts) >= 2 and all(isinstance(x, int) for x in cuts)):
            raise ScenarioError(f"{shown_path(p)}: a parts file lists each stage's first layer and the end "
                                "([0, 6, 11, ...])", field="FILES")
        pipeline = dict(data.get("pipeline") or {})
        pipeline["partition"] = blocks_of_parts(cuts)
        pipeline["stages"] = len(cuts) - 1
        data["pipeline"] = pipeline
    return data
