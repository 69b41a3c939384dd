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
from dataclasses import dataclass
from functools import lru_cache

from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import Scenario


def blocks_per_stage(s: Scenario, stage_to_rank: Sequence[int], block: float | Sequence[float], first_extra: float,
                     last_extra: float) -> list[int]:
    """Blocks per virtual stage as ``pipeline.partition`` says; ``balanced`` evens out ``block``
    per layer (one cost for every layer, or each layer's) plus the extras of the first and last
    stage (FLOPs, or measured milliseconds) over the stages, or over the ranks when a rank holds
    several (``stage_to_rank``; there every block counts as the layers' mean)."""
    how = s.pipeline.partition
    layers = s.model.layers if s.model else 0
    n_virtual = len(stage_to_rank)
    if isinstance(how, list):
        return list(how)
    if how == "uniform":
        return uniform(layers, n_virtual)
    costs = (float(block),) * layers if isinstance(block, (int, float)) else tuple(block)
    if len(set(stage_to_rank)) < n_virtual:
        return list(_over_ranks_once(layers, tuple(stage_to_rank), sum(costs) / max(layers, 1), first_extra, last_extra))
    return list(_balanced_once(costs, n_virtual, first_extra, last_extra))


@lru_cache(maxsize=256)  # a search's plans of one size and layer costs share their partition
def _balanced_once(costs: tuple[float, ...], parts: int, first_extra: float, last_extra: float) -> tuple[int, ...]:
    return tuple(balanced(costs, parts, first_extra, last_extra))


@lru_cache(maxsize=256)
def _over_ranks_once(layers: int, stage_to_rank: tuple[int, ...], block: float, first_extra: float,
                     last_extra: float) -> tuple[int, ...]:
    return tuple(balanced_over_ranks(layers, stage_to_rank, block, first_extra, last_extra))


def uniform(layers: int, parts: int) -> list[int]:
    if layers % parts:
        raise ScenarioError(
            f"{layers} layers do not split evenly over {parts} stages; use partition: balanced",
            field="pipeline.partition",
        )
    return [layers // parts] * parts


def _fits(costs: Sequence[float], parts: int, cap: float, first: float, last: float) -> list[int] | None:
    """Greedy: give each part as many layers as fit under ``cap`` while leaving one for each inner
    part still to come (the first and the last part, which also hold the embedding and the LM head,
    may take none); the last part takes the rest. Returns the counts, or None if ``cap`` is too small."""
    n = len(costs)
    if parts == 1:
        return [n] if sum(costs) + first + last <= cap else None
    counts: list[int] = []
    i = 0
    for k in range(parts - 1):
        load = first if k == 0 else 0.0
        if load > cap:
            return None
        need = 1 if k > 0 else 0  # an inner part holds at least one layer
        reserved = parts - 2 - k  # the inner parts after this one
        take = 0
        while i < n - reserved and (take < need or load + costs[i] <= cap):
            if load + costs[i] > cap:
                return None
            load += costs[i]
            i += 1
            take += 1
        if take < need:
            return None
        counts.append(take)
    if sum(costs[i:]) + last > cap:
        return None
    counts.append(n - i)
    return counts


def balanced(layer_costs: Sequence[float], parts: int, first_extra: float = 0.0, last_extra: float = 0.0) -> list[int]:
    """Contiguous split of layers into ``parts`` minimising the largest part's cost, where part 0
    also pays ``first_extra`` and the last part ``last_extra``: every part holds a layer but the
    first and the last, which may hold only the embedding or the LM head (as a Megatron layout's
    empty stages do) when that is what evens the parts."""
    n = len(layer_costs)
    inner = max(0, parts - 2)
    if parts < 1 or n < max(1, inner):
        raise ScenarioError(f"cannot split {n} layers into {parts} stages: every stage but the first and the last "
                            "needs a layer", field="pipeline.stages")
    total = sum(layer_costs) + first_extra + last_extra
    lo = max(max(layer_costs), total / parts, first_extra, last_extra)
    hi = total * (1 + 1e-9) + 1e-12  # everything fits, whatever the rounding
    best = _fits(layer_costs, parts, hi, first_extra, last_extra)
    if best is None:  # cannot happen: at ``hi`` every part's load fits
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
    every stage at least one but the first and the last (which hold the embedding and the head and
    may hold no block): each block goes to the rank whose work is least (the embedding and the
    head counted on the ranks of the first and last stage), which makes the most loaded rank as
    light as it can be; then each rank's blocks go one by one to its least loaded stage, which
    evens the stages of a rank (and so the flow through the pipeline)."""
    n = len(stage_to_rank)
    floor = [0 if k in (0, n - 1) else 1 for k in range(n)]  # blocks a stage must hold
    if layers < max(1, sum(floor)):
        raise ScenarioError(f"cannot split {layers} layers into {n} stages: every stage but the first and the last "
                            "needs a layer", field="pipeline.stages")
    extra = [0.0] * n
    extra[0] += first_extra
    extra[-1] += last_extra
    ranks = sorted(set(stage_to_rank))
    stages_of = {r: [k for k in range(n) if stage_to_rank[k] == r] for r in ranks}
    per_rank = {r: sum(floor[k] for k in stages_of[r]) for r in ranks}
    load = {r: per_rank[r] * block + sum(extra[k] for k in stages_of[r]) for r in ranks}
    for _ in range(layers - sum(floor)):
        r = min(ranks, key=lambda q: (load[q], q))
        per_rank[r] += 1
        load[r] += block
    counts = list(floor)
    for r in ranks:
        for _ in range(per_rank[r] - sum(floor[k] for k in stages_of[r])):
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


@dataclass(frozen=True)
class Balance:
    """How even a partition of one stage per rank is: each figure a stage's load over the even
    share (the total over the stages), so 1.0 is a perfect split whatever the cost's unit."""

    slowest: int  #: the stage of the highest load
    slowest_share: float
    holds: str  #: what the slowest stage holds besides layers: "the embedding", "the LM head", both or ""
    layer_share: float  #: a layer's load (the heaviest layer on the slowest stage)
    #: moving one layer off the slowest stage to the neighbour it suits best: the stage then slowest and
    #: its share (None when the slowest stage cannot give a layer up)
    moved: tuple[int, float] | None
    best_share: float  #: the slowest share of the best split of whole layers (``balanced``)


def balance(counts: Sequence[int], layer_costs: Sequence[float], first_extra: float, last_extra: float) -> Balance | None:
    """The :class:`Balance` of ``counts`` (one stage per rank) under these costs; None for one stage
    or no cost."""
    parts = len(counts)
    total = sum(layer_costs) + first_extra + last_extra
    if parts < 2 or total <= 0 or sum(counts) != len(layer_costs):
        return None
    mean = total / parts
    loads = stage_loads(counts, layer_costs, first_extra, last_extra)
    b = max(range(parts), key=lambda k: (loads[k], -k))
    holds = " and ".join(what for what, on in (("the embedding", b == 0 and first_extra > 0),
                                               ("the LM head", b == parts - 1 and last_extra > 0)) if on)
    start = sum(counts[:b])
    mine = layer_costs[start:start + counts[b]]
    options = []
    least = 0 if b in (0, parts - 1) else 1  # an inner stage keeps a layer
    if counts[b] > least:
        for to in (b - 1, b + 1):
            if 0 <= to < parts:
                moved = list(counts)
                moved[b] -= 1
                moved[to] += 1
                after = stage_loads(moved, layer_costs, first_extra, last_extra)
                top = max(range(parts), key=lambda k: (after[k], -k))
                options.append((after[top] / mean, top))
    best = balanced(layer_costs, parts, first_extra, last_extra)
    return Balance(
        slowest=b, slowest_share=loads[b] / mean, holds=holds,
        layer_share=(max(mine) if mine else max(layer_costs)) / mean,
        moved=None if not options else (min(options)[1], min(options)[0]),
        best_share=max(stage_loads(best, layer_costs, first_extra, last_extra)) / mean)
