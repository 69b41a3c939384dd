"""Which fused attention kernel a scenario runs (training.attention_kernel): FlashAttention-2's
catalogue points come from its published figures by one rule; the kernel is priced at its measured
figures under the curves, and the flat efficiency is scaled by its speed over cuDNN's at the same
shape; what cannot be priced is said, and nonsense refused naming the key."""

from __future__ import annotations

import csv
import typing
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import device_entry
from ppsim.costs.analytic import matmul_ms
from ppsim.costs.gemms import block_gemms
from ppsim.costs.measured import attention_kernel_notes
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import ATTENTION_KERNELS, get_device, read_devices
from ppsim.inputs.scenario import TrainingSpec, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize

RAW = Path(__file__).resolve().parents[2] / "bench" / "data" / "published_flash_attention2.csv"
H100_BF16_PEAK = 989.0  #: TFLOP/s at the 1,830 MHz the figures were measured at


def derived_flash2_points() -> list[tuple[float, float, float, float]]:
    """[head dim, keys, forward, backward] from the raw figures: the forward as published; the
    backward from the forward and forward + backward (FLOPs 1 and 3.5 times the forward's: the
    backward 2.5), 2.5 / (3.5 / (fwd+bwd) - 1 / fwd); keys half the sequence."""
    by: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    for row in csv.DictReader(RAW.open()):
        assert row["gpu"] == "h100" and row["causal"] == "true"
        by[(int(row["head_dim"]), int(row["seq_len"]))][row["pass"]] = float(row["tflops"])
    points = []
    for (dim, seq), passes in sorted(by.items()):
        fwd, both = passes["forward"], passes["forward+backward"]
        bwd = 2.5 / (3.5 / both - 1 / fwd)
        points.append((dim, seq / 2, round(fwd / H100_BF16_PEAK, 3), round(bwd / H100_BF16_PEAK, 3)))
    return points


def test_the_catalogue_s_flash2_points_are_the_published_figures() -> None:
    derived = derived_flash2_points()
    assert len(derived) == 12  # head dims 64 and 128, 512 to 16K tokens
    for name in ("h100-sxm", "h800", "h200"):  # the same compute
        fused = get_device(name).fused_attention("flash2")
        assert fused is not None and sorted(fused.points) == sorted(derived), name
        assert "FlashAttention-3" in fused.source and fused.dtypes == ("bf16", "fp16")
    assert get_device("b200").fused_attention("flash2") is None and get_device("a100-80g").fused_attention() is None


def test_the_kernels_a_scenario_may_name_are_the_catalogue_s() -> None:
    hint = typing.get_type_hints(TrainingSpec)["attention_kernel"]
    assert typing.get_args(hint) == ATTENTION_KERNELS


def test_flash2_s_speed_over_cudnn_s_is_the_ratio_of_their_figures_at_one_shape() -> None:
    """Head dim 128, 4K tokens (2,048 keys): FlashAttention-2 0.323 forward, 0.288 backward; cuDNN
    (H200, 2026) 0.598 and 0.479 at the same keys."""
    h100 = get_device("h100-sxm")
    assert h100.kernel_speed("flash2", "bf16", backward=False, head_dim=128, keys=2048) == pytest.approx(0.323 / 0.598)
    assert h100.kernel_speed("flash2", "bf16", backward=True, head_dim=128, keys=2048) == pytest.approx(0.288 / 0.479)
    assert h100.kernel_speed("cudnn", "bf16", backward=False, head_dim=128, keys=2048) == 1.0
    # not measured in fp16 on both sides (cuDNN's figures are bf16's), nor on a B200: no scaling
    assert h100.kernel_speed("flash2", "fp16", backward=False, head_dim=128, keys=2048) == 1.0
    assert get_device("b200").kernel_speed("flash2", "bf16", backward=False, head_dim=128, keys=2048) == 1.0
    # the curves' pricing reads the kernel's own figure; a kernel the device lacks, cuDNN's
    assert h100.flash_attention_efficiency("bf16", backward=True, head_dim=128, keys=2048,
                                           kernel="flash2") == pytest.approx(0.288)
    b200 = get_device("b200")
    assert b200.flash_attention_efficiency("bf16", backward=False, head_dim=128, keys=2048, kernel="flash2") \
        == b200.flash_attention_efficiency("bf16", backward=False, head_dim=128, keys=2048)


def test_a_block_s_attention_takes_the_kernel_s_speed_and_its_linear_layers_do_not() -> None:
    """One Llama-2-7B-like block at 4,096 tokens on an H100: the fused core's FLOPs (causal half)
    at 0.55 x 0.323 / 0.598 forward under the flat efficiency, at 0.323 under the curves; the
    linear layers' time the same under either kernel."""
    h100 = get_device("h100-sxm")
    gemms = block_gemms(4096, 1, 4096, 32, 32, 11008, flash_attention=True)
    core = tuple(g for g in gemms.forward if g.head_dim)
    linear = tuple(g for g in gemms.forward if not g.head_dim)
    assert {g.head_dim for g in core} == {128} and all(g.keys == pytest.approx(2048, rel=1e-3) for g in core)
    flops = sum(g.flops for g in core)
    assert flops == pytest.approx(2 * 2 * 4096 * 4096 * 4096 / 2, rel=1e-3)
    keys = core[0].keys
    fa2 = h100.fused_attention("flash2")
    cudnn = h100.fused_attention()
    assert fa2 is not None and cudnn is not None
    ratio = fa2.fraction(128, keys, backward=False) / cudnn.fraction(128, keys, backward=False)
    flat = matmul_ms(core, h100, "bf16", flash_attention=True, efficiency=0.55, kernel="flash2")
    assert flat == pytest.approx(flops / (989e9 * 0.55 * ratio))
    assert matmul_ms(core, h100, "bf16", flash_attention=True, efficiency=0.55) == pytest.approx(flops / (989e9 * 0.55))
    curves = matmul_ms(core, h100, "bf16", flash_attention=True, kernel="flash2")
    assert curves == pytest.approx(flops / (989e9 * fa2.fraction(128, keys, backward=False)))
    for kernel in ATTENTION_KERNELS:
        assert matmul_ms(linear, h100, "bf16", flash_attention=True, efficiency=0.55, kernel=kernel) \
            == pytest.approx(sum(g.flops for g in linear) / (989e9 * 0.55))


SCENARIO = {
    "model": {"layers": 4, "hidden": 4096, "heads": 32, "ffn_hidden": 11008, "seq_len": 16384, "vocab": 32000,
              "mlp": "swiglu", "positions": "rope", "dropout": False},
    "pipeline": {"stages": 2, "microbatches": 4},
    "training": {"flash_attention": True},
    "hardware": {"device": "h100-sxm"},
}


def scenario(**training: object) -> dict[str, object]:
    return {**SCENARIO, "training": {**SCENARIO["training"], **training}}


def step_ms(data: dict[str, object]) -> float:
    return summarize(predict(parse_scenario(data)).trace, waits=False).step_time_ms


def test_flash2_slows_a_long_sequence_step_by_its_attention_alone() -> None:
    """At 16K tokens the attention is a third of a block's work: FlashAttention-2 (about half
    cuDNN's speed there) makes the step slower by more than a tenth, and its costs line says how
    the attention was priced; a device without its figures prices it as cuDNN's, and a note says so."""
    cudnn, flash2 = step_ms(scenario()), step_ms(scenario(attention_kernel="flash2"))
    assert flash2 > 1.1 * cudnn
    pred = predict(parse_scenario(scenario(attention_kernel="flash2")))
    assert pred.trace.meta["costs_source"].endswith("the attention by flash2 at its measured speed over cudnn's")
    b200 = {**scenario(attention_kernel="flash2"), "hardware": {"device": "b200"}}
    assert step_ms(b200) == pytest.approx(step_ms({**scenario(), "hardware": {"device": "b200"}}))
    notes = attention_kernel_notes(parse_scenario(b200), get_device("b200"))
    assert len(notes) == 1 and "b200 has no measured figures to price flash2" in notes[0]
    assert "attention_kernels.flash2" in notes[0]
    assert attention_kernel_notes(parse_scenario(scenario(attention_kernel="flash2")), get_device("h100-sxm")) == []


def test_a_fused_kernel_without_flash_attention_is_refused_naming_the_key() -> None:
    data = {**SCENARIO, "training": {"attention_kernel": "flash2"}}
    with pytest.raises(ScenarioError, match="set flash_attention: true") as err:
        parse_scenario(data)
    assert err.value.field == "training.attention_kernel"


@pytest.mark.parametrize("entry, message", [
    ("attention_kernels: {flash3: {source: x, forward: 0.5, backward: 0.4}}", "has 'flash3'; the kernels are flash2"),
    ("attention_kernels: {cudnn: {source: x, forward: 0.5, backward: 0.4}}", "flash_attention holds its figures"),
    ("attention_kernels: [flash2]", "is a mapping of kernel name"),
    ("attention_kernels: {flash2: {source: x, forward: 1.5, backward: 0.4}}", r"attention_kernels\.flash2\.forward is 1\.5"),
    ("attention_kernels: {flash2: {forward: 0.5, backward: 0.4}}", r"attention_kernels\.flash2 needs a source"),
    ("attention_kernels: {flash2: }", r"attention_kernels\.flash2 is empty; give its figures"),
])
def test_a_device_file_s_other_kernels_are_checked_naming_the_key(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(device_entry(f"  {entry}"))
    with pytest.raises(ScenarioError, match=message):
        read_devices(path)
    path.write_text(device_entry("  attention_kernels: {flash2: {source: x, forward: 0.3, backward: 0.25}}"))
    mine = read_devices(path)["mine"]
    assert mine.measured and mine.fused_attention("flash2") is not None


def test_a_kernel_faster_than_cudnn_by_its_figures_never_runs_above_the_peak(tmp_path: Path) -> None:
    """A user's device whose cuDNN figures are a tenth of peak and flash2's nine tenths: at the flat
    efficiency 0.55 the ratio would put flash2 at 4.95 of peak; it runs at the peak."""
    path = tmp_path / "dev.yaml"
    path.write_text(device_entry("  flash_attention: {source: x, forward: 0.1, backward: 0.1}\n"
                                 "  attention_kernels: {flash2: {source: y, forward: 0.9, backward: 0.9}}"))
    mine = read_devices(path)["mine"]
    core = tuple(g for g in block_gemms(4096, 1, 4096, 32, 32, 11008, flash_attention=True).forward if g.head_dim)
    flops = sum(g.flops for g in core)
    assert matmul_ms(core, mine, "bf16", flash_attention=True, efficiency=0.55, kernel="flash2") \
        == pytest.approx(flops / 989e9)


def test_a_dtype_the_figures_were_not_measured_in_is_priced_as_cudnn_s_and_said() -> None:
    """fp16 on an H100: cuDNN's figures are bf16's, so the flat pricing has no ratio to scale by; the
    step is cuDNN's, the costs line claims nothing, and the note names what is missing and that the
    curves price flash2 by its own fp16 figures (which they do: the step is then slower)."""
    fp16 = {**scenario(attention_kernel="flash2"), "model": {**SCENARIO["model"], "dtype": "fp16"}}  # type: ignore[dict-item]
    fp16_cudnn = {**fp16, "training": {"flash_attention": True}}
    assert step_ms(fp16) == pytest.approx(step_ms(fp16_cudnn))
    pred = predict(parse_scenario(fp16))
    assert "flash2" not in pred.trace.meta["costs_source"]
    notes = attention_kernel_notes(parse_scenario(fp16), get_device("h100-sxm"))
    assert len(notes) == 1 and "give flash_attention in fp16" in notes[0] and "hardware.gemm_curves: true" in notes[0]
    curves = {**fp16, "hardware": {"device": "h100-sxm", "gemm_curves": True}}
    curves_cudnn = {**fp16_cudnn, "hardware": {"device": "h100-sxm", "gemm_curves": True}}
    assert step_ms(curves) > step_ms(curves_cudnn)
    assert attention_kernel_notes(parse_scenario(curves), get_device("h100-sxm")) == []
