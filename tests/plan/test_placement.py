"""Placement reaches every consumer: which rank runs each virtual stage (loop, V, or a plan
file's own) decides the partition's balance, the per-rank explicit costs, the cluster's links,
the memory a rank holds and the simulated messages."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import gpt
from ppsim.costs import build_workload
from ppsim.costs.partition import balanced_over_ranks
from ppsim.inputs.scenario import parse_scenario
from ppsim.plan import loop_placement, v_placement
from ppsim.prediction import predict, stage_to_rank
from ppsim.trace.metrics import summarize


def test_v_placement_folds_the_stages_back() -> None:
    assert v_placement(4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert loop_placement(4, 2) == (0, 1, 2, 3, 0, 1, 2, 3)


def _best_rank_load(layers: int, where: tuple[int, ...], block: float, extra: list[float]) -> float:
    """Brute force: the lightest possible most-loaded rank over every split of the blocks."""
    ranks = sorted(set(where))
    held = {r: [k for k in range(len(where)) if where[k] == r] for r in ranks}
    best = float("inf")
    n = len(where)
    for counts in itertools.product(range(layers + 1), repeat=n):
        if sum(counts) != layers or n > 1 and min(counts[1:-1], default=1) < 1:
            continue  # every stage holds a block but the first and the last
        worst = max(sum(counts[k] * block + extra[k] for k in held[r]) for r in ranks)
        best = min(best, worst)
    return best


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 3), v=st.integers(1, 2), extra_layers=st.integers(0, 5), v_shape=st.booleans(),
       first=st.floats(0, 3), last=st.floats(0, 3))
def test_balancing_over_ranks_makes_the_busiest_rank_as_light_as_it_can_be(
        p: int, v: int, extra_layers: int, v_shape: bool, first: float, last: float) -> None:
    where = v_placement(p) if v_shape else loop_placement(p, v)
    layers = len(where) + extra_layers
    counts = balanced_over_ranks(layers, where, 1.0, first, last)
    assert sum(counts) == layers and min(counts[1:-1], default=1) >= 1
    extra = [0.0] * len(where)
    extra[0] += first
    extra[-1] += last
    load = {r: sum(counts[k] + extra[k] for k in range(len(where)) if where[k] == r) for r in set(where)}
    assert max(load.values()) == pytest.approx(_best_rank_load(layers, where, 1.0, extra))


def _scenario(schedule: str, chunks: int, **pipeline: object):
    return gpt().with_overrides(schedule=schedule, chunks=chunks, **pipeline)


def test_interleaved_balances_what_each_rank_does() -> None:
    # before: 3 x 12 then 1 x 4 layers, ranks 0-3 doing 6 layers and ranks 4-7 doing 4
    s = _scenario("interleaved-1f1b", 2)
    w = build_workload(s, stage_to_rank=stage_to_rank(s))
    p = s.pipeline.stages
    per_rank = [w.partition[r] + w.partition[r + p] for r in range(p)]
    assert sum(per_rank) == s.model.layers and max(per_rank) - min(per_rank) <= 1
    busy = [r.busy_ms for r in summarize(predict(s).trace).per_rank]
    assert max(busy) / min(busy) < 1.2  # the head's rank is the only one that does a little more


def test_v_placement_puts_embedding_and_head_on_rank_0() -> None:
    s = _scenario("zb-v", 2)
    prediction = predict(s)
    assert prediction.plan.stage_to_rank == v_placement(8)
    w = prediction.workload
    p = s.pipeline.stages
    # rank 0 pays for the embedding (stage 0) and the head (stage 2p - 1): it gets fewer blocks
    per_rank = [w.partition[r] + w.partition[2 * p - 1 - r] for r in range(p)]
    assert per_rank[0] <= min(per_rank[1:])
    static = prediction.trace.meta["memory_static_bytes"]
    weights = [c.memory.weights for c in w.costs.stages]
    assert static[0]["weights"] == weights[0] + weights[2 * p - 1]
    # the turn of the V (stages p - 1 and p on rank p - 1) sends nothing
    sends = {(a.stage, a.kind.value) for a in prediction.plan.actions[p - 1] if a.kind.value.startswith("SEND")}
    assert (p - 1, "SEND_F") not in sends and (p, "SEND_B") not in sends


def _explicit(schedule: str, chunks: int, **costs: object):
    return parse_scenario({"name": "x", "pipeline": {"stages": 4, "microbatches": 8, "schedule": schedule,
                                                      "chunks": chunks},
                           "costs": {"forward_ms": [1.0, 2.0, 3.0, 4.0], "backward_ms": 2.0, **costs}})


def test_explicit_per_rank_costs_follow_the_placement() -> None:
    s = _explicit("zb-v", 2, weight_grad_ms=1.0, p2p_ms=[0.1, 0.2, 0.3, 0.4])
    w = build_workload(s, stage_to_rank=stage_to_rank(s))
    where = v_placement(4)
    assert [c.forward_ms for c in w.costs.stages] == [[1.0, 2.0, 3.0, 4.0][where[k]] / 2 for k in range(8)]
    # p values: the transfer out of the sending rank of each boundary
    assert [link.latency_ms for link in w.costs.links] == [[0.1, 0.2, 0.3, 0.4][where[b]] for b in range(7)]
    busy = [r.busy_ms for r in summarize(predict(s).trace).per_rank]
    assert busy == pytest.approx([8 * (f + 2.0) for f in (1.0, 2.0, 3.0, 4.0)])


def test_cluster_links_join_the_ranks_the_placement_names() -> None:
    data = gpt().model_dump(exclude_none=True)
    data["pipeline"].update(stages=4, microbatches=16, partition="balanced", schedule="zb-v", chunks=2)
    data["data_parallel"] = 2
    data["training"].pop("global_batch", None)
    data["hardware"] = {"device": "a100-80g"}
    data["cluster"] = {"nodes": 2, "devices_per_node": 4}
    s = parse_scenario(data)
    links = build_workload(s, stage_to_rank=stage_to_rank(s)).costs.links
    # megatron order: ranks 0-1 on node 0, 2-3 on node 1; the V crosses nodes going down (1 -> 2)
    # and coming back (6 -> 5, ranks 2 -> 1), and turns inside rank 3 (boundary 3) for free
    down, turn, back = links[1], links[3], links[5]
    assert down.bandwidth_bytes_per_ms == back.bandwidth_bytes_per_ms < links[0].bandwidth_bytes_per_ms
    assert turn.latency_ms == 0.0 and turn.bandwidth_bytes_per_ms == float("inf")
