"""ZeRO-3 / FSDP's layer-by-layer collectives and activation offloading to the host: what they
expose beside the compute, what they save in memory, and what cannot run. Figures worked by hand
from ppsim/costs/fsdp.py's docstring."""

from __future__ import annotations

from typing import Any

import pytest

from ppsim.costs.fsdp import fsdp_stage, offload
from ppsim.costs.table import Link
from ppsim.errors import PpsimError, ScenarioError
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction import build

LINK = Link(latency_ms=0.0, bandwidth_bytes_per_ms=1e8)  # 100 GB/s


def test_fsdp_exposes_what_its_gathers_take_beyond_the_compute() -> None:
    """1e9 parameters in 16 bits over 4 replicas at 100 GB/s: a gather moves 3/4 x 2 GB in 15 ms,
    a reduce-scatter as much; 10 layers. Beside 50 ms of forward only the first layer's 1.5 ms;
    beside 10 ms, 5 ms; the backward's 30 ms of collectives beside 20 ms: 10 ms."""
    assert fsdp_stage(1e9, 10, 2, 2, 4, LINK, 50.0, 100.0).forward_ms == pytest.approx(1.5)
    assert fsdp_stage(1e9, 10, 2, 2, 4, LINK, 10.0, 100.0).forward_ms == pytest.approx(5.0)
    assert fsdp_stage(1e9, 10, 2, 2, 4, LINK, 10.0, 20.0).backward_ms == pytest.approx(10.0)
    assert fsdp_stage(1e9, 10, 1, 2, 4, LINK, 1.0, 100.0).forward_ms == pytest.approx(7.5 - 1.0)  # FP8 weights
    assert fsdp_stage(1e9, 10, 2, 2, 1, LINK, 1.0, 1.0).forward_ms == 0.0  # one replica: nothing to gather


def test_offloading_exposes_what_its_copies_take_beyond_each_pass() -> None:
    """4 GB at 100 GB/s (and 5 us): 40.005 ms each way, beside a 30 ms forward and a 60 ms backward."""
    host = Link(latency_ms=0.005, bandwidth_bytes_per_ms=1e8)
    copies = offload(4e9, host, 30.0, 60.0)
    assert copies.forward_ms == pytest.approx(10.005) and copies.backward_ms == 0.0


def scenario(**training: Any) -> dict[str, Any]:
    return {"name": "fsdp", "model": {"layers": 8, "hidden": 2048, "heads": 16, "seq_len": 4096, "vocab": 32768,
                                      "mlp": "swiglu", "positions": "rope", "dropout": False},
            "pipeline": {"stages": 1, "microbatches": 4}, "data_parallel": 8,
            "training": {"micro_batch": 1, "flash_attention": True, **training},
            "hardware": {"device": "gb200", "efficiency": 0.5}}


def test_fsdp_shards_everything_and_leaves_nothing_for_the_steps_end() -> None:
    one = build(parse_scenario(scenario(zero_stage=1, zero_reduce="reduce_scatter"))).workload.costs.stages[0]
    three = build(parse_scenario(scenario(zero_stage=3, zero_reduce="reduce_scatter"))).workload.costs.stages[0]
    assert three.allreduce_ms == 0.0 and one.allreduce_ms > 0
    assert three.memory.weights * 8 == pytest.approx(one.memory.weights, rel=1e-6)
    assert three.memory.gradients * 8 == pytest.approx(one.memory.gradients, rel=1e-6)
    assert three.forward_ms > one.forward_ms  # at least the first layer's gather is exposed
    assert three.optimizer_ms < one.optimizer_ms  # no all-gather after the step


def test_offloaded_blocks_leave_the_device_and_their_copies_run_beside_the_compute() -> None:
    """3 of the 8 blocks offloaded: the stage holds 3 blocks' activations less; GB200's NVLink-C2C
    (450 GB/s) copies them far faster than the passes compute: nothing exposed."""
    plain = build(parse_scenario(scenario())).workload
    off = build(parse_scenario(scenario(offload_layers=3))).workload
    block = (plain.costs.stages[0].activation_bytes - off.costs.stages[0].activation_bytes) / 3
    assert block > 0 and off.costs.stages[0].activation_bytes == plain.costs.stages[0].activation_bytes - 3 * block
    assert off.costs.stages[0].forward_ms == pytest.approx(plain.costs.stages[0].forward_ms)


@pytest.mark.parametrize("change, field, says", [
    ({"training": {"offload_layers": 9}}, "training.offload_layers", "more than model.layers"),
    ({"hardware": {"device": "cpu"}, "training": {"offload_layers": 2}}, "training.offload_layers", "no host link"),
])
def test_what_cannot_offload_is_refused_naming_the_key(change: dict[str, Any], field: str, says: str) -> None:
    data = scenario()
    for key, value in change.items():
        data[key] = {**data[key], **value}
    with pytest.raises(ScenarioError, match=says) as err:
        build(parse_scenario(data))
    assert err.value.field == field


def test_ppexec_refuses_offloading_naming_the_key() -> None:
    pytest.importorskip("torch")
    from ppexec.launch.prepare import check_buildable

    data = scenario(offload_layers=2)
    data["model"] = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 256, "vocab": 512}
    with pytest.raises(PpsimError, match="every activation on the device") as err:
        check_buildable(parse_scenario(data))
    assert err.value.field == "training.offload_layers"


def test_fsdp_on_a_cluster_leaves_no_reduction_for_the_network_at_the_steps_end() -> None:
    """Under the flows network model too: the step is the passes and the sharded optimizer step."""
    from ppsim.prediction import predict
    from ppsim.trace.metrics import step_time_ms

    data = scenario(zero_stage=3, zero_reduce="reduce_scatter")
    data["cluster"] = {"nodes": 2, "devices_per_node": 4}
    pred = predict(parse_scenario(data))
    c = pred.workload.costs.stages[0]
    assert pred.workload.costs.fabric is not None and pred.workload.costs.fabric.reduce == (None,)
    passes = 4 * (c.forward_ms + c.backward_ms)
    assert step_time_ms(pred.trace) == pytest.approx(passes + c.optimizer_ms + c.clip_ms, rel=0.02)


def test_fsdp_runs_beside_a_pipeline_each_stage_sharding_its_own_blocks() -> None:
    """Megatron FSDP and torch's FSDP2 run beside pipeline stages (DeepSpeed's engine does not):
    each stage shards its own weights over the 8 replicas, exactly 1/8 of ZeRO-1's, and gathers
    them per micro-batch beside its own compute; ZeRO-2 stays refused with the fix named."""
    data = scenario(zero_stage=1, zero_reduce="reduce_scatter")
    data["pipeline"] = {"stages": 2, "microbatches": 4}
    one = build(parse_scenario(data)).workload.costs.stages
    three = build(parse_scenario({**data, "training": {**data["training"], "zero_stage": 3}})).workload.costs.stages
    for a, b in zip(one, three, strict=True):
        assert b.memory.weights * 8 == pytest.approx(a.memory.weights, rel=1e-6)
        assert b.allreduce_ms == 0.0 < a.allreduce_ms and b.forward_ms > a.forward_ms
    with pytest.raises(ScenarioError, match="use 1 .*or 3 .*fully sharded") as err:
        parse_scenario({**data, "training": {**data["training"], "zero_stage": 2}})
    assert err.value.field == "training.zero_stage"


def test_under_fsdp_the_fp8_copies_are_cast_from_each_gathered_layer_and_dropped_with_it() -> None:
    """FP8 without FP8 weights keeps two 1-byte copies of every linear weight beside the 16-bit one
    (4 h^2 + 3 h f = 67,108,864 values a block here). ZeRO-1 holds them for every block; ZeRO-3
    casts them from each gathered layer and drops them with it: it holds the shards, and beside them
    the layer computing and the one prefetched, whole, each with its copies, and one layer's
    gradients before their reduce-scatter (the largest layer: a block, the vocabulary being small)."""
    from ppsim.costs.workload import model_layers

    fp8 = {"fp8": "tensorwise", "zero_reduce": "reduce_scatter"}
    data = scenario(zero_stage=1, **fp8)
    data["model"] = {**data["model"], "ffn_hidden": 8192, "vocab": 8192}
    one = build(parse_scenario(data)).workload.costs.stages[0].memory
    three_s = parse_scenario({**data, "training": {**data["training"], "zero_stage": 3}})
    three = build(three_s).workload.costs.stages[0].memory
    _, block, _ = model_layers(three_s)
    linear = 4 * 2048**2 + 3 * 2048 * 8192
    assert block.extra_weight_bytes == 2 * linear == 134_217_728
    params = one.weights - 8 * block.extra_weight_bytes  # ZeRO-1: 2 bytes a parameter and the copies
    assert three.weights == pytest.approx(params / 8, rel=1e-6)  # the shard alone
    assert three.buffers - one.buffers == 2 * (2 * block.params + 2 * linear) + 2 * block.params
    plain = build(parse_scenario({**data, "training": {"micro_batch": 1, "flash_attention": True, "zero_stage": 3,
                                                       "zero_reduce": "reduce_scatter"}})).workload.costs.stages[0]
    assert three.buffers - plain.memory.buffers == 2 * 2 * linear  # the two gathered layers' copies
