"""Llama-style models (grouped-query attention, SwiGLU, RoPE, no dropout), FlashAttention, sequence
parallelism and embedding-only / head-only virtual stages; the published Llama 3 405B run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import SCENARIOS, gpt
from ppsim.costs import build_workload
from ppsim.costs.layers import LayerCost, gpt_layers
from ppsim.costs.memory import block_activation_bytes
from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import ModelSpec, load, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize

LLAMA3 = SCENARIOS / "llama3-405b.yaml"


def llama(layers: int, hidden: int, heads: int, ffn: int, kv: int = 8) -> ModelSpec:
    return ModelSpec(layers=layers, hidden=hidden, heads=heads, kv_heads=kv, ffn_hidden=ffn, mlp="swiglu",
                     positions="rope", dropout=False, seq_len=8192, vocab=128256)


@pytest.mark.parametrize("model, published", [
    (llama(32, 4096, 32, 14336), 8.03e9),  # Llama 3 8B
    (llama(80, 8192, 64, 28672), 70.6e9),  # Llama 3 70B
    (llama(126, 16384, 128, 53248), 405.9e9),  # Llama 3 405B
])
def test_llama3_parameter_counts_match_the_published_sizes(model: ModelSpec, published: float) -> None:
    emb, block, head = gpt_layers(model, 1)
    total = emb.params + model.layers * block.params + head.params
    assert total == pytest.approx(published, rel=0.003)


@given(s=st.integers(1, 4096), b=st.integers(1, 8), h_per_head=st.sampled_from([32, 64, 128]),
       a=st.sampled_from([8, 16, 32]), t=st.sampled_from([1, 2, 4, 8]))
def test_gpt_blocks_keep_korthikantis_bytes(s: int, b: int, h_per_head: int, a: int, t: int) -> None:
    h = a * h_per_head
    sbh = s * b * h
    # multi-head attention, GELU MLP of 4h, dropout: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism
    # the 10 sbh are split too
    exact = sbh * (10 + 24 / t + 5 * a * s / (h * t))
    assert block_activation_bytes(s, b, h, a, 2, "none", t) == pytest.approx(exact, abs=1)
    sp = block_activation_bytes(s, b, h, a, 2, "none", t, sequence_parallel=True)
    assert sp == pytest.approx(sbh * (34 / t + 5 * a * s / (h * t)), abs=1)
    assert block_activation_bytes(s, b, h, a, 2, "selective", t, sequence_parallel=True) == pytest.approx(
        34 * sbh / t, abs=1)
    assert block_activation_bytes(s, b, h, a, 2, "full", t, sequence_parallel=True) == pytest.approx(
        2 * sbh / t, abs=1)
    # FlashAttention keeps no scores: what selective recomputation keeps
    assert block_activation_bytes(s, b, h, a, 2, "none", t, flash_attention=True) == \
        block_activation_bytes(s, b, h, a, 2, "selective", t)


def test_grouped_query_attention_swiglu_and_no_dropout_change_the_kept_values_as_counted() -> None:
    s, b, h, a, f = 4096, 1, 4096, 32, 14336
    sbh = s * b * h
    base = block_activation_bytes(s, b, h, a, 2, "selective")
    # K and V of 8 heads instead of 32: 4 x (1 - 8/32) sbh fewer
    assert base - block_activation_bytes(s, b, h, a, 2, "selective", kv_heads=8) == 3 * sbh
    # SwiGLU of width f keeps 6 sbf where GELU of 4h keeps 16 sbh
    swiglu = block_activation_bytes(s, b, h, a, 2, "selective", ffn_hidden=f, mlp="swiglu")
    assert swiglu - base == 6 * s * b * f - 16 * sbh
    # no dropout: two 1-byte masks fewer, and 3as^2b of the attention's dropout
    assert base - block_activation_bytes(s, b, h, a, 2, "selective", dropout=False) == 2 * sbh
    none, none_nd = (block_activation_bytes(s, b, h, a, 2, "none", dropout=d) for d in (True, False))
    assert none - none_nd == 2 * sbh + 3 * a * s * s * b


def test_grouped_query_attention_and_swiglu_flops() -> None:
    gpt = ModelSpec(layers=1, hidden=4096, heads=32, seq_len=2048, vocab=32000)
    g = ModelSpec(layers=1, hidden=4096, heads=32, kv_heads=8, seq_len=2048, vocab=32000)
    sw = ModelSpec(layers=1, hidden=4096, heads=32, mlp="swiglu", ffn_hidden=11008, seq_len=2048, vocab=32000)
    b, s, h = 1, 2048, 4096
    fwd = {"gpt": gpt_layers(gpt, b)[1].forward_flops, "gqa": gpt_layers(g, b)[1].forward_flops,
           "swiglu": gpt_layers(sw, b)[1].forward_flops}
    assert fwd["gpt"] - fwd["gqa"] == pytest.approx(4 * (1 - 8 / 32) * b * s * h * h)  # K and V projections
    assert fwd["swiglu"] - fwd["gpt"] == pytest.approx(6 * b * s * h * 11008 - 4 * b * s * h * 4 * h)


def test_flash_attention_skips_the_masked_half_and_recomputes_the_scores() -> None:
    """The causal model's attention, 4 b s s h FLOPs forward over every key: the unfused path runs
    it all and masks half; FlashAttention runs the half below the diagonal, and its backward the
    scores again (a quarter). Model FLOPs (what MFU counts) are the same either way: three times the
    causal half, besides the linear layers."""
    m = ModelSpec(layers=1, hidden=4096, heads=32, seq_len=4096, vocab=32000)
    plain, flash = gpt_layers(m, 1)[1], gpt_layers(m, 1, flash_attention=True)[1]
    whole = 4 * 4096 * 4096 * 4096
    assert plain.forward_flops - flash.forward_flops == pytest.approx(whole / 2)
    assert plain.input_grad_flops - flash.input_grad_flops == pytest.approx(2 * whole - (whole + whole / 4))
    assert flash.recompute_flops == pytest.approx(whole / 4) and flash.masked_flops == 0
    assert plain.masked_flops == pytest.approx(1.5 * whole)

    def model_flops(x: LayerCost) -> float:
        return x.forward_flops + x.input_grad_flops + x.weight_grad_flops - x.recompute_flops - x.masked_flops

    assert model_flops(plain) == pytest.approx(model_flops(flash))
    assert model_flops(flash) - 3 * flash.weight_grad_flops == pytest.approx(3 * whole / 2)


def _scenario(**changes: object):
    data = gpt().model_dump(exclude_none=True)
    data["pipeline"].update(stages=4, microbatches=8, chunks=2, schedule="interleaved-1f1b")
    data["data_parallel"] = 1
    data["training"] = {"micro_batch": 1}
    for key, value in changes.items():
        *path, name = key.split("__")
        node = data
        for part in path:
            node = node.setdefault(part, {})
        node[name] = value
    return parse_scenario(data)


def test_sequence_parallelism_sends_a_tensor_rank_its_share_of_the_sequence() -> None:
    whole = build_workload(_scenario(tensor_parallel=4, pipeline__scatter_gather=False))
    scattered = build_workload(_scenario(tensor_parallel=4))
    sp = build_workload(_scenario(tensor_parallel=4, training__sequence_parallel=True))
    assert sp.costs.message_bytes * 4 == whole.costs.message_bytes == scattered.costs.message_bytes * 4
    assert all(a.activation_bytes < b.activation_bytes for a, b in zip(sp.costs.stages, whole.costs.stages))
    # scatter-gather: the receiving group all-gathers the message over its tensor-parallel link
    # (A100 NVLink as collectives reach it, 231.6 GB/s, 3 us): 3/4 x 4 MiB / 231.6 GB/s + 3 x 3 us;
    # sequence parallelism needs none
    gather_ms = 3 / 4 * whole.costs.message_bytes / 231.6e6 + 3 * 3e-3
    assert scattered.costs.links[0].recv_overhead_ms == pytest.approx(gather_ms)
    assert whole.costs.links[0].recv_overhead_ms == 0 == sp.costs.links[0].recv_overhead_ms


def test_first_and_last_virtual_stages_may_hold_only_the_embedding_and_the_head() -> None:
    s = _scenario(pipeline__partition=[0, 6, 6, 6, 6, 6, 5, 5])  # 4 stages x 2 chunks, 40 layers
    w = build_workload(s)
    assert w.partition == [0, 6, 6, 6, 6, 6, 5, 5]
    first = w.costs.stages[0]
    assert first.layers == 0 and first.params > 0  # the embedding's table
    summary = summarize(predict(s).trace)
    assert summary.step_time_ms > 0
    s2 = _scenario(pipeline__partition=[5, 5, 6, 6, 6, 6, 6, 0])
    assert build_workload(s2).costs.stages[-1].layers == 0


@pytest.mark.parametrize("counts", [[5, 0, 6, 6, 6, 6, 6, 5], [-1, 6, 6, 6, 6, 6, 6, 5]])
def test_an_empty_middle_stage_or_a_negative_count_is_refused(counts: list[int]) -> None:
    with pytest.raises(ScenarioError, match="pipeline.partition"):
        _scenario(pipeline__partition=counts)


def test_kv_heads_must_divide_heads_and_be_split_by_tensor_parallelism() -> None:
    with pytest.raises(ScenarioError, match=r"model.*kv_heads \(12\) must divide heads \(40\)"):
        _scenario(model__kv_heads=12)
    with pytest.raises(ScenarioError, match=r"tensor_parallel.*kv_heads \(2\)"):
        _scenario(model__kv_heads=2, tensor_parallel=4)


def test_llama3_405b_on_16k_h100s_lands_in_the_published_range() -> None:
    s = load(LLAMA3)
    assert s.pipeline.stages * s.data_parallel * s.tensor_parallel == 16384
    summary = summarize(predict(s).trace)
    # published (the scenario's comment): 38-43 % BF16 MFU over Table 4's rows, 41 % for this one
    assert 0.36 < summary.mfu < 0.44
    assert summary.fits is True
    assert summary.meta["partition"][0] == 0 and summary.meta["partition"][-1] == 0


def test_tied_embeddings_all_reduce_between_the_first_and_last_stage_before_the_step() -> None:
    """Megatron's GPT ties the LM head to the embedding: with the first and last virtual stage on
    different ranks each keeps a copy and they all-reduce its gradient (a ring of 2: V x h x 2 bytes
    / bandwidth + 2 x latency over the stage link), charged to both stages' optimizer step."""
    link = {"bandwidth_gb_s": 25.0, "latency_us": 5.0}
    untied = build_workload(_scenario(hardware__link=link)).costs.stages
    tied = build_workload(_scenario(hardware__link=link, model__tie_embeddings=True)).costs.stages
    m = gpt().model
    assert m is not None
    expected = m.vocab * m.hidden * 2 / 25e6 + 2 * 5e-3
    assert tied[0].optimizer_ms - untied[0].optimizer_ms == pytest.approx(expected)
    assert tied[-1].optimizer_ms - untied[-1].optimizer_ms == pytest.approx(expected)
    assert [a.optimizer_ms for a in tied[1:-1]] == [a.optimizer_ms for a in untied[1:-1]]
    assert [a.params for a in tied] == [a.params for a in untied]  # each of the two ranks keeps its copy


@pytest.mark.parametrize("changes", [
    {"pipeline__stages": 1, "pipeline__chunks": 1, "pipeline__schedule": "1f1b"},
    {"pipeline__schedule": "zb-v"},  # a V: the first and last virtual stage are both on rank 0
])
def test_tied_embeddings_on_one_rank_are_one_table_and_need_no_all_reduce(changes: dict[str, object]) -> None:
    from ppsim.prediction import build

    untied = build(_scenario(**changes)).workload.costs.stages
    tied = build(_scenario(model__tie_embeddings=True, **changes)).workload.costs.stages
    m = gpt().model
    assert m is not None
    assert tied[-1].params == untied[-1].params - m.vocab * m.hidden
    assert sum(a.params for a in untied) - sum(a.params for a in tied) == m.vocab * m.hidden
    # no all-reduce: the first stage's step only shrinks with its parameters (the head's table is gone)
    assert tied[0].optimizer_ms <= untied[0].optimizer_ms
