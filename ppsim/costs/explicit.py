"""Stage costs the user gives in milliseconds (the scenario's ``costs`` section).

Each value is one number for every stage or one per stage (``p2p_ms``: also one per stage
boundary); with v chunks per rank each virtual stage costs 1/v of its rank's figure, so changing
the schedule keeps the same model. With several copies of the model (DualPipe) a stage is a larger
share of one copy: it costs copies / v of the figure of the stage it is in its copy. The link is
pure latency.
"""

from __future__ import annotations

from ppsim.costs.layout import Layout
from ppsim.costs.table import CostTable, Link, memory_rules
from ppsim.inputs.scenario import CostsSpec, Scenario, per_stage


def explicit_costs(s: Scenario, given: CostsSpec, layout: Layout, stage_to_rank: tuple[int, ...]) -> CostTable:
    """The CostTable of ``given`` for the scenario's virtual stages, virtual stage k costing 1/v of
    its rank's (``stage_to_rank[k]``) figures, or with copies of the model as the module says
    (memory from ``layout`` when it has a model)."""
    p, v = s.pipeline.stages, s.pipeline.chunks
    forward, backward, weight_grad, optimizer, allreduce = (
        per_stage(getattr(given, k), p)
        for k in ("forward_ms", "backward_ms", "weight_grad_ms", "optimizer_ms", "allreduce_ms"))
    stages = []
    pipes = layout.pipes
    share = pipes / v  # of a rank's figures, one virtual stage's
    for k in range(p * v):
        r = stage_to_rank[k] if pipes == 1 else k % (p * v // pipes)  # the figures of its rank, or of its place in its copy
        stages.append(layout.stage_cost(k, forward_ms=forward[r] * share, backward_ms=backward[r] * share,
                                        weight_grad_ms=weight_grad[r] * share, optimizer_ms=optimizer[r] * share,
                                        allreduce_ms=allreduce[r] * share))
    # p values: the transfer out of rank r; p - 1 values: one per boundary (cyclically over chunks)
    p2p = per_stage(given.p2p_ms, p)
    out_of_rank = len(p2p) == p
    links = tuple(Link(latency_ms=p2p[stage_to_rank[b] if out_of_rank else b % len(p2p)])
                  for b in range(max(1, p * v - 1)))
    return CostTable(stages=tuple(stages), message_bytes=layout.message_bytes, links=links,
                     clip_allreduce_ms=2 * (p - 1) * links[0].latency_ms,
                     **memory_rules(s.pipeline))
