"""training.fp8_attention (Megatron's --fp8-dot-product-attention): the fused attention priced at
cuDNN's measured FP8 figures (MXFP8's under the mxfp8 recipe), the rules it needs, what the costs
line and the notes say, and the Megatron round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import device_entry, refused_device_file
from ppsim.costs import build_workload
from ppsim.costs.workload import datasheet_source
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import get_device
from ppsim.inputs.scenario import parse_scenario

#: h 1024 in 8 heads of 128, 4,096 tokens: each block's causal attention runs 2,048 keys a query
MODEL = {"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 4096, "vocab": 32768, "dropout": False}


def scenario(**training: Any) -> dict[str, Any]:
    return {"name": "fp8-attention", "model": dict(MODEL), "pipeline": {"stages": 1},
            "training": {"micro_batch": 1, "flash_attention": True, "fp8": "tensorwise", **training},
            "hardware": {"device": "gb200", "launch_us": 0}}


def test_the_recipe_picks_the_kernel() -> None:
    assert parse_scenario(scenario()).training.priced_attention_kernel == "cudnn"
    assert parse_scenario(scenario(fp8_attention=True)).training.priced_attention_kernel == "cudnn_fp8"
    for recipe in ("delayed", "blockwise"):
        assert parse_scenario(scenario(fp8=recipe, fp8_attention=True)).training.priced_attention_kernel == "cudnn_fp8"
    assert parse_scenario(scenario(fp8="mxfp8", fp8_attention=True)).training.priced_attention_kernel == "cudnn_mxfp8"


def test_a_block_s_attention_runs_at_the_fp8_kernel_s_speed_over_cudnn_s() -> None:
    """Flat, on a GB200: the attention core's forward FLOPs (4 s (s/2) h, FlashAttention's causal
    half) at 0.499 x (0.721 / 0.563), cuDNN's FP8 over its bf16 figure at head dim 128 and 2,048
    keys; everything else alike."""
    bf16 = build_workload(parse_scenario(scenario())).costs.stages[0]
    fp8 = build_workload(parse_scenario(scenario(fp8_attention=True))).costs.stages[0]
    flops = 4 * 4096 * 2048 * 1024
    rate = 2500e9 * get_device("gb200").flat_efficiency("bf16")
    saved = 4 * (flops / rate - flops / (rate * 0.721 / 0.563))
    assert bf16.forward_ms - fp8.forward_ms == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize(("training", "field", "says"), [
    ({"fp8": None, "fp8_attention": True}, "training.fp8_attention", "set training.fp8"),
    ({"fp8_attention": True, "attention_kernel": "flash2"}, "training.fp8_attention", "attention_kernel: cudnn"),
    ({"fp8_attention": True, "flash_attention": False}, "training.fp8_attention", "flash_attention: true"),
])
def test_what_cannot_run_is_refused_naming_the_key(training: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as refused:
        parse_scenario(scenario(**training))
    assert refused.value.field == field


def test_the_costs_line_says_the_attention_runs_in_fp8() -> None:
    s = parse_scenario(scenario(fp8="mxfp8", fp8_attention=True))
    assert ", the attention in FP8 by cudnn_mxfp8 at its measured speed over cudnn's" in \
        datasheet_source(s, get_device("gb200"))
    assert "FP8 by" not in datasheet_source(parse_scenario(scenario()), get_device("gb200"))


def test_a_device_without_fp8_figures_prices_cudnn_s_and_says_so(tmp_path: Path) -> None:
    from ppsim.costs.measured import attention_kernel_notes

    (tmp_path / "mine.yaml").write_text(device_entry(
        "  flash_attention: {source: mine, forward: 0.5, backward: 0.4}"))
    data = scenario(fp8_attention=True)
    data["hardware"] = {"device": "mine", "device_file": str(tmp_path / "mine.yaml")}
    s = parse_scenario(data)
    device = get_device("mine", s.hardware.device_file)
    notes = attention_kernel_notes(s, device)
    assert len(notes) == 1 and notes[0].startswith("training.fp8_attention: mine has no measured figures to price "
                                                   "cudnn_fp8 by, so its attention is priced as cudnn's")
    bf16 = parse_scenario({**data, "training": {**data["training"], "fp8_attention": False}})
    assert build_workload(s).costs.stages[0].forward_ms == build_workload(bf16).costs.stages[0].forward_ms


FP8_KERNEL = "  attention_kernels:\n    cudnn_fp8: "


@pytest.mark.parametrize(("extra", "message"), [
    (FP8_KERNEL + "{source: m, inputs: fp4, forward: 0.5, backward: 0.4}", "inputs is 'fp4'"),
    (FP8_KERNEL + "{source: m, forward: 0.5, backward: 0.4}", "inputs: fp8"),
    (FP8_KERNEL + "{source: m, inputs: fp8, forward: 2.5, backward: 0.4}", r"<= 2 \(or give points\)"),
    (FP8_KERNEL + "{source: m, inputs: fp8, forward: 0.5, backward: 0.4, window_backward: [[1024, 0.3]]}",
     "window_backward goes with points"),
    (FP8_KERNEL + "{source: m, inputs: fp8, points: [[64, 127, 0.07, 0.01]], window_backward: [[2048, 0.3], "
     "[1024, 0.2]]}", "<= 2] rows, the keys increasing"),
    ("  flash_attention: {source: m, forward: 1.5, backward: 0.4}", r"<= 1 \(or give points\)"),
    ("  flash_attention: {source: m, inputs: fp8, forward: 0.5, backward: 0.4}", "only cuDNN's FP8 kernels carry"),
    ("  attention_kernels:\n    flash2: {source: m, forward: 0.5, backward: 0.4, window_backward: [[1024, 0.3]]}",
     "only cuDNN's FP8 kernels carry"),
])
def test_bad_fp8_kernel_figures_are_refused_naming_the_key(tmp_path: Path, extra: str, message: str) -> None:
    refused_device_file(tmp_path, extra, message)


def test_megatron_s_flag_goes_out_and_back_and_torchtitan_refuses_it(tmp_path: Path) -> None:
    from ppsim.frameworks import CannotExport, export
    from ppsim.frameworks.importing import import_scenario
    from ppsim.frameworks.megatron_read import argument_tokens

    s = parse_scenario({**scenario(fp8="mxfp8", fp8_attention=True), "hardware": {"device": "gb200"}})
    text = export(s, "megatron", "fa", "c").files[".megatron.sh"]
    assert "--fp8-dot-product-attention" in argument_tokens(text)
    (tmp_path / "fa.megatron.sh").write_text(text)
    back, _, _ = import_scenario([tmp_path / "fa.megatron.sh"], {}, s.devices)
    assert back["training"]["fp8_attention"] is True and back["training"]["fp8"] == "mxfp8"
    with pytest.raises(CannotExport) as refused:
        export(s, "torchtitan", "fa", "c")
    assert any("training.fp8_attention" in r for r in refused.value.reasons)
