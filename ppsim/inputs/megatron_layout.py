"""Megatron-LM's ``--pipeline-model-parallel-layout``, read and written: a string of virtual stages
parted by ``|``, each the layers it holds in order: ``E`` the embedding, ``t`` a transformer block,
``m`` a multi-token-prediction layer, ``L`` the loss (and the LM head); ``x*n`` repeats a layer and
``(...)*n`` a group, commas and spaces are ignored (``Et*4|(t*4|)*14tmL``: DeepSeek-V3's 61 blocks
and an MTP layer on 16 stages). The rules a layout must keep are Megatron-Core's
(``PipelineParallelLayerLayout``, read from its source in December 2026): the stages a multiple of
the pipeline size, the embedding first and once, the loss last and once, every block and MTP
layer counted, no block after an MTP layer, MTP layers in a rank's last virtual stage.
"""

from __future__ import annotations

import re
from itertools import groupby

from ppsim.errors import ScenarioError

LAYERS = {"E": "the embedding", "t": "a transformer block", "m": "a multi-token-prediction layer", "L": "the loss"}
_ALLOWED = re.compile(r"[EtmL|*()0-9, ]*")
FIELD = "pipeline_model_parallel_layout"


def parse_layout(text: str) -> list[list[str]]:
    """The layout's virtual stages, each its layers in order (``["E", "t", "t"]``); refuses what
    Megatron's parser cannot read, naming the first character at fault."""
    if not _ALLOWED.fullmatch(text):
        bad = next(i for i, c in enumerate(text) if not _ALLOWED.fullmatch(c))
        raise ScenarioError(f"{text!r}: {text[bad]!r} at {bad} is not a layer ({', '.join(LAYERS)}), '|', '*', "
                            "a count or a parenthesis", field=FIELD)
    flat = text.replace(",", "").replace(" ", "")
    while "(" in flat:  # innermost groups first
        expanded = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
        if expanded == flat:
            raise ScenarioError(f"{text!r}: a group in parentheses must be followed by *n", field=FIELD)
        flat = expanded
    flat = re.sub(r"([EtmL])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), flat)
    if re.search(r"[*()0-9]", flat):
        raise ScenarioError(f"{text!r}: a count must follow a layer or a group as *n", field=FIELD)
    return [list(stage) for stage in flat.split("|")]


def check_layout(stages: list[list[str]], layers: int, pipeline: int, mtp_layers: int = 0) -> None:
    """Megatron-Core's rules for ``stages`` on ``pipeline`` ranks with ``layers`` blocks and
    ``mtp_layers`` MTP layers; a ScenarioError naming the rule and the fix."""
    flat = [x for stage in stages for x in stage]
    if len(stages) % pipeline:
        raise ScenarioError(f"{len(stages)} virtual stages do not split over {pipeline} pipeline ranks; give a "
                            "multiple of them", field=FIELD)
    if not flat or flat[0] != "E" or flat.count("E") != 1:
        raise ScenarioError("the embedding (E) must come first, once", field=FIELD)
    if flat[-1] != "L" or flat.count("L") != 1:
        raise ScenarioError("the loss (L) must come last, once", field=FIELD)
    if flat.count("t") != layers:
        raise ScenarioError(f"the layout holds {flat.count('t')} transformer blocks (t), the model {layers}: every "
                            "block once", field=FIELD)
    if flat.count("m") != mtp_layers:
        raise ScenarioError(f"the layout holds {flat.count('m')} MTP layers (m), the model {mtp_layers}", field=FIELD)
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise ScenarioError("no transformer block (t) may follow an MTP layer (m)", field=FIELD)
    chunks = len(stages) // pipeline
    for k, stage in enumerate(stages):
        if "m" in stage and k // pipeline != chunks - 1:
            raise ScenarioError(f"an MTP layer (m) in virtual stage {k}: Megatron places them in a rank's last "
                                "virtual stage", field=FIELD)


def blocks_per_stage(stages: list[list[str]]) -> list[int]:
    """How many transformer blocks each virtual stage holds (ppsim's ``pipeline.partition``)."""
    return [stage.count("t") for stage in stages]


def format_layout(blocks: list[int], mtp_layers: int = 0) -> str:
    """The layout string of ``blocks`` per virtual stage, the embedding on the first, the MTP layers
    and the loss on the last; runs of equal inner stages as ``(...|)*n`` (what :func:`parse_layout`
    reads back to the same stages)."""
    if not blocks:
        raise ScenarioError("a layout needs at least one stage", field=FIELD)

    def layers(n: int) -> str:
        return "" if n == 0 else "t" if n == 1 else f"t*{n}"

    texts = [layers(n) for n in blocks]
    texts[0] = "E" + texts[0]
    texts[-1] += "m" * mtp_layers + "L"
    if len(texts) == 1:
        return texts[0]
    inner = []
    for text, run in groupby(texts[1:-1]):
        k = len(list(run))
        inner.append(f"({text}|)*{k}" if k > 1 else f"{text}|")
    return texts[0] + "|" + "".join(inner) + texts[-1]
