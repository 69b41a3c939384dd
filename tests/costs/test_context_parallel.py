"""Context parallelism (context_parallel, training.cp_comm): a device's share of a sequence, the
keys and values it exchanges, where its ranks sit, and what cannot run. Figures worked by hand
from ppsim/costs/context_parallel.py's docstring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ppsim.costs.context_parallel import context_parallel_comm
from ppsim.costs.layers import gpt_layers
from ppsim.costs.table import Link
from ppsim.errors import PpsimError, ScenarioError
from ppsim.inputs import cluster as cl
from ppsim.inputs.scenario import ModelSpec, parse_scenario
from ppsim.plan import Kind
from ppsim.prediction import build, lower_built

#: h = 2048, 16 heads of 128, 4 kv heads, s = 8192, b = 1: Llama-like
MODEL = ModelSpec(layers=8, hidden=2048, heads=16, kv_heads=4, seq_len=8192, vocab=32768, mlp="swiglu",
                  positions="rope", dropout=False)


def scenario(cp: int, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "cp", "model": MODEL.model_dump(exclude_none=True),
                            "pipeline": {"stages": 2, "microbatches": 4, "partition": "uniform"},
                            "training": {"micro_batch": 1, "flash_attention": True},
                            "context_parallel": cp, "hardware": {"device": "h100-sxm", "efficiency": 0.5}}
    for key, value in extra.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


def test_a_device_does_a_cp_th_of_the_work_and_holds_a_cp_th_of_the_activations() -> None:
    """s / cp queries against all s keys: every FLOP term and (with FlashAttention) every
    activation term is linear in the device's tokens."""
    _, whole, _ = gpt_layers(MODEL, 1, flash_attention=True)
    _, half, _ = gpt_layers(MODEL, 1, flash_attention=True, context_parallel=2)
    assert half.forward_flops == pytest.approx(whole.forward_flops / 2)
    assert half.input_grad_flops == pytest.approx(whole.input_grad_flops / 2)
    assert half.weight_grad_flops == pytest.approx(whole.weight_grad_flops / 2)
    assert half.activation_bytes == whole.activation_bytes // 2
    assert half.params == whole.params


def test_the_step_does_the_same_model_flops_on_cp_times_the_devices() -> None:
    one, two = build(parse_scenario(scenario(1))), build(parse_scenario(scenario(2)))
    assert two.workload.model_flops_per_step == pytest.approx(one.workload.model_flops_per_step)
    assert two.workload.samples_per_step == one.workload.samples_per_step
    assert two.workload.costs.message_bytes == one.workload.costs.message_bytes // 2
    assert parse_scenario(scenario(2)).devices == 4


def test_the_ring_exposes_what_a_step_transfer_takes_beyond_its_attention() -> None:
    """cp = 4, a rank's K and V of 8 MB on a 100 GB/s (1e8 bytes per ms), 10 us link: a step moves
    8 MB in 0.08 ms + 0.01 ms; the attention's 0.2 ms forward is 0.05 ms a step: 3 x 0.04 ms exposed.
    The backward moves twice the bytes (0.17 ms) beside 0.4 / 4 = 0.1 ms: 3 x 0.07 ms."""
    link = Link(latency_ms=0.01, bandwidth_bytes_per_ms=1e8)
    comm = context_parallel_comm("p2p", 4, link, kv_bytes=8e6, q_bytes=16e6, attention_forward_ms=0.2,
                                 attention_backward_ms=0.4)
    assert comm.forward_ms == pytest.approx(3 * 0.04)
    assert comm.backward_ms == pytest.approx(3 * 0.07)
    hidden = context_parallel_comm("p2p", 4, link, kv_bytes=8e6, q_bytes=16e6, attention_forward_ms=2.0,
                                   attention_backward_ms=4.0)
    assert (hidden.forward_ms, hidden.backward_ms) == (0.0, 0.0)  # each step's transfer under its attention


def test_all_gather_and_all_to_all_are_exposed() -> None:
    """all_gather: everyone's K/V (cp x 8 MB) ring-gathered, (cp-1)/cp of it through each link;
    a2a: Q, K/V and the output, each sending (cp-1)/cp of the tensor, one latency per peer."""
    link = Link(latency_ms=0.01, bandwidth_bytes_per_ms=1e8)
    gather = context_parallel_comm("all_gather", 4, link, kv_bytes=8e6, q_bytes=16e6, attention_forward_ms=1.0,
                                   attention_backward_ms=2.0)
    assert gather.forward_ms == pytest.approx(3 * 0.01 + 0.75 * 32e6 / 1e8)
    assert gather.backward_ms == pytest.approx(2 * gather.forward_ms)
    a2a = context_parallel_comm("a2a", 4, link, kv_bytes=8e6, q_bytes=16e6, attention_forward_ms=1.0,
                                attention_backward_ms=2.0)
    assert a2a.forward_ms == pytest.approx(3 * (3 * 0.01) + 0.75 * (16e6 + 8e6 + 16e6) / 1e8)
    assert a2a.backward_ms == a2a.forward_ms


def test_context_parallel_ranks_sit_between_the_tensor_ranks_and_the_replicas() -> None:
    """t = 2, cp = 2, d = 2 on nodes of 8: stage 0's tensor rank 0 of replica 0 is device 0, its
    context-parallel peer device 2, the next replica's devices 4 and 6; the rings over each cp pair
    stay inside the node: NVLink's 450 GB/s."""
    c = cl.Cluster(nodes=2, devices_per_node=8, intra=cl.LinkSpeed(450.0, 3.0), inter=cl.LinkSpeed(50.0, 5.0),
                   nics_per_node=8)
    assert [cl.device_of(0, r, 0, 2, 4, 2, "megatron") for r in range(4)] == [0, 2, 4, 6]
    assert cl.context_parallel_link(c, 2, 4, 2, 2, "megatron").bandwidth_gb_s == pytest.approx(450)


MIB = 2**20


@pytest.mark.parametrize("training, buffers", [
    # a rank's K and V: 2 x 4096 tokens x 4 heads x 128 x 2 bytes = 8 MiB; its Q: 4096 x 2048 x 2 = 16 MiB
    ({"cp_comm": "p2p"}, 2 * (8 + 16) * MIB),  # each of the 2 steps' K/V block and partial output
    ({"cp_comm": "all_gather"}, 2 * 2 * 8 * MIB),  # the gathered K/V and their gradients
    ({"cp_comm": "a2a"}, (2 * 16 + 8) * MIB),  # the output's and Q, K, V's gradients re-laid
])
def test_the_exchange_buffers_are_held_with_the_message_buffers(training: dict[str, Any], buffers: int) -> None:
    """cp = 2 on two stages: each stage holds its send and receive buffers of one message (s / cp x h
    x 2 bytes = 16 MiB, one neighbour) and the working set of the exchange as cp_comm runs it."""
    one = build(parse_scenario(scenario(1))).workload.costs.stages
    two = build(parse_scenario(scenario(2, training=training))).workload.costs.stages
    for a, b in zip(one, two, strict=True):
        assert a.memory.buffers == 2 * 32 * MIB
        assert b.memory.buffers == 2 * 16 * MIB + buffers


def test_the_hierarchical_exchange_holds_both_levels_buffers() -> None:
    """cp = 4 in all-to-all pairs: the pairs' re-laid tensors (a2a of 2: 2 q + kv) and the ring's over
    2 groups (2 x (kv + q)), K/V of 4 MiB and Q of 8 MiB a rank."""
    from ppsim.costs.context_parallel import exchange_buffer_bytes

    kw = {"kv_bytes": 4 * MIB, "q_bytes": 8 * MIB}
    assert exchange_buffer_bytes("a2a+p2p", 4, a2a_size=2, **kw) == (2 * 8 + 4 + 2 * (4 + 8)) * MIB
    assert exchange_buffer_bytes("p2p", 8, kv_bytes=4 * MIB, q_bytes=0) == 8 * 4 * MIB  # cp blocks beat 4 kv
    assert exchange_buffer_bytes("p2p", 2, kv_bytes=4 * MIB, q_bytes=0) == 4 * 4 * MIB  # the backward's 4 kv


def test_gradients_reduce_over_data_and_context_parallel_ranks() -> None:
    """d = 1 and cp = 2: two devices hold the same weights, so the step ends with a reduction."""
    b = build(parse_scenario(scenario(2)))
    plan = lower_built(b)
    assert any(a.kind is Kind.REDUCE_GRAD for rank in plan.actions for a in rank)
    one = lower_built(build(parse_scenario(scenario(1))))
    assert not any(a.kind is Kind.REDUCE_GRAD for rank in one.actions for a in rank)


@pytest.mark.parametrize("change, field, says", [
    ({"context_parallel": 3}, "context_parallel", "must be a multiple of 6"),
    ({"context_parallel": 8, "training": {"cp_comm": "a2a"}}, "training.cp_comm", "multiples of 8"),
])
def test_what_cannot_split_is_refused_naming_the_key(change: dict[str, Any], field: str, says: str) -> None:
    cp = change.pop("context_parallel")
    with pytest.raises(ScenarioError, match=says) as err:
        parse_scenario(scenario(cp, **change))
    assert err.value.field == field


def test_tune_keeps_the_scenarios_context_parallelism_and_counts_its_devices() -> None:
    """cp = 2 on 16 GPUs: every candidate is t x cp x p x d = 16, and the scenario it writes keeps
    cp (and drops the tensor-parallel overlap where its candidate has no tensor parallelism)."""
    from ppsim.search.tune.space import SearchSpace, apply, candidates

    s = parse_scenario(scenario(2, training={"sequence_parallel": True, "tp_comm_overlap": True},
                                tensor_parallel=2))
    found = candidates(s, SearchSpace(gpus=16))
    assert found and all(c.tensor_parallel * 2 * c.stages * c.data_parallel == 16 for c in found)
    base = s.model_dump(exclude_none=True)
    for c in found:
        written = parse_scenario(apply(base, c))
        assert written.context_parallel == 2 and written.devices == 16
        assert written.training.tp_comm_overlap == (c.tensor_parallel > 1)


def test_tune_searches_the_context_parallel_sizes_asked_for() -> None:
    """--context-parallel-sizes 1,2,4 on 16 GPUs: each size's plans fill the 16 devices, each written
    scenario runs that size, a size that cannot split the sequence is not searched, and the devices'
    compute time counts every context-parallel rank (the same FLOPs at a flat efficiency: the same
    total, not a cp-th of it)."""
    from ppsim.search.tune.evaluate import evaluate
    from ppsim.search.tune.space import SearchSpace, apply, candidates

    s = parse_scenario(scenario(1, pipeline={"microbatches": 16}))  # a batch of 16 sequences
    found = candidates(s, SearchSpace(gpus=16, context_parallel=(1, 2, 4, 3)))  # 8192 is no multiple of 6
    assert {c.context_parallel for c in found} == {1, 2, 4}
    assert all(c.devices == c.tensor_parallel * c.context_parallel * c.stages * c.data_parallel == 16 for c in found)
    base = s.model_dump(exclude_none=True)
    for c in found[:: max(1, len(found) // 40)]:
        written = parse_scenario(apply(base, c))
        assert (written.context_parallel, written.devices) == (c.context_parallel, 16)
    twins = [next(c for c in found if (c.stages, c.tensor_parallel, c.context_parallel, c.micro_batch, c.schedule,
                                       c.recompute, c.zero_stage) == (2, 1, cp, 1, "1f1b", "none", 1))
             for cp in (1, 4)]
    one, four = (evaluate(base, c) for c in twins)
    assert one.device_compute_ms and four.device_compute_ms
    assert four.device_compute_ms == pytest.approx(one.device_compute_ms, rel=1e-6)


def test_tune_says_when_no_context_parallel_size_splits_the_sequence() -> None:
    from ppsim.search.tune.space import SearchSpace, candidates

    with pytest.raises(PpsimError, match="no context parallel size of 3/5 splits model.seq_len") as err:
        candidates(parse_scenario(scenario(1)), SearchSpace(gpus=16, context_parallel=(3, 5)))
    assert err.value.field == "--context-parallel-sizes"


def test_the_tune_command_lists_context_parallelism_and_why(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ppsim.cli import app

    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(scenario(1)))
    result = CliRunner().invoke(app, ["tune", str(path), "--gpus", "4", "--schedules", "1f1b",
                                      "--micro-batch-sizes", "1", "--context-parallel-sizes", "1,2"])
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "schedule" in line and "step ms" in line)
    assert " cp " in header
    assert any(line.strip().startswith("- cp=") for line in result.output.splitlines())


def test_ppexec_refuses_context_parallelism_naming_the_key() -> None:
    pytest.importorskip("torch")
    from ppexec.launch.prepare import check_buildable

    gpt = scenario(2)  # a model ppexec builds, so that context parallelism is what it refuses
    gpt["model"] = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 256, "vocab": 512}
    with pytest.raises(PpsimError, match="without context parallelism") as err:
        check_buildable(parse_scenario(gpt))
    assert err.value.field == "context_parallel"


def test_the_summary_says_the_plan_has_context_parallelism_and_fp4() -> None:
    from rich.console import Console

    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize
    from ppsim.views.render.summary_table import print_summary

    data = scenario(2, training={"fp4": "nvfp4"}, hardware={"device": "b200"})
    console = Console(record=True, width=300)
    print_summary(summarize(predict(parse_scenario(data)).trace), console)
    text = console.export_text()
    assert "tensor parallel" not in text and "context parallel 2 (4 devices), FP4 (nvfp4)" in text


def test_a_plan_too_big_for_the_cluster_counts_its_context_parallel_ranks() -> None:
    data = scenario(2, data_parallel=2, tensor_parallel=2)
    data["cluster"] = {"nodes": 1, "devices_per_node": 8}
    with pytest.raises(ScenarioError, match=r"tensor x context x stages x data-parallel = 2 x 2 x 2 x 2 = 16 "
                                            r"devices and the cluster has 1 x 8 = 8") as err:
        build(parse_scenario(data))
    assert err.value.field == "cluster.nodes"



def test_the_hierarchical_exchange_is_all_to_alls_in_groups_then_a_ring_over_them() -> None:
    """cp = 8 in all-to-all groups of 2: the a2a part of 2 ranks (each sending half its tensors),
    then a p2p ring over 4 groups, each step beside a quarter of the attention."""
    link = Link(latency_ms=0.01, bandwidth_bytes_per_ms=1e8)
    kw = {"kv_bytes": 8e6, "q_bytes": 16e6, "attention_forward_ms": 0.2, "attention_backward_ms": 0.4}
    both = context_parallel_comm("a2a+p2p", 8, link, a2a_size=2, **kw)
    a2a = 3 * 0.01 + 0.5 * (16e6 + 8e6 + 16e6) / 1e8
    ring_forward = 3 * max(0.0, 0.01 + 8e6 / 1e8 - 0.2 / 4)
    ring_backward = 3 * max(0.0, 0.01 + 16e6 / 1e8 - 0.4 / 4)
    assert both.forward_ms == pytest.approx(a2a + ring_forward)
    assert both.backward_ms == pytest.approx(a2a + ring_backward)


@pytest.mark.parametrize("training, says", [
    ({"cp_comm": "a2a+p2p"}, "needs training.cp_a2a_size"),
    ({"cp_comm": "a2a+p2p", "cp_a2a_size": 3}, "a divisor of context_parallel"),
    ({"cp_a2a_size": 2}, "cp_comm is p2p"),
])
def test_the_hierarchical_groups_are_checked_naming_the_key(training: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as err:
        parse_scenario(scenario(4, training=training))
    assert err.value.field == "training.cp_a2a_size"


def test_the_hierarchical_exchange_on_two_ranks_asks_for_more_ranks() -> None:
    """Two ranks hold no two groups of two: the key to change is cp_comm, and the message says so."""
    with pytest.raises(ScenarioError, match="needs context_parallel of 4 or more .here 2.; use a2a or p2p") as err:
        parse_scenario(scenario(2, training={"cp_comm": "a2a+p2p", "cp_a2a_size": 2}))
    assert err.value.field == "training.cp_comm"


def test_a_scenario_with_the_hierarchical_exchange_prices_it() -> None:
    ring = build(parse_scenario(scenario(4))).workload.costs.stages[0]
    both = build(parse_scenario(scenario(4, training={"cp_comm": "a2a+p2p", "cp_a2a_size": 2}))).workload.costs.stages[0]
    assert both.forward_comm_ms > ring.forward_comm_ms  # the all-to-alls are exposed; the ring's steps were hidden
