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
        name = folder / f"{stem}.megatron.sh"
        return Export(framework, {".megatron.sh": args_file(args, command)}, check,
                      [f"source {name}", f"torchrun --nproc-per-node ... pretrain_gpt.py \"${{{ARRAY}[@]}}\" "
                       "--data-path ... --tokenizer-type ... --train-iters ..."], notes)
    if framework == "torchtitan":
        from ppsim.frameworks.torchtitan import toml_text, torchtitan_config

        csv_name = f"{stem}.schedule.csv"
        sections = torchtitan_config(s, built.plan, stages, csv_name, refuse, notes)
        refuse.check()
        files = {".torchtitan.toml": toml_text(sections, command)}
        if s.pipeline.stages > 1:
            files[".schedule.csv"] = built.plan.to_csv()
        return Export(framework, files, check,
                      [f"torchrun --nproc-per-node ... -m torchtitan.train --job.config_file "
                       f"{folder / (stem + '.torchtitan.toml')} (from the folder that holds {folder / csv_name}: "
                       "the TOML names it by a relative path)"], notes)
    from ppsim.frameworks.deepspeed import ds_config, parts_file

    config = ds_config(s, refuse, notes)
    refuse.check()
    return Export(framework, {".ds_config.json": json.dumps(config, indent=1) + "\n",
                              ".pipeline_parts.json": parts_file(stages, command)}, check,
                  [f"deepspeed ... your_train.py --deepspeed_config {folder / (stem + '.ds_config.json')}, its "
                   f"PipelineModule cut at the parts of {folder / (stem + '.pipeline_parts.json')}"], notes)


__all__ = ["FRAMEWORKS", "SUFFIXES", "CannotExport", "Export", "export"]
