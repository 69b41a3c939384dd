"""Memory per stage: model states, ZeRO-1, activations per recompute mode, peaks and the capacity check."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import GPT_YAML, SCENARIOS
from ppsim.cli import app
from ppsim.costs import build_workload
from ppsim.costs.memory import block_activation_bytes, model_state_bytes_per_param, static_memory
from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize

GPT = GPT_YAML
runner = CliRunner()


def small_gpt(**training: object):
    """gpt.yaml's model on 4 stages, 16 micro-batches, one replica."""
    data = load(GPT).model_dump(exclude_none=True)
    data["pipeline"].update(stages=4, microbatches=16, partition="uniform")
    data["data_parallel"] = 1
    data["training"] = {"micro_batch": 1, **training}
    return parse_scenario(data)


def test_activation_bytes_per_recompute_mode() -> None:
    s, b, h, a = 2048, 2, 5120, 40
    sbh = s * b * h
    assert block_activation_bytes(s, b, h, a, 2, "none") == int(sbh * (34 + 5 * a * s / h))
    assert block_activation_bytes(s, b, h, a, 2, "selective") == 34 * sbh
    assert block_activation_bytes(s, b, h, a, 2, "full") == 2 * sbh
    assert block_activation_bytes(s, b, h, a, 4, "full") == 4 * sbh  # fp32 values are twice as large
    with pytest.raises(ScenarioError, match="recompute mode"):
        block_activation_bytes(s, b, h, a, 2, "sometimes")  # type: ignore[arg-type]


def test_model_states_are_16_bytes_per_parameter() -> None:
    assert sum(model_state_bytes_per_param(2)) == 16  # bf16 / fp16 mixed-precision Adam
    assert sum(model_state_bytes_per_param(4)) == 16  # fp32 Adam
    m = static_memory(1000, 2, message_bytes=10, neighbours=2)
    assert (m.weights, m.gradients, m.optimizer, m.buffers) == (2000, 2000, 12000, 40)


@given(st.integers(1, 10**9), st.integers(1, 64))
def test_zero1_shards_the_optimizer_state_over_the_replicas(params: int, d: int) -> None:
    plain = static_memory(params, 2, zero_stage=0, data_parallel=d)
    zero1 = static_memory(params, 2, zero_stage=1, data_parallel=d)
    assert zero1.optimizer == -(-plain.optimizer // d)
    assert (zero1.weights, zero1.gradients) == (plain.weights, plain.gradients)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_peak_memory_is_states_plus_the_schedules_micro_batches(schedule: str) -> None:
    s = small_gpt().with_overrides(schedule=schedule)
    pred = predict(s)
    summary = summarize(pred.trace)
    p, m = 4, 16
    for st_metrics, cost in zip(summary.per_rank, pred.workload.costs.stages):
        held = min(p - st_metrics.rank, m) if schedule == "1f1b" else m
        assert cost.memory is not None
        assert st_metrics.peak_memory_bytes == pytest.approx(cost.memory.total + held * cost.activation_bytes)
        assert st_metrics.peak_memory_at is not None and "F" in st_metrics.peak_memory_at


def test_recompute_trades_memory_for_time() -> None:
    runs = {mode: predict(small_gpt(recompute=mode)) for mode in ("none", "selective", "full")}
    acts = {mode: r.workload.costs.stages[1].activation_bytes for mode, r in runs.items()}
    assert acts["none"] > acts["selective"] > acts["full"]
    steps = {mode: summarize(r.trace).step_time_ms for mode, r in runs.items()}
    assert steps["none"] < steps["selective"] < steps["full"]
    # full recompute runs every block's forward again in the backward
    none, full = (runs[k].workload.costs.stages[1] for k in ("none", "full"))
    assert full.backward_ms == pytest.approx(none.backward_ms + none.forward_ms, rel=1e-9)
    # model FLOPs, and so MFU's numerator, leave the recomputation out
    assert runs["full"].workload.model_flops_per_step == runs["none"].workload.model_flops_per_step


def test_zero1_lowers_the_peak_by_the_sharded_optimizer_state() -> None:
    data = small_gpt().model_dump(exclude_none=True)
    data["data_parallel"] = 8
    plain = predict(parse_scenario(data))
    data["training"]["zero_stage"] = 1
    zero1 = predict(parse_scenario(data))
    a, b = plain.trace.meta["memory_static_bytes"][0], zero1.trace.meta["memory_static_bytes"][0]
    assert b["optimizer"] == pytest.approx(a["optimizer"] / 8, rel=1e-6)
    saved = summarize(plain.trace).per_rank[0].peak_memory_bytes - summarize(zero1.trace).per_rank[0].peak_memory_bytes
    assert saved == pytest.approx(a["optimizer"] - b["optimizer"])


def test_a_plan_that_does_not_fit_is_reported() -> None:
    res = runner.invoke(app, ["run", str(GPT), "--stages", "2", "--partition", "uniform"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the table wraps at the terminal's width
    assert "DOES NOT FIT" in text and "rank 0 needs" in text and "too many, at 0F" in text
    doc = json.loads(runner.invoke(app, ["run", str(GPT), "--stages", "2", "--partition", "uniform", "--json"]).output)
    assert doc["fits"] is False
    assert doc["ranks"][0]["peak_memory_bytes"] > doc["memory_capacity_bytes"]
    fits = json.loads(runner.invoke(app, ["run", str(GPT), "--json"]).output)
    assert fits["fits"] is True


def test_zero_2_or_3_with_a_pipeline_is_refused() -> None:
    data = small_gpt().model_dump(exclude_none=True)
    data["training"]["zero_stage"] = 2
    with pytest.raises(ScenarioError, match="training.zero_stage: ZeRO stage 2 cannot be used with pipeline"):
        parse_scenario(data)
    data["pipeline"]["stages"] = 1
    parse_scenario(data)  # without a pipeline it is DeepSpeed's business


def test_explicit_costs_without_a_model_have_no_memory_figures() -> None:
    s = load(SCENARIOS / "zero-bubble-costs.yaml")
    summary = summarize(predict(s).trace)
    assert summary.fits is None and all(st.peak_memory_bytes is None for st in summary.per_rank)
    assert build_workload(s).costs.stages[0].memory is None


# ----- tensor parallelism -------------------------------------------------------------------------
def test_tensor_parallel_splits_compute_and_memory_and_adds_all_reduces() -> None:
    from ppsim.costs import Link
    from ppsim.costs.collectives import ring_allreduce_ms
    from ppsim.costs.layers import gpt_layers

    base = small_gpt()
    data = base.model_dump(exclude_none=True)
    data["tensor_parallel"] = 4
    tp = parse_scenario(data)
    assert tp.model is not None
    one, four = build_workload(base), build_workload(tp)
    _, block1, _ = gpt_layers(tp.model, 1)
    _, block4, _ = gpt_layers(tp.model, 1, tensor_parallel=4)
    assert block4.forward_flops == pytest.approx(block1.forward_flops / 4)
    # the same model FLOPs in all: MFU counts every device's share
    assert four.model_flops_per_step == pytest.approx(one.model_flops_per_step)
    s, b, h = tp.model.seq_len, 1, tp.model.hidden
    link = Link.from_gb_s(231.6, 3)  # the A100's NVLink as its collectives reach it
    ar = ring_allreduce_ms(s * b * h * 2, 4, link)  # one block's activation over the 4 devices
    assert ar == pytest.approx(2 * 3 / 4 * s * b * h * 2 / 231.6e6 + 2 * 3 * 0.003)
    blocks = four.partition[1]  # a middle stage: blocks only
    c1, c4 = one.costs.stages[1], four.costs.stages[1]
    # the matmuls split 4 ways, the norms and dropout-adds whole on every rank, two all-reduces
    hbm = 2039e6  # a100-80g, bytes per ms
    split = (block1.forward_bytes - block4.forward_bytes) * 4 / 3  # bytes t splits: B1 - B4 = 3/4 of them
    whole = blocks * (block1.forward_bytes - split) / hbm  # what every rank does whole
    assert c4.forward_ms == pytest.approx(c1.forward_ms / 4 + 3 / 4 * whole + blocks * 2 * ar)
    assert c4.params < c1.params / 3
    assert c4.activation_bytes == blocks * block_activation_bytes(s, b, h, tp.model.heads, 2, "none", 4)
    summary = summarize(predict(tp).trace)
    assert summary.meta["num_devices"] == 4 * 4 * 1


def test_tensor_parallel_must_divide_the_heads() -> None:
    data = small_gpt().model_dump(exclude_none=True)
    data["tensor_parallel"] = 3
    with pytest.raises(ScenarioError, match=r"^tensor_parallel \(3\) must divide model.heads \(40\)"):
        parse_scenario(data)


def test_gpt3_175b_on_1024_gpus_simulates_and_lands_near_the_published_figures() -> None:
    s = load(SCENARIOS / "megatron-gpt3-175b.yaml")
    assert s.pipeline.stages * s.data_parallel * s.tensor_parallel == 1024
    summary = summarize(predict(s).trace)
    assert summary.fits is True
    # published: 34-37 % MFU (45-49 % counting recomputation); ppsim's roofline lands a little above
    assert 0.30 < summary.mfu < 0.45


def test_a_device_of_ones_own(tmp_path) -> None:
    from ppsim.inputs.hardware import DEVICES

    (tmp_path / "gpu.yaml").write_text(
        "my-gpu:\n  description: a small accelerator\n  peak_tflops: {bf16: 100, fp16: 100, fp32: 10}\n"
        "  memory_gb: 16\n  hbm_gb_s: 1000\n  efficiency: 0.5\n"
        "  intra_node: {bandwidth_gb_s: 100, latency_us: 2}\n  inter_node: {bandwidth_gb_s: 10, latency_us: 5}\n")
    text = GPT_YAML.read_text()
    scen = tmp_path / "s.yaml"
    scen.write_text(text.replace("device: a100-80g", "device: my-gpu\n  device_file: gpu.yaml"))
    s = load(scen)
    summary = summarize(predict(s).trace)
    assert summary.memory_capacity_bytes == 16 * 2**30 and summary.fits is False
    assert summary.meta["peak_flops_per_device"] == 100e12
    assert "a100-80g" in DEVICES  # the catalogue itself is a data file
    (tmp_path / "gpu.yaml").write_text("my-gpu:\n  description: no figures\n  efficiency: 0.5\n")
    with pytest.raises(ScenarioError, match="hardware.device_file: .*device 'my-gpu' lacks or has a bad"):
        load(scen)
    (tmp_path / "gpu.yaml").write_text("my-gpu:\n  description: no figures\n")
    with pytest.raises(ScenarioError, match="device 'my-gpu': give efficiency .* or matmul_best"):
        load(scen)


@pytest.mark.parametrize("stage, weights, gradients, optimizer", [
    (0, 2000, 2000, 12000), (1, 2000, 2000, 3000), (2, 2000, 500, 3000), (3, 500, 500, 3000)])
def test_each_zero_stage_shards_its_own_model_state(stage: int, weights: int, gradients: int, optimizer: int) -> None:
    """ZeRO-1 shards the optimizer state over the replicas, ZeRO-2 also the gradients, ZeRO-3 also
    the weights (DeepSpeed's estimate_zero*_model_states_mem_needs): 1,000 params, 4 replicas."""
    m = static_memory(1000, 2, zero_stage=stage, data_parallel=4)
    assert (m.weights, m.gradients, m.optimizer) == (weights, gradients, optimizer)


def test_the_embedding_keeps_its_dropout_mask_and_token_ids_not_its_output() -> None:
    """The embedding's output is the first block's input, which the block already holds; what the
    embedding itself keeps is its dropout mask (1 byte per element) and the int64 token ids."""
    from ppsim.costs.layers import gpt_layers
    from ppsim.inputs.scenario import ModelSpec

    m = ModelSpec(layers=2, hidden=1024, heads=16, seq_len=2048, vocab=50000)
    s, b, h = 2048, 2, 1024
    assert gpt_layers(m, b)[0].activation_bytes == s * b * h + 8 * s * b
    assert gpt_layers(m, b, tensor_parallel=4, sequence_parallel=True)[0].activation_bytes == s * b * h // 4 + 8 * s * b
    no_dropout = m.model_copy(update={"dropout": False})
    assert gpt_layers(no_dropout, b)[0].activation_bytes == 8 * s * b


def test_megatrons_combined_1f1b_holds_one_micro_batch_through_its_overlapped_passes() -> None:
    """On one rank (its two virtual stages), (F i+1 ; B i) interleave layer by layer: the forward
    takes what the backward frees, so the rank holds one micro-batch's activations of the whole
    model, not one and a half (as torch's runtime, running the parts one after the other, would)."""
    s = small_gpt().with_overrides(schedule="combined-1f1b", stages=1, microbatches=4)
    assert s.pipeline.overlap_layerwise and s.pipeline.chunks == 2
    pred = predict(s)
    costs, metrics = pred.workload.costs.stages, summarize(pred.trace).per_rank[0]
    assert all(c.memory is not None for c in costs)
    whole = sum(c.memory.total + c.activation_bytes for c in costs if c.memory is not None)
    assert metrics.peak_memory_bytes == pytest.approx(whole)
    assert metrics.peak_activation_microbatches == 1


def test_torchs_dualpipev_takes_the_forwards_activations_before_the_backward_frees_its_own() -> None:
    """The same DualPipeV plan: torch's runtime (its own split backward) runs an overlapped pair one
    pass after the other; DeepSeek's, through its weight-gradient store, layer by layer."""
    torch = small_gpt().with_overrides(schedule="dualpipev", chunks=2, microbatches=8)
    deepseek = torch.model_copy(update={"pipeline": torch.pipeline.model_copy(update={"split_backward": "store"})})
    assert not torch.pipeline.overlap_layerwise and deepseek.pipeline.overlap_layerwise
    by_torch, by_deepseek = (summarize(predict(x).trace).per_rank for x in (torch, deepseek))
    assert all(d.peak_memory_bytes <= t.peak_memory_bytes for d, t in zip(by_deepseek, by_torch))
    assert any(d.peak_memory_bytes < t.peak_memory_bytes for d, t in zip(by_deepseek, by_torch))
