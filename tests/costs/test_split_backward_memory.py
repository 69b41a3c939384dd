"""What a split backward keeps between a micro-batch's input grad and its weight grad
(``weight_grad_pending_bytes``): the gradient of every weight op's output, which
``bench/activation_memory.py`` measured as torch's split keeps it (the forward's saved tensors plus
2 sb (q + 2kv + 4h + (m - 1) f) / t bytes a block in 16-bit values), worked by hand here; the first
stage keeps none; and a zero-bubble plan's peak counts them."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import GPT_YAML, SCENARIOS
from ppsim.costs import build_workload
from ppsim.costs.layers import gpt_layers
from ppsim.costs.low_precision import LowPrecision
from ppsim.inputs.scenario import ModelSpec, load, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import OWED_PART, summarize

GPT: dict[str, Any] = {"layers": 4, "hidden": 1024, "heads": 16, "seq_len": 2048, "vocab": 50304}
LLAMA: dict[str, Any] = {"layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
                         "seq_len": 4096, "vocab": 128256, "mlp": "swiglu", "positions": "rope", "dropout": False}


def test_a_gpt_block_keeps_eleven_h_a_token() -> None:
    """QKV's 3h, the attention projection's h, the MLP's f = 4h and h, the two norms' h each."""
    b, s, h = 2, 2048, 1024
    _, block, _ = gpt_layers(ModelSpec(**GPT), b)
    assert block.weight_grad_pending_bytes == 2 * s * b * 11 * h


def test_a_llama_block_keeps_q_2kv_4h_and_two_f() -> None:
    s, h, kv, f = 4096, 4096, 1024, 14336  # 8 of 32 heads of 128 for K and V
    _, block, _ = gpt_layers(ModelSpec(**LLAMA), 1)
    assert block.weight_grad_pending_bytes == 2 * s * (h + 2 * kv + 4 * h + 2 * f)


def test_tensor_parallelism_splits_the_column_parallel_outputs_and_sequence_parallelism_the_norms() -> None:
    """Per device of t = 4: QKV's and the MLP up projections' outputs are split; the row-parallel
    outputs (attention projection, down projection) are whole h; the norms' h split only under
    sequence parallelism. The LM head keeps its logits' gradient (V / t a token) and its norm's."""
    s, h, kv, f, V, t = 4096, 4096, 1024, 14336, 128256, 4
    model = ModelSpec(**LLAMA)
    for sp in (False, True):
        _, block, head = gpt_layers(model, 1, tensor_parallel=t, sequence_parallel=sp)
        norms = 2 * h / (t if sp else 1)
        assert block.weight_grad_pending_bytes == pytest.approx(2 * s * ((h + 2 * kv) / t + h + 2 * f / t + h + norms))
        assert head.weight_grad_pending_bytes == pytest.approx(2 * s * (V / t + h / (t if sp else 1)))


def test_full_recomputation_keeps_what_the_rerun_forward_saved_too() -> None:
    """The input grad runs the forward again: until the weight grad, the block holds what that
    forward saved besides its checkpointed input."""
    model = ModelSpec(**GPT)
    _, none, _ = gpt_layers(model, 1, "none")
    _, full, _ = gpt_layers(model, 1, "full")
    assert full.weight_grad_pending_bytes == none.weight_grad_pending_bytes + none.activation_bytes - full.activation_bytes


def small(schedule: str) -> Any:
    data = load(GPT_YAML).model_dump(exclude_none=True)
    data["pipeline"].update(stages=4, microbatches=8, partition="uniform", schedule=schedule)
    data["data_parallel"] = 1
    data["training"] = {"micro_batch": 1}
    return parse_scenario(data)


def test_the_first_stage_keeps_none_the_others_their_layers_sum() -> None:
    """torch runs the first stage's whole backward at its weight grad (its input is token ids)."""
    costs = build_workload(small("zb-h1")).costs.stages
    layers = gpt_layers(small("zb-h1").model, 1)  # type: ignore[arg-type]
    block, head = layers[1].weight_grad_pending_bytes, layers[2].weight_grad_pending_bytes
    blocks = [c.layers for c in costs]
    assert costs[0].weight_grad_pending_bytes == 0
    assert [c.weight_grad_pending_bytes for c in costs[1:]] == [
        int(n * block + (head if k == len(costs) - 1 else 0)) for k, n in enumerate(blocks[1:], 1)]


def test_a_zero_bubble_peak_counts_the_gradients_between_the_halves_and_1f1b_does_not() -> None:
    """At each rank's peak it holds whole micro-batches of activations and, on ZB-H1's ranks past
    the first, the output gradients of whole micro-batches whose weight grad is still owed (the
    peak's breakdown names them apart); 1F1B's peaks have no such part."""
    for schedule in ("1f1b", "zb-h1"):
        pred = predict(small(schedule))
        costs = pred.workload.costs.stages
        for r, metrics in enumerate(summarize(pred.trace).per_rank):
            c, parts = costs[r], metrics.peak_parts()
            assert c.memory is not None and parts is not None and metrics.peak_memory_bytes is not None
            assert sum(parts.values()) == pytest.approx(metrics.peak_memory_bytes)
            assert parts["activations"] / c.activation_bytes == pytest.approx(round(parts["activations"] / c.activation_bytes))
            if schedule == "1f1b":
                assert OWED_PART not in parts
            elif r == 0:
                assert parts[OWED_PART] == 0
            else:
                owed = parts[OWED_PART] / c.weight_grad_pending_bytes
                assert owed >= 1 and owed == pytest.approx(round(owed))


def test_a_weight_gradient_store_keeps_each_linears_input_and_output_gradient() -> None:
    """GPT block, f = 4h: inputs of QKV h, of the projection h, of the MLP's up h and down f (7h);
    outputs 3h, h, f, h (9h); the norms' 2h: 18h a token at 2 bytes. Under FP8 the linears' inputs
    and output gradients are kept at a byte each, the norms' at the dtype's."""
    b, s, h = 2, 2048, 1024
    _, block, _ = gpt_layers(ModelSpec(**GPT), b)
    assert block.weight_grad_store_bytes == 2 * s * b * 18 * h
    _, fp8, _ = gpt_layers(ModelSpec(**GPT), b, narrow=LowPrecision("tensorwise"))
    assert fp8.weight_grad_store_bytes == 1 * s * b * 16 * h + 2 * s * b * 2 * h


def test_a_store_frees_the_activations_at_the_input_grad() -> None:
    """The same ZB-H1 plan through a weight-gradient store: every stage (the first too) keeps its
    store bytes, and each rank's peak holds its activations only until the input grad."""
    autograd, store = small("zb-h1"), small("zb-h1").model_copy(
        update={"pipeline": small("zb-h1").pipeline.model_copy(update={"split_backward": "store"})})
    w = build_workload(store)
    assert w.costs.input_grad_frees and not build_workload(autograd).costs.input_grad_frees
    layers = gpt_layers(store.model, 1)  # type: ignore[arg-type]
    assert w.costs.stages[0].weight_grad_pending_bytes == int(w.costs.stages[0].layers * layers[1].weight_grad_store_bytes)
    by_torch = summarize(predict(autograd).trace).per_rank
    for r, metrics in enumerate(summarize(predict(store).trace).per_rank):
        c, parts = w.costs.stages[r], metrics.peak_parts()
        assert parts is not None and parts[OWED_PART] / c.weight_grad_pending_bytes == pytest.approx(
            round(parts[OWED_PART] / c.weight_grad_pending_bytes))
        # the activations go at each input grad: fewer micro-batches' of them than torch keeps to W
        assert metrics.peak_activation_microbatches <= by_torch[r].peak_activation_microbatches
    assert sum(m.peak_activation_microbatches for m in by_torch) > sum(
        m.peak_activation_microbatches for m in summarize(predict(store).trace).per_rank)


def test_deepseeks_own_layout_fits_through_its_weight_gradient_store_not_through_torchs() -> None:
    """DeepSeek-V3's DualPipeV on 2,048 H800s fits in 80 GiB as DualPipe's WeightGradStore keeps
    it (the scenario's split_backward: store); torch's runtime, keeping the graph, would not."""
    s = load(SCENARIOS / "deepseek-v3.yaml")
    assert s.pipeline.split_backward == "store"
    fits = summarize(predict(s).trace).fits
    torch = s.model_copy(update={"pipeline": s.pipeline.model_copy(update={"split_backward": "autograd"})})
    assert fits is True and summarize(predict(torch).trace).fits is False


def test_a_recomputed_module_keeps_what_its_rerun_saved_until_the_weight_grad() -> None:
    """Selective recomputation of the MLP (a module with weights): the input grad runs it again,
    and torch keeps what that saved until the weight grad, which the forward no longer holds."""
    model = ModelSpec(**LLAMA)
    core = gpt_layers(model, 1, "selective", recompute_modules=["core_attn"])[1]
    mlp = gpt_layers(model, 1, "selective", recompute_modules=["core_attn", "mlp"])[1]
    assert mlp.activation_bytes < core.activation_bytes
    assert mlp.weight_grad_pending_bytes - core.weight_grad_pending_bytes == core.activation_bytes - mlp.activation_bytes
