"""FP8 and FP4 training (training.fp8, training.fp4): the blocks' linear layers at the narrow peak,
their casts as HBM work, their inputs kept narrow, the weights' narrow copies; what cannot run is
refused naming the key. Every figure here is worked out by hand from ppsim/costs/low_precision.py's
docstring."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ppsim.costs.layers import gpt_layers
from ppsim.costs.low_precision import LowPrecision
from ppsim.costs.memory import block_activation_bytes
from ppsim.errors import PpsimError, ScenarioError
from ppsim.inputs.hardware import DEVICES
from ppsim.inputs.scenario import ModelSpec, parse_scenario
from ppsim.prediction import build

#: h = 1024, f = 4096, 16 heads, s = 1024, b = 2, GELU, no dropout: 2,048 tokens
MODEL = ModelSpec(layers=8, hidden=1024, heads=16, seq_len=1024, vocab=32768, dropout=False)
TOKENS, H, F = 2048, 1024, 4096


def scenario(**training: Any) -> dict[str, Any]:
    return {"name": "fp8", "model": MODEL.model_dump(exclude_none=True),
            "pipeline": {"stages": 2, "microbatches": 4, "partition": "uniform"},
            "training": {"micro_batch": 2, "flash_attention": True, **training},
            "hardware": {"device": "h100-sxm", "efficiency": 0.5, "launch_us": 0}}  # the GPU's time alone


def test_the_casts_are_each_linear_inputs_and_output_grads_bytes() -> None:
    """Per value cast: read 2 bytes, write 1 row-wise and 1 column-wise; current scaling reads it
    once more for its amax; MXFP8 adds a 1-byte scale per 32 values to each FP8 copy, and its cast
    takes 1.2x a copy of those bytes."""
    linears = [(H, 3 * H), (H, H), (H, F), (F, H)]  # QKV, attention output, up, down (t = 1)
    inputs, grads = TOKENS * (3 * H + F), TOKENS * (5 * H + F)
    delayed = LowPrecision("delayed").cast_traffic(linears, TOKENS, 2)
    assert (delayed.forward, delayed.backward) == (4 * inputs, 4 * grads)
    current = LowPrecision("tensorwise").cast_traffic(linears, TOKENS, 2)
    assert (current.forward, current.backward) == (6 * inputs, 6 * grads)
    mx = LowPrecision("mxfp8").cast_traffic(linears, TOKENS, 2)
    assert mx.forward == pytest.approx(1.2 * (2 + 2 * (1 + 1 / 32)) * inputs)


def test_the_linear_layers_run_at_the_fp8_peak_and_the_rest_at_bf16() -> None:
    """A block's forward, flat efficiency 0.5 on the H100 (989 bf16, 1,979 fp8 TFLOP/s): the four
    linear GEMMs' 2T(3h^2 + h^2 + 2hf) FLOPs at the FP8 peak, FlashAttention's 4Ts h at bf16, plus
    the elementwise bytes and the casts at 3,350 GB/s."""
    bf16 = build(parse_scenario(scenario())).workload.costs.stages[0]
    fp8 = build(parse_scenario(scenario(fp8="delayed"))).workload.costs.stages[0]
    linear = 2 * TOKENS * (4 * H * H + 2 * H * F)
    blocks = 4  # the attention and the elementwise work take the same time on both sides
    hbm = 3350e9 / 1e3
    casts = 4 * TOKENS * (3 * H + F)
    expected_saving = blocks * (linear / (989e12 / 1e3 * 0.5) - linear / (1979e12 / 1e3 * 0.5) - casts / hbm)
    assert bf16.forward_ms - fp8.forward_ms == pytest.approx(expected_saving, rel=1e-9)


def test_the_linear_inputs_are_kept_in_one_byte() -> None:
    """Of sbh(34 ...): QKV's and the up projection's inputs (2 sbh), the attention output's (sbh)
    and the down projection's (sbf) drop from 2 bytes to 1 (plus 1/32 of a byte with MXFP8)."""
    s, b, h, a, f = 1024, 2, 1024, 16, 4096
    plain = block_activation_bytes(s, b, h, a, 2, "selective", ffn_hidden=f, dropout=False)
    fp8 = block_activation_bytes(s, b, h, a, 2, "selective", ffn_hidden=f, dropout=False, linear_input_bytes=1.0)
    assert plain - fp8 == 3 * s * b * h + s * b * f
    assert block_activation_bytes(s, b, h, a, 2, "full", linear_input_bytes=1.0) == 2 * s * b * h  # the input only


def test_the_weights_carry_fp8_copies_or_are_fp8() -> None:
    """Linear weights 4h^2 + 2hf of a GELU block: 2 bytes more each for the row- and column-wise
    FP8 copies; with low_precision_params the 2-byte weight itself is FP8 (1 + 1 column-wise): no more."""
    linear_params = 4 * H * H + 2 * H * F
    _, plain, _ = gpt_layers(MODEL, 2)
    _, fp8, _ = gpt_layers(MODEL, 2, narrow=LowPrecision("tensorwise"))
    _, fp8_weights, _ = gpt_layers(MODEL, 2, narrow=LowPrecision("tensorwise", params=True))
    assert (plain.extra_weight_bytes, fp8.extra_weight_bytes, fp8_weights.extra_weight_bytes) == (0, 2 * linear_params, 0)
    assert fp8.step_bytes == linear_params * 4 and fp8_weights.step_bytes == 0  # the weights cast once per step
    stage = build(parse_scenario(scenario(fp8="tensorwise"))).workload.costs.stages[1]
    plain_stage = build(parse_scenario(scenario())).workload.costs.stages[1]
    assert stage.memory.weights - plain_stage.memory.weights == 4 * 2 * linear_params


def test_the_layers_kept_out_of_fp8_run_in_bf16_without_casts() -> None:
    """training.high_precision_first_layers 1 and _last_layers 1 of 8 (Megatron's
    --first-last-layers-bf16): stage 0 (layers 0-3) holds one such layer, stage 1 (4-7) another;
    each costs its linear GEMMs at the bf16 peak and no casts, the others as under FP8; the
    weights of those layers carry no FP8 copies."""
    fp8 = build(parse_scenario(scenario(fp8="delayed"))).workload.costs.stages
    kept = build(parse_scenario(scenario(fp8="delayed", high_precision_first_layers=1,
                                         high_precision_last_layers=1))).workload.costs.stages
    linear = 2 * TOKENS * (4 * H * H + 2 * H * F)
    casts = 4 * TOKENS * (3 * H + F)
    per_layer = linear / (989e12 / 1e3 * 0.5) - linear / (1979e12 / 1e3 * 0.5) - casts / (3350e9 / 1e3)
    for stage in (0, 1):
        assert kept[stage].forward_ms - fp8[stage].forward_ms == pytest.approx(per_layer, rel=1e-9)
        assert fp8[stage].memory.weights - kept[stage].memory.weights == 2 * (4 * H * H + 2 * H * F)
    every = build(parse_scenario(scenario(fp8="delayed", high_precision_last_layers=8))).workload.costs.stages
    plain = build(parse_scenario(scenario())).workload.costs.stages
    assert [c.forward_ms for c in every] == pytest.approx([c.forward_ms for c in plain], rel=1e-12)


@pytest.mark.parametrize("training, says", [
    ({"high_precision_last_layers": 2}, "neither training.fp8 nor training.fp4"),
    ({"fp8": "delayed", "high_precision_first_layers": 5, "high_precision_last_layers": 4}, "more than the model's 8"),
])
def test_layers_kept_out_of_fp8_need_it_and_must_exist(training: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as err:
        build(parse_scenario(scenario(**training)))
    assert err.value.field.startswith("training.high_precision_")


@pytest.mark.parametrize("change, field, says", [
    ({"hardware": {"device": "a100-80g"}, "training": {"fp8": "delayed"}}, "training.fp8", "a100-80g has none"),
    ({"training": {"fp8": "mxfp8"}}, "training.fp8", "mxfp8 needs Blackwell"),
    ({"training": {"low_precision_params": True}}, "training.low_precision_params", "needs training.fp8"),
    ({"training": {"fp4": "nvfp4"}}, "training.fp4", "h100-sxm has none"),
    ({"hardware": {"device": "b200"}, "training": {"fp4": "nvfp4", "fp8": "mxfp8"}}, "training.fp4", "keep one"),
    ({"model": {"dtype": "fp32"}, "training": {"fp8": "delayed"}}, "model.dtype", "set it to bf16"),
])
def test_what_cannot_run_is_refused_naming_the_key(change: dict[str, Any], field: str, says: str) -> None:
    data = scenario()
    for section, values in change.items():
        data[section] = {**copy.deepcopy(data[section]), **values}
    with pytest.raises(ScenarioError, match=says) as err:
        build(parse_scenario(data))
    assert err.value.field == field


def test_mxfp8_runs_on_blackwell() -> None:
    assert DEVICES["b200"].mx_formats and not DEVICES["h100-sxm"].mx_formats
    data = scenario(fp8="mxfp8")
    data["hardware"] = {"device": "b200", "efficiency": 0.5}
    costs = build(parse_scenario(data)).workload.costs.stages[0]
    assert costs.forward_ms > 0


def test_ppexec_refuses_fp8_naming_the_key() -> None:
    pytest.importorskip("torch")
    from ppexec.launch.prepare import check_buildable

    with pytest.raises(PpsimError, match="Transformer Engine's FP8") as err:
        check_buildable(parse_scenario(scenario(fp8="delayed")))
    assert err.value.field == "training.fp8"
    blackwell = scenario(fp4="nvfp4")
    blackwell["hardware"] = {"device": "b200"}
    with pytest.raises(PpsimError, match="Transformer Engine's FP4") as err:
        check_buildable(parse_scenario(blackwell))
    assert err.value.field == "training.fp4"


def test_nvfp4_runs_the_linear_layers_at_the_fp4_peak_with_half_byte_values() -> None:
    """On the B200 (2,250 bf16, 9,000 fp4 TFLOP/s, 8,000 GB/s), flat efficiency 0.5: against BF16 a
    block's forward saves its linear GEMMs' time at bf16 less at fp4, less the casts: per value read
    2 bytes for the per-tensor amax and 2 for the cast, write two half-byte copies and their 1-byte
    scale per 16 (2 + 2 + 2 x 0.5625 bytes), the cast taking 1.4x a copy of them."""
    def stage(**training: Any):
        data = scenario(**training)
        data["hardware"] = {"device": "b200", "efficiency": 0.5, "launch_us": 0}
        return build(parse_scenario(data)).workload.costs.stages[0]

    bf16, fp4 = stage(), stage(fp4="nvfp4")
    linear = 2 * TOKENS * (4 * H * H + 2 * H * F)
    casts = 1.4 * (2 + 2 + 2 * 0.5625) * TOKENS * (3 * H + F)
    saving = 4 * (linear / (2250e12 / 1e3 * 0.5) - linear / (9000e12 / 1e3 * 0.5) - casts / (8000e9 / 1e3))
    assert bf16.forward_ms - fp4.forward_ms == pytest.approx(saving, rel=1e-9)
    s, b = 1024, 2
    saved = block_activation_bytes(s, b, H, 16, 2, "none", ffn_hidden=F, dropout=False, flash_attention=True) - \
        block_activation_bytes(s, b, H, 16, 2, "none", ffn_hidden=F, dropout=False, flash_attention=True,
                               linear_input_bytes=0.5625)
    assert saved == pytest.approx((2 - 0.5625) * (3 * s * b * H + s * b * F), abs=1)


def test_the_casts_slowdowns_are_the_te_guide_s_autocast_casts_against_a_copy() -> None:
    """Transformer Engine's GEMM guide on a B300: each autocast call quantizes its input and its
    weight into both layouts (2,483 M values a layer); what its casts added to the kernels' time
    (MXFP8 8.984 - 7.161 ms, NVFP4 6.453 - 3.764, current scaling 9.147 - 6.812) over their bytes at
    the B300's measured copy (6,625 GB/s) gives how much longer than a copy each cast takes."""
    from pathlib import Path

    import yaml

    from ppsim.costs.low_precision import CAST_SLOWDOWN

    guide = yaml.safe_load((Path(__file__).resolve().parents[2] / "bench" / "data" / "te_gemm_guide.yaml").read_text())
    autocast, alone = guide["b300"]["autocast"], guide["b300"]["prequantized"]
    calls = [(15872, k, n) for k, n in ((4096, 12288), (4096, 4096), (4096, 16384), (16384, 4096))]
    calls += [(m, n, k) for m, k, n in calls[:4]] + [(k, m, n) for m, k, n in calls[:4]]
    values = sum(m * k + k * n for m, k, n in calls)
    assert values == pytest.approx(2483.03e6, rel=1e-5)
    copy = DEVICES["b300"].hbm_copy
    assert copy is not None
    for name, recipe in (("mxfp8", "mxfp8"), ("nvfp4", "nvfp4"), ("fp8_current", "tensorwise")):
        bytes_per_value = LowPrecision(recipe).cast_traffic([(1, 0)], 1, 2).forward / CAST_SLOWDOWN.get(recipe, 1.0)
        seconds = (autocast[name] - alone[name]) / 1e3
        slowdown = values * bytes_per_value / seconds / (copy.gb_s * 1e9)
        assert round(1 / slowdown, 2) == CAST_SLOWDOWN.get(recipe, 1.04 if recipe == "tensorwise" else 1.0), name


def test_blockwise_gemms_on_hopper_are_the_te_guide_s_layer_less_its_casts() -> None:
    """Transformer Engine's GEMM guide on an H200 NVL: per-tensor scaling's kernels take 16.785 ms
    a layer and its casts 20.285 - 16.785 = 3.500 ms for 6 bytes a value (read, amax read, two
    narrow writes). Blockwise's casts move 2 + 2 (1 + 4/128) bytes a value at that pace, so its
    22.882 ms autocast layer holds 20.51 ms of GEMMs: 0.82 of per-tensor scaling's speed. Delayed
    scaling's layer less its 4 bytes a value (18.978 - 2.333) lands within 1 % of per-tensor
    scaling's kernels, the same GEMM: the pricing of the casts holds."""
    from pathlib import Path

    import yaml

    from ppsim.costs.low_precision import GEMM_SPEED

    guide = yaml.safe_load((Path(__file__).resolve().parents[2] / "bench" / "data" / "te_gemm_guide.yaml").read_text())
    autocast, alone = guide["h200_nvl"]["autocast"], guide["h200_nvl"]["prequantized"]
    per_byte = (autocast["fp8_current"] - alone["fp8_current"]) / 6  # ms a byte a value, over the layer's values

    def casts(recipe: str) -> float:
        return per_byte * LowPrecision(recipe).cast_traffic([(1, 0)], 1, 2).forward  # type: ignore[arg-type]

    assert casts("tensorwise") == pytest.approx(3.500)
    assert autocast["fp8_delayed"] - casts("delayed") == pytest.approx(alone["fp8_current"], rel=0.01)
    blockwise = autocast["fp8_block"] - casts("blockwise")
    assert blockwise == pytest.approx(20.51, abs=0.01)
    assert round(alone["fp8_current"] / blockwise, 2) == GEMM_SPEED["blockwise"] == 0.82


def test_mxfp8_gemms_are_the_te_guide_s_kernels_against_per_tensor_scaling_s() -> None:
    """The same guide on a B300, operands quantized beforehand: per-tensor scaling's GEMMs 6.812 ms
    a layer, MXFP8's 7.161 (its block scales read inside the kernel): 0.95 of the speed."""
    from pathlib import Path

    import yaml

    from ppsim.costs.low_precision import GEMM_SPEED

    alone = yaml.safe_load((Path(__file__).resolve().parents[2] / "bench" / "data" / "te_gemm_guide.yaml")
                           .read_text())["b300"]["prequantized"]
    assert round(alone["fp8_current"] / alone["mxfp8"], 2) == GEMM_SPEED["mxfp8"] == 0.95


def test_blockwise_gemms_run_slower_on_hopper_and_as_mxfp8_on_blackwell() -> None:
    """A linear GEMM under blockwise scaling on the H100 takes 1 / 0.82 of its per-tensor-scaled
    time; on a B200 (MX formats) 1 / 0.95, MXFP8's; 16-bit GEMMs and per-tensor and delayed
    scaling are untouched."""
    from ppsim.costs.analytic import matmul_ms
    from ppsim.costs.gemms import Gemm

    linear, scores = Gemm(4096, 4096, 4096, linear=True), Gemm(4096, 128, 4096, count=32, head_dim=128)
    h100, b200 = DEVICES["h100-sxm"], DEVICES["b200"]
    for device, speed in ((h100, 0.82), (b200, 0.95)):
        blockwise = LowPrecision("blockwise").gemm_speed(device.mx_formats)
        assert blockwise == speed
        tensorwise = matmul_ms((linear,), device, "bf16", efficiency=0.5, narrow="fp8")
        assert matmul_ms((linear,), device, "bf16", efficiency=0.5, narrow="fp8", narrow_speed=blockwise) \
            == pytest.approx(tensorwise / speed)
        assert matmul_ms((scores,), device, "bf16", efficiency=0.5, narrow="fp8", narrow_speed=blockwise) \
            == matmul_ms((scores,), device, "bf16", efficiency=0.5)
    assert all(LowPrecision(r).gemm_speed(mx) == 1.0 for r in ("tensorwise", "delayed") for mx in (False, True))
    assert LowPrecision("mxfp8").gemm_speed(True) == 0.95


def test_a_blockwise_stage_s_linear_layers_take_1_over_0_82_of_delayed_s() -> None:
    """The same H100 stage under delayed and blockwise scaling: the casts differ by the block
    scales (4 bytes per 128 values, written twice), the linear GEMMs by 1 / 0.82."""
    delayed = build(parse_scenario(scenario(fp8="delayed"))).workload.costs.stages[0]
    blockwise = build(parse_scenario(scenario(fp8="blockwise"))).workload.costs.stages[0]
    linear = 2 * TOKENS * (4 * H * H + 2 * H * F) / (1979e12 / 1e3 * 0.5)
    casts = 2 * 4 / 128 * TOKENS * (3 * H + F) / (3350e9 / 1e3)
    blocks = 4
    assert blockwise.forward_ms - delayed.forward_ms == pytest.approx(blocks * (linear * (1 / 0.82 - 1) + casts),
                                                                      rel=1e-9)


def test_the_costs_line_says_where_a_recipe_s_gemms_run_slower() -> None:
    from ppsim.costs.workload import datasheet_source

    hopper = datasheet_source(parse_scenario(scenario(fp8="blockwise")), DEVICES["h100-sxm"])
    assert "blockwise scaling, its GEMMs at 0.82 of per-tensor scaling's speed)" in hopper
    b200 = parse_scenario({**scenario(fp8="mxfp8"), "hardware": {"device": "b200"}})
    assert "mxfp8 scaling, its GEMMs at 0.95 of per-tensor scaling's speed)" in datasheet_source(b200, DEVICES["b200"])
    assert "per-tensor" not in datasheet_source(parse_scenario(scenario(fp8="delayed")), DEVICES["h100-sxm"])
