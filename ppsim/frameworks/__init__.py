"""ppsim's plan as the configuration of the framework a user trains with: Megatron-LM's
arguments, torchtitan's TOML and schedule CSV, DeepSpeed's config and pipeline parts
(:func:`export`); each framework's names in :mod:`ppsim.frameworks.names`."""

from __future__ import annotations

import json
from pathlib import Path

from ppsim.frameworks.placement import layer_check, stage_layers
from ppsim.frameworks.result import CannotExport, Export, Refusals
from ppsim.inputs.scenario import Scenario

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
#: the files each framework's export may write, by their suffix after the scenario's stem
SUFFIXES = {"megatron": (".megatron.sh",), "torchtitan": (".torchtitan.toml", ".schedule.csv"),
            "deepspeed": (".ds_config.json", ".pipeline_parts.json")}


def export(s: Scenario, framework: str, stem: str, command: str, folder: Path = Path(".")) -> Export:
    """The files ``framework`` needs to run ``s``'s plan (named ``stem`` + suffix, in ``folder`` as
    the usage lines name them), or CannotExport with every reason it cannot run it as predicted.
    ``command`` (the command line that exported them) heads each file after ppsim's mark."""
    from ppsim.prediction import build

    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}")
    built = build(s)
    s = built.scenario  # auto's pick of schedule and chunks, where it searched
    stages = stage_layers(built)
    assert s.model is not None
    check = layer_check(stages, s.model.layers)
    refuse, notes = Refusals(framework), list[str]()
    if framework == "megatron":
        from ppsim.frameworks.megatron import ARRAY, args_file, megatron_args

        args = megatron_args(s, stages, refuse, notes)
        refuse.check()
        (sh,) = SUFFIXES[framework]
        name = folder / f"{stem}{sh}"
        return Export(framework, {sh: args_file(args, command)}, check,
                      [f"source {name}", f"torchrun --nproc-per-node ... pretrain_gpt.py \"${{{ARRAY}[@]}}\" "
                       "--data-path ... --tokenizer-type ... --train-iters ..."], notes)
    if framework == "torchtitan":
        from ppsim.frameworks.torchtitan import toml_text, torchtitan_config

        toml, csv = SUFFIXES[framework]
        csv_name = f"{stem}{csv}"
        sections = torchtitan_config(s, built.plan, stages, csv_name, refuse, notes)
        refuse.check()
        files = {toml: toml_text(sections, command)}
        if s.pipeline.stages > 1:
            files[csv] = built.plan.to_csv()
        return Export(framework, files, check,
                      [f"torchrun --nproc-per-node ... -m torchtitan.train --job.config_file "
                       f"{folder / (stem + toml)} (from the folder that holds {folder / csv_name}: "
                       "the TOML names it by a relative path)"], notes)
    from ppsim.frameworks.deepspeed import ds_config, parts_file

    config = ds_config(s, refuse, notes)
    refuse.check()
    cfg, cuts = SUFFIXES[framework]
    return Export(framework, {cfg: json.dumps(config, indent=1) + "\n", cuts: parts_file(stages, command)}, check,
                  [f"deepspeed ... your_train.py --deepspeed_config {folder / (stem + cfg)}, its PipelineModule "
                   f"cut at the parts of {folder / (stem + cuts)}"], notes)


__all__ = ["FRAMEWORKS", "SUFFIXES", "CannotExport", "Export", "export"]
