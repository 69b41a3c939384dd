"""DualPipe's two copies of the model in the costs: each rank holds a stage of each copy, the
layers are partitioned over one copy and balanced over what a rank holds of both, the work of a
step is the model's once, and each stage's gradients are summed over its copies before the step."""

from __future__ import annotations

from typing import Any

import pytest

from ppsim.costs.collectives import ring_allreduce_ms
from ppsim.costs.links import twin_ranks
from ppsim.costs.table import Link
from ppsim.inputs.hardware import DEVICES
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction import build, predict
from ppsim.trace.metrics import summarize

MODEL = {"layers": 16, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 32000}


def _scenario(schedule: str, **pipeline: Any) -> Any:
    return parse_scenario({
        "name": "dualpipe-costs", "model": MODEL, "training": {"global_batch": 16, "micro_batch": 1},
        "pipeline": {"stages": 4, "schedule": schedule, "chunks": 1 if schedule == "1f1b" else 2, **pipeline},
        "hardware": {"device": "h100-sxm"}})


def test_each_rank_holds_a_stage_of_each_copy_and_every_rank_as_much() -> None:
    w = build(_scenario("dualpipe")).workload
    blocks = w.partition
    assert blocks is not None and blocks[:4] == blocks[4:] and sum(blocks[:4]) == 16  # one copy partitioned, twice
    # rank r holds stage r of the first copy and stage p - 1 - r of the second: the balance is over both
    held = [blocks[r] + blocks[3 - r] for r in range(4)]
    assert max(held) - min(held) <= 2
    stages = w.costs.stages
    one = build(_scenario("1f1b", partition=blocks[:4])).workload.costs.stages
    assert sum(c.params for c in stages) == 2 * sum(c.params for c in one)  # two copies of every parameter
    assert [c.forward_ms for c in stages] == pytest.approx([c.forward_ms for c in one] * 2)


def test_a_step_does_the_models_work_once() -> None:
    dual, single = build(_scenario("dualpipe")).workload, build(_scenario("1f1b")).workload
    assert dual.model_flops_per_step == pytest.approx(single.model_flops_per_step)
    trace = predict(_scenario("dualpipe")).trace
    # every micro-batch runs one copy: each rank's busy time is its two stages' share of 8 micro-batches each
    assert sum(r.busy_ms for r in summarize(trace).per_rank) == pytest.approx(
        sum(8 * (c.forward_ms + c.backward_ms) + c.optimizer_ms for c in dual.costs.stages), rel=1e-9)


def test_each_stages_gradients_are_summed_over_its_copies_before_the_step() -> None:
    """Without data parallelism and ZeRO: each stage's optimizer step is the single copy's plus a
    2-rank ring all-reduce of all its gradients (bf16) over the pipeline's link."""
    blocks = build(_scenario("dualpipe")).workload.partition
    dual = build(_scenario("dualpipe")).workload.costs.stages
    one = build(_scenario("1f1b", partition=blocks[:4])).workload.costs.stages
    device = DEVICES["h100-sxm"]
    link = Link.from_gb_s(device.inter_node_gb_s, device.inter_node_latency_us)
    for k, c in enumerate(dual):
        twin = one[k % 4]
        assert c.optimizer_ms - twin.optimizer_ms == pytest.approx(ring_allreduce_ms(twin.params * 2, 2, link))


def test_under_zero_each_device_sums_only_the_shard_it_steps() -> None:
    def stages(schedule: str, **pipeline: Any) -> Any:
        s = _scenario(schedule, **pipeline).model_dump(exclude_none=True)
        s["training"].update(zero_stage=1, global_batch=64)
        s["data_parallel"] = 4
        return build(parse_scenario(s)).workload

    dual = stages("dualpipe")
    one = stages("1f1b", partition=dual.partition[:4]).costs.stages
    device = DEVICES["h100-sxm"]
    link = Link.from_gb_s(device.inter_node_gb_s, device.inter_node_latency_us)
    for k, c in enumerate(dual.costs.stages):  # a quarter of each stage's gradients: the shard its device steps
        twin = one[k % 4]
        assert c.optimizer_ms - twin.optimizer_ms == pytest.approx(ring_allreduce_ms(twin.params * 2 / 4, 2, link))


def test_the_copies_pairs_are_rank_r_and_rank_p_minus_1_minus_r() -> None:
    from ppsim.plan import schedules

    placement = schedules.get("dualpipe").stage_to_rank(8, 2)
    assert twin_ranks(placement, 2) == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert twin_ranks(placement, 1) == []


@pytest.mark.parametrize("nodes,per_node,across", [(1, 4, False), (2, 2, True)])
def test_on_a_cluster_the_copies_sum_over_the_route_between_their_ranks(nodes: int, per_node: int,
                                                                        across: bool) -> None:
    """Four ranks, one device each: in one node ranks r and 3 - r meet on NVLink; two to a node,
    every pair (0, 3) and (1, 2) crosses the network."""
    from ppsim.costs.links import scenario_links
    from ppsim.plan import schedules

    s = _scenario("dualpipe").model_dump(exclude_none=True)
    s["cluster"] = {"nodes": nodes, "devices_per_node": per_node}
    device = DEVICES["h100-sxm"]
    links = scenario_links(parse_scenario(s), device, schedules.get("dualpipe").stage_to_rank(4, 2), pipes=2)
    assert links.copies is not None
    gb_s = device.inter_node_gb_s if across else device.collective_rate()
    assert links.copies.serialization_ms(1e9) == pytest.approx(Link.from_gb_s(gb_s, 0.0).serialization_ms(1e9))
