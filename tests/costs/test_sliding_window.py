"""Sliding-window attention (``model.attention_window``, ``model.full_attention_every``): the keys a
FlashAttention kernel runs per query against their integral, a windowed block's FLOPs worked by
hand, GPT-OSS 120B's parameters against its model card, each stage pricing its own windowed and full
blocks, and the rules as one-line errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import invoke
from ppsim.cli import app
from ppsim.costs.gemms import attended_keys
from ppsim.costs.layers import gpt_layers
from ppsim.costs.layout import Layout, lay_out
from ppsim.costs.moe import ExpertShard
from ppsim.costs.workload import block_kinds, model_layers
from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import ModelSpec, parse_scenario
from ppsim.prediction import build

#: GPT-OSS 120B as Megatron-Bridge's provider gives it: 64 query heads of 64, 8 key/value heads,
#: 128 experts of width 2880 (top 4), windows of 128 keys on every other layer
GPT_OSS: dict[str, Any] = {"layers": 36, "hidden": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64,
                           "ffn_hidden": 2880, "seq_len": 4096, "vocab": 201088, "mlp": "swiglu",
                           "positions": "rope", "dropout": False, "attention_window": 128,
                           "full_attention_every": 2, "moe": {"experts": 128, "top_k": 4, "ffn_hidden": 2880}}


@given(keys=st.integers(1, 1 << 16), window=st.integers(0, 1 << 17))
def test_a_window_runs_the_mean_of_its_band(keys: int, window: int) -> None:
    """The continuous mean of min(x, w + 1) over x in [0, s] (the convention that gives s / 2 for
    full causal attention)."""
    seen = min(window + 1, keys)
    integral = (seen * seen / 2 + (keys - seen) * seen) / keys
    assert attended_keys(keys, window) == pytest.approx(integral, rel=1e-12)


@given(keys=st.integers(1, 600), window=st.integers(0, 700))
def test_the_mean_is_within_half_a_key_of_the_discrete_one(keys: int, window: int) -> None:
    """Query p (from 0) sees min(p + 1, w + 1) keys."""
    assume(window + 1 < keys)  # a window inside the sequence (else the model's convention: s / 2)
    discrete = sum(min(p + 1, window + 1) for p in range(keys)) / keys
    assert abs(attended_keys(keys, window) - discrete) <= 0.5 + 1e-9


def test_without_a_window_or_past_the_sequence_a_query_runs_half_the_keys() -> None:
    assert attended_keys(4096) == attended_keys(4096, 4095) == attended_keys(4096, 10**6) == 2048


def test_a_windowed_block_runs_its_band_of_the_attention() -> None:
    """s = 4096, w = 128: FlashAttention runs 129 - 129^2 / 8192 = 126.97 keys per query instead of
    2048; per head the scores and context matmuls are 2 x 2 s x keys x d FLOPs each pass; the
    projections and the MLP are unchanged."""
    m = ModelSpec(**{**GPT_OSS, "moe": None})
    _, full, _ = gpt_layers(m, 1, flash_attention=True)
    _, windowed, _ = gpt_layers(m, 1, flash_attention=True, windowed=True)
    band = 129 - 129**2 / 8192
    q = 64 * 64
    attention = lambda keys: 4 * 4096 * keys * q  # noqa: E731 - scores and context, one pass
    assert full.forward_flops - windowed.forward_flops == pytest.approx(attention(2048) - attention(band))
    # the input grad runs both matmuls' two gradients and recomputes the scores
    assert full.input_grad_flops - windowed.input_grad_flops == pytest.approx(2.5 * (attention(2048) - attention(band)))
    assert full.weight_grad_flops == windowed.weight_grad_flops
    assert full.params == windowed.params and full.activation_bytes == windowed.activation_bytes


def test_without_flash_attention_the_window_is_masked_not_skipped() -> None:
    """The unfused path computes every score: the same matmuls, more of them masked."""
    m = ModelSpec(**{**GPT_OSS, "moe": None})
    _, full, _ = gpt_layers(m, 1)
    _, windowed, _ = gpt_layers(m, 1, windowed=True)
    assert windowed.forward_flops == full.forward_flops and windowed.gemms == full.gemms
    whole = 4 * 4096 * 4096 * 64 * 64
    band = 129 - 129**2 / 8192
    assert windowed.masked_flops - full.masked_flops == pytest.approx(3 * whole * (0.5 - band / 4096))


def test_gpt_oss_120b_has_the_parameters_of_its_model_card() -> None:
    """OpenAI's gpt-oss model card: 116.83B parameters, 5.13B active per token (the card counts the
    unembedding active, not the embedding's lookup table). ppsim counts no biases (the linear
    layers' and the attention sinks': about 0.04B) beside the weights."""
    m = ModelSpec(**GPT_OSS)
    emb, block, head = gpt_layers(m, 1, experts=ExpertShard(m.moe))  # type: ignore[arg-type]
    total = m.layers * block.params + emb.params + head.params
    assert total == pytest.approx(116.83e9, rel=0.002)
    active = total - m.layers * block.expert_params * (128 - 4) / 128 - emb.params
    assert active == pytest.approx(5.13e9, rel=0.01)


def _layout(scenario: dict[str, Any]) -> Layout:
    """The scenario's stages as the cost builders see them (9 blocks on each of 4 stages)."""
    s = parse_scenario(scenario)
    layers = model_layers(s)
    return lay_out(s, [9, 9, 9, 9], layers, (0, 1, 2, 3), block_kinds(s, layers))


def _scenario(**model: Any) -> dict[str, Any]:
    return {"model": {**GPT_OSS, **model}, "pipeline": {"stages": 4, "microbatches": 8},
            "training": {"flash_attention": True}, "hardware": {"device": "h100-sxm"}}


def test_each_stage_prices_its_own_windowed_and_full_blocks() -> None:
    """36 layers on 4 stages, 9 each: layers 1, 3, ..., 35 (counted from 1) are windowed, so the
    first and third stage hold 5 windowed and 4 full blocks, the second and fourth 4 and 5."""
    windowed = _layout(_scenario(moe=None))
    full = _layout(_scenario(moe=None, attention_window=None, full_attention_every=None))
    m = ModelSpec(**{**GPT_OSS, "moe": None})
    _, block, _ = gpt_layers(m, 1, flash_attention=True)
    _, window, _ = gpt_layers(m, 1, flash_attention=True, windowed=True)
    saved = block.forward_flops - window.forward_flops
    assert [st.blocks for st in windowed.stages] == [9, 9, 9, 9]
    for k, want in enumerate((5, 4, 5, 4)):
        assert full.stages[k].forward_flops - windowed.stages[k].forward_flops == pytest.approx(want * saved)
        assert sum(g.flops for g in windowed.stages[k].gemms.forward) == pytest.approx(
            windowed.stages[k].forward_flops, rel=1e-12)


def test_every_layer_windowed_without_full_attention_every() -> None:
    every = _layout(_scenario(moe=None, full_attention_every=None))
    half = _layout(_scenario(moe=None))
    assert all(a.forward_flops < b.forward_flops for a, b in zip(every.stages, half.stages, strict=True))


def test_a_moe_model_windows_its_moe_blocks_too() -> None:
    """GPT-OSS: every block has experts; a windowed MoE block is the MoE block less the band."""
    moe = _layout({**_scenario(), "expert_parallel": 8, "data_parallel": 8})
    full = _layout({**_scenario(attention_window=None, full_attention_every=None), "expert_parallel": 8,
                    "data_parallel": 8})
    for a, b in zip(moe.stages, full.stages, strict=True):
        assert a.moe_blocks == b.moe_blocks == 9
        assert a.forward_flops < b.forward_flops
    pred = build(parse_scenario({**_scenario(), "expert_parallel": 8, "data_parallel": 8}))
    assert pred.workload.costs.stages[0].forward_overlap_ms > 0  # the all-to-alls of windowed MoE blocks


def test_full_attention_every_without_a_window_is_refused() -> None:
    with pytest.raises(ScenarioError, match="full_attention_every .* no attention_window: add one"):
        parse_scenario(_scenario(attention_window=None))


def test_the_cli_names_the_key_and_ppexec_and_profiles_refuse_a_window(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "oss.yaml"
    path.write_text(yaml.safe_dump(_scenario(moe=None, attention_window=None)))
    result = invoke(app, "run", path)
    assert result.exit_code == 1
    assert "full_attention_every" in result.output and "Traceback" not in result.output
    from ppexec.launch.prepare import check_buildable
    from ppsim.errors import PpsimError

    plain = {k: v for k, v in GPT_OSS.items() if k in ("layers", "hidden", "heads", "seq_len", "vocab")}
    with pytest.raises(PpsimError, match="attention_window"):
        check_buildable(parse_scenario({**_scenario(), "model": {**plain, "attention_window": 128}}))
