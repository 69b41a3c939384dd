"""The plan as a DeepSpeed config (``ds_config.json``) and the PipelineModule's parts: each
stage's first layer in the list of layers the module is built from (the embedding, the blocks,
the head), then its end. DeepSpeed runs one pipeline schedule (its TrainSchedule, 1F1B) and ZeRO 0
or 1 beside a pipeline; its ``partition_method`` takes ``uniform``, ``parameters`` or
``type:regex``; the parts say which of them gives ppsim's partition, or that the module must be
given the parts itself. Names from :data:`ppsim.frameworks.names.DEEPSPEED`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ppsim.errors import ScenarioError
from ppsim.formats import EXPORT_JSON_KEY
from ppsim.frameworks.names import DEEPSPEED as N
from ppsim.frameworks.placement import StageLayers
from ppsim.frameworks.result import Refusals
from ppsim.inputs.scenario import Scenario
from ppsim.plan import schedules as registry

FRAMEWORK = "deepspeed"  #: its key in the schedule registry's native names


def ds_config(s: Scenario, refuse: Refusals, notes: list[str]) -> dict[str, Any]:
    """The DeepSpeed config of the plan."""
    model, tr, pl = s.model, s.training, s.pipeline
    assert model is not None
    out: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        *path, name = N[key].name.split(".")
        section = out
        for part in path:
            section = section.setdefault(part, {})
        section[name] = value

    own = registry.native(FRAMEWORK)
    if pl.stages > 1 and registry.describe(pl.schedule).native_name(FRAMEWORK) is None:
        runs = ", ".join(f"{info.name.upper()} (its {info.native_name(FRAMEWORK)})" for info in own)
        refuse.add(f"DeepSpeed's pipeline runs {runs} only, not {pl.schedule}: export with --schedule "
                   f"{' or '.join(info.name for info in own)}")
    put("global_batch", s.global_batch)
    put("micro_batch", tr.micro_batch)
    put("microbatches", s.microbatches)
    if tr.zero_stage >= 2 and pl.stages > 1:
        refuse.add(f"DeepSpeed refuses ZeRO-{tr.zero_stage} with a pipeline: export with --zero-stage 1")
    put("zero", tr.zero_stage)
    if model.dtype == "bf16":
        put("bf16", True)
    elif model.dtype == "fp16":
        put("fp16", True)
    put("clip", tr.grad_clip)
    if tr.recompute == "full":
        if tr.recompute_layers:
            refuse.add("DeepSpeed checkpoints every n-th layer, not the first n of each stage: drop "
                       "training.recompute_layers")
        put("checkpoint_interval", 1)
    elif tr.recompute == "selective":
        refuse.add("DeepSpeed has no selective recomputation: export with --recompute none or full")
    for key, on, what in (("context_parallel", s.context_parallel > 1, "context parallelism"),
                          ("expert_parallel", s.expert_parallel > 1, "expert parallelism"),
                          ("training.fp8", tr.fp8 is not None, "FP8 training"),
                          ("training.fp4", tr.fp4 is not None, "FP4 training"),
                          ("model.pattern", model.pattern is not None, "a hybrid Mamba model"),
                          ("model.mtp_layers", bool(model.mtp_layers), "multi-token prediction module"),
                          ("training.offload_layers", tr.offload_layers > 0, "ppsim's activation offloading")):
        if on:
            refuse.add(f"DeepSpeed's PipelineModule has no {what}: export without {key}")
    if s.tensor_parallel > 1:
        notes.append(f"tensor parallelism {s.tensor_parallel}: the topology's num_mp; DeepSpeed splits no layer "
                     "itself, the layers must (Megatron-DeepSpeed's, or ppexec's)")
    return out


def parts(blocks_per_stage: Sequence[int]) -> list[int]:
    """The PipelineModule's parts over its layers [embedding, block 0, ..., block L-1, head] for the
    blocks of each stage, the embedding on the first and the head on the last: stage k's layers
    are parts[k]:parts[k + 1]."""
    out = [0]
    for k, count in enumerate(blocks_per_stage):
        out.append(out[-1] + count + (k == 0))
    out[-1] += 1  # the head
    return out


def blocks_of_parts(cuts: list[int]) -> list[int]:
    """Blocks per stage of DeepSpeed parts over [embedding, blocks..., head]."""
    sizes = [b - a for a, b in zip(cuts, cuts[1:])]
    if any(x < 0 for x in sizes) or cuts[0] != 0:
        raise ScenarioError(f"parts {cuts} must start at 0 and never fall", field="FILES")
    sizes[0] -= 1
    sizes[-1] -= 1
    if min(sizes) < 0:
        raise ScenarioError(f"parts {cuts} leave no room for the embedding on the first stage or the head on the last",
                            field="FILES")
    return sizes


def uniform_parts(items: int, stages: int) -> list[int]:
    """DeepSpeed's ``partition_method="uniform"``: items / stages each, the first (items mod stages)
    stages one more; with no more items than stages, one each and the rest empty."""
    if items <= stages:
        return [min(k, items) for k in range(stages + 1)]
    chunk, extra = divmod(items, stages)
    out = [0]
    for k in range(stages):
        out.append(out[-1] + chunk + (k < extra))
    return out


#: ``partition_method`` for blocks spread evenly: DeepSpeed balances the layers whose class matches
#: the regular expression (weight 1 each, the rest 0), so equal counts are its only answer
BY_BLOCK_TYPE = "type:<your block class>"


def partition_method(stages: list[StageLayers]) -> str | None:
    """The ``partition_method`` that gives the plan's parts, or None when none does: ``uniform``
    (every layer counted), or balancing the blocks by their type when every stage holds as many."""
    mine = parts([st.blocks for st in stages])
    if mine == uniform_parts(mine[-1], len(stages)):
        return "uniform"
    return BY_BLOCK_TYPE if len({st.blocks for st in stages}) == 1 else None


def parts_file(stages: list[StageLayers], command: str) -> str:
    """The parts, what each stage holds, and the partition method that gives them (if one does)."""
    method = partition_method(stages)

    def holds(st: StageLayers) -> str:
        blocks = (f"block {st.first_block}" if st.blocks == 1 else
                  f"blocks {st.first_block}-{st.first_block + st.blocks - 1}" if st.blocks else "no block")
        return ", ".join((["the embedding"] if st.embedding else []) + [blocks] + (["the head"] if st.head else []))

    lines = [f' "{EXPORT_JSON_KEY}": {json.dumps(command)},',
             ' "layers": "the PipelineModule\'s list: the embedding, each block, the head (final norm, LM head)",',
             f' "parts": {json.dumps(parts([st.blocks for st in stages]))},',
             ' "stages": [',
             ",\n".join(f"  {json.dumps(f'stage {st.stage} (rank {st.rank}): {holds(st)}')}" for st in stages),
             " ],",
             f' "partition_method": {json.dumps(method or "none of DeepSpeed: give PipelineModule these parts")}']
    return "{\n" + "\n".join(lines) + "\n}\n"
