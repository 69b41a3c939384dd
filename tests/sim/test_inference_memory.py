"""A forward-only plan holds its weights, its message buffers and one micro-batch's activations in
flight: no gradients, no optimizer state, no activations kept for a backward (issue 20)."""

from __future__ import annotations

import json

import pytest

from conftest import GPT_YAML, gpt, invoke
from ppsim.cli import app
from ppsim.prediction import predict
from ppsim.sim import peak_memory_bytes
from ppsim.trace.metrics import summarize


def test_inference_on_gpt_holds_weights_buffers_and_one_micro_batch_by_hand() -> None:
    s = gpt().with_overrides(schedule="inference", partition="uniform")  # 8 stages of 5 blocks
    seq, b, h, a, vocab = 2048, 1, 5120, 40, 51200
    sbh = seq * b * h
    block_params = 12 * h * h + 13 * h  # GPT block: 4h^2 attention + 8h^2 MLP, biases and two LayerNorms
    block_acts = sbh * (34 + 5 * a * seq / h)  # Korthikanti et al., 16-bit, no recompute
    message = sbh * 2  # one s x b x h bf16 activation
    middle = 5 * block_params * 2 + 2 * message * 2 + 5 * block_acts  # weights + 2 neighbours' buffers + acts
    first = middle + (vocab * h + seq * h) * 2 - 2 * message + (sbh + 8 * seq * b)  # + embedding, 1 neighbour
    last = middle + (vocab * h + 2 * h) * 2 - 2 * message + 4 * seq * b * vocab  # + LM head (fp32 logits)
    pred = predict(s)
    peaks = [r.peak_memory_bytes for r in summarize(pred.trace).per_rank]
    assert peaks[1:7] == [pytest.approx(middle)] * 6
    assert peaks[0] == pytest.approx(first) and peaks[7] == pytest.approx(last)
    assert pred.trace.meta["memory_static_bytes"][3]["gradients"] == 0
    assert pred.trace.meta["memory_static_bytes"][3]["optimizer"] == 0
    assert peak_memory_bytes(pred.plan, pred.workload.costs) == pytest.approx(peaks)  # the exact peak agrees
    assert max(peaks) < 10 * 2**30  # was 742-790 GiB: training's states and 128 micro-batches kept


def test_training_still_keeps_the_schedules_micro_batches() -> None:
    s = gpt().with_overrides(schedule="gpipe", partition="uniform", stages=8, microbatches=8)
    pred = predict(s)
    cost = pred.workload.costs.stages[3]
    assert cost.memory is not None
    peak = summarize(pred.trace).per_rank[3].peak_memory_bytes
    assert peak == pytest.approx(cost.memory.total + 8 * cost.activation_bytes)


def test_ppsim_run_inference_fits() -> None:
    res = invoke(app, "run", GPT_YAML, "--schedule", "inference", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["fits"] is True
    assert max(r["peak_memory_bytes"] for r in doc["ranks"]) < 10 * 2**30
