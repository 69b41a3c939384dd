"""Two copies of the model (DualPipe): each stage's gradients summed between its copies.

DualPipe feeds micro-batches from both ends of the pipeline, so every rank holds one stage of each
copy and the two copies of a stage sit on rank r and rank p - 1 - r. Before the optimizer steps,
each stage's gradients are summed over its copies: an all-reduce over the copies' ranks, at the end
of the step (after the data-parallel reduction, on the shard each device steps under ZeRO), added
to the stage's optimizer step as the tied embedding's all-reduce is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ppsim.costs.collectives import ring_allreduce_ms
from ppsim.costs.layout import Layout
from ppsim.costs.table import Link, StageCost
from ppsim.inputs.scenario import Scenario


def copies_summed(s: Scenario, stages: Sequence[StageCost], layout: Layout, link: Link | None) -> list[StageCost]:
    """``stages`` with each one's sum over the layout's copies of the model added to its optimizer
    step (unchanged with one copy). The bytes are the gradients the device steps: all its own
    parameters', or under ZeRO its shard (the dense ones over the data-parallel replicas, the
    experts over theirs)."""
    if layout.pipes == 1 or link is None or not layout.stages:
        return list(stages)
    sharded = s.training.zero_stage >= 1
    out = []
    for c, st in zip(stages, layout.stages, strict=True):
        dense, experts = st.params - st.expert_params, st.expert_params
        stepped = dense / s.weight_replicas + experts / s.expert_replicas if sharded else dense + experts
        out.append(replace(c, optimizer_ms=c.optimizer_ms
                           + ring_allreduce_ms(stepped * layout.dtype_bytes, layout.pipes, link)))
    return out
