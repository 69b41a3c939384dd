"""Partition: how many transformer blocks each virtual stage gets.

- ``uniform``: the same count everywhere (layers must divide evenly);
- ``balanced``: minimise the slowest stage's time, counting the embedding on the first stage and
  the LM head on the last (exact: bisection on the bottleneck with a greedy feasibility test);
  when a rank holds several virtual stages (interleaved, V placement) what must be even is the
  work of each rank: the blocks go to the least loaded rank, then are spread over its stages;
- explicit: the user's counts (checked with the scenario).
"""

from __future__ import annotations

from collections.abc import Sequence

from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import Scenario


def blocks_per_stage(s: Scenario, stage_to_rank: Sequence[int], block: float, first_extra: float,
                     last_extra: float) -> list[int]:
    """Blocks per virtual stage as ``pipeline.partition`` says; ``balanced`` evens out ``block``
    per layer plus the extras of the first and last stage (FLOPs, or measured milliseconds) over
    the stages, or over the ranks when a rank holds several (``stage_to_rank``)."""
    how = s.pipeline.partition
    layers = s.model.layers if s.model else 0
    n_virtual = len(stage_to_rank)
    if isinstance(how, list):
        return list(how)
    if how == "uniform":
        return uniform(layers, n_virtual)
    if len(set(stage_to_rank)) < n_virtual:
        return balanced_over_ranks(layers, stage_to_rank, block, first_extra, last_extra)
    return balanced([block] * layers, n_virtual, first_extra, last_extra)


def uniform(layers: int, parts: int) -> list[int]:
    if layers % parts:
        raise ScenarioError(
            f"{layers} layers do not split evenly over {parts} stages; use partition: balanced",
            field="pipeline.partition",
        )
    return [layers // parts] * parts


def _fits(costs: Sequence[float], parts: int, cap: float, first: float, last: float) -> list[int] | None:
    """Greedy: give each part as many layers as fit under ``cap`` while leaving one per remaining
    part; the last part takes the rest. Returns the counts, or None if ``cap`` is too small."""
    n = len(costs)
    counts: list[int] = []
    i = 0
    for k in range(parts - 1):
        load = first if k == 0 else 0.0
        take = 0
        while i < n - (parts - 1 - k) and (take == 0 or load + costs[i] <= cap):
            if load + costs[i] > cap:
                return None
            load += costs[i]
            i += 1
            take += 1
        if take == 0:
            return None
        counts.append(take)
    rest = sum(costs[i:]) + last + (first if parts == 1 else 0.0)
    if n - i < 1 or rest > cap:
        return None
    counts.append(n - i)
    return counts


def balanced(layer_costs: Sequence[float], parts: int, first_extra: float = 0.0, last_extra: float = 0.0) -> list[int]:
    """Contiguous split of layers into ``parts`` (each at least one layer) minimising the largest
    part's cost, where part 0 also pays ``first_extra`` and the last part ``last_extra``."""
    n = len(layer_costs)
    if parts < 1 or n < parts:
        raise ScenarioError(f"cannot split {n} layers into {parts} stages of at least one layer", field="pipeline.stages")
    lo = max(max(layer_costs), (sum(layer_costs) + first_extra + last_extra) / parts)
    hi = (sum(layer_costs) + first_extra + last_extra) * (1 + 1e-9) + 1e-12  # everything fits, whatever the rounding
    best = _fits(layer_costs, parts, hi, first_extra, last_extra)
    if best is None:  # cannot happen: at ``hi`` everything fits on one part
        raise ScenarioError(f"cannot split {n} layers into {parts} stages", field="pipeline.partition")
    for _ in range(100):
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
        mid = (lo + hi) / 2
        got = _fits(layer_costs, parts, mid, first_extra, last_extra)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    return best


def balanced_over_ranks(layers: int, stage_to_rank: Sequence[int], block: float, first_extra: float = 0.0,
                        last_extra: float = 0.0) -> list[int]:
    """Blocks of equal cost ``block`` over virtual stages placed on ranks by ``stage_to_rank``,
    every stage at least one: each block goes to the rank whose work is least (the embedding and
    the head counted on the ranks of the first and last stage), which makes the most loaded rank
    as light as it can be; then each rank's blocks go one by one to its least loaded stage, which
    evens the stages of a rank (and so the flow through the pipeline)."""
    n = len(stage_to_rank)
    if layers < n:
        raise ScenarioError(f"cannot split {layers} layers into {n} stages of at least one layer",
                            field="pipeline.stages")
    extra = [0.0] * n
    extra[0] += first_extra
    extra[-1] += last_extra
    ranks = sorted(set(stage_to_rank))
    stages_of = {r: [k for k in range(n) if stage_to_rank[k] == r] for r in ranks}
    per_rank = {r: len(stages_of[r]) for r in ranks}  # one block per stage to start with
    load = {r: per_rank[r] * block + sum(extra[k] for k in stages_of[r]) for r in ranks}
    for _ in range(layers - n):
        r = min(ranks, key=lambda q: (load[q], q))
        per_rank[r] += 1
        load[r] += block
    counts = [1] * n
    for r in ranks:
        for _ in range(per_rank[r] - len(stages_of[r])):
            k = min(stages_of[r], key=lambda j: (counts[j] * block + extra[j], j))
            counts[k] += 1
    return counts


def stage_loads(counts: Sequence[int], layer_costs: Sequence[float], first_extra: float, last_extra: float) -> list[float]:
    """Cost of every part for the given counts (used to report and to test balance)."""
    loads, i = [], 0
    for k, c in enumerate(counts):
        load = sum(layer_costs[i : i + c])
        if k == 0:
            load += first_extra
        if k == len(counts) - 1:
            load += last_extra
        loads.append(load)
        i += c
    return loads
