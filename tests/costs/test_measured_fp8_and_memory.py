"""The catalogue's published FP8 GEMM curves and measured memory bandwidths, and how the curves'
pricing (``hardware.gemm_curves``) uses them."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import device_entry, gpt, refused_device_file
from ppsim.costs import build_workload
from ppsim.costs.analytic import matmul_ms
from ppsim.costs.gemms import Gemm
from ppsim.costs.layers import gpt_layers
from ppsim.inputs.hardware import DEVICES, read_devices
from ppsim.inputs.scenario import Scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "bench" / "data" / "published_gemm.csv"


def _published() -> dict[tuple[str, str], list[dict[str, str]]]:
    by_device: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    with FIGURES.open() as f:
        for row in csv.DictReader(f):
            by_device[(row["device"], row["format"])].append(row)
    return by_device


def test_each_narrow_curve_is_its_published_figures_over_the_peak() -> None:
    published = _published()
    assert set(published) == {("h100-sxm", "fp8"), ("h200", "fp8"), ("gb200", "fp8"), ("gb200", "fp4")}
    for (name, kind), rows in published.items():
        device = DEVICES[name]
        curve = device.gemm_fp8 if kind == "fp8" else device.gemm_fp4
        assert curve is not None and curve.dtypes == (kind,)
        assert "Azure/AI-benchmarking-guide" in curve.source
        assert {float(r["peak_tflops"]) for r in rows} == {device.peak_tflops[kind]}
        kept = sorted((2 * int(r["m"]) * int(r["n"]) * int(r["k"]), float(r["tflops"]) / device.peak_tflops[kind])
                      for r in rows if r["in_curve"] == "yes")
        assert [f"{size:.3e}" for size, _ in kept] == [f"{size:.3e}" for size, _ in curve.points]
        assert [round(f, 4) for _, f in kept] == [f for _, f in curve.points]
        # the one tall GEMM left out (a shape no linear layer has) ran far below its FLOPs' neighbours
        tall = [r for r in rows if r["in_curve"] == "no"]
        assert len(tall) == 1 and (tall[0]["m"], tall[0]["n"]) == ("802816", "192")
    assert DEVICES["h800"].gemm_fp8 == DEVICES["h100-sxm"].gemm_fp8  # the same compute
    for name in ("b200", "b300", "gb300"):  # the GB200's fractions, said so in the catalogue
        assert DEVICES[name].gemm_fp8 == DEVICES["gb200"].gemm_fp8
    assert DEVICES["b200"].gemm_fp4 == DEVICES["gb200"].gemm_fp4
    for name in ("b300", "gb300"):  # Blackwell Ultra's FP4 units: another rate, their own figure (below)
        assert DEVICES[name].gemm_fp4 != DEVICES["gb200"].gemm_fp4
    for name in ("a100-40g", "a100-80g", "cpu"):  # no FP8 Tensor Cores
        assert DEVICES[name].gemm_fp8 is None and DEVICES[name].gemm_fp4 is None


def test_an_fp8_gemm_takes_the_fp8_curve_and_a_16_bit_one_the_16_bit_curve() -> None:
    h100 = DEVICES["h100-sxm"]
    # 4096^3 is a published point: 1,216.9 of 1,979 TFLOP/s
    assert h100.gemm_efficiency(4096, 4096, 4096, "fp8") == pytest.approx(1216.9 / 1979, abs=5e-5)
    assert h100.gemm_efficiency(4096, 4096, 4096, "bf16") == h100.gemm(2 * 4096**3)  # the H200's bf16 sweep
    assert h100.gemm_efficiency(4096, 4096, 4096, "fp4") == h100.efficiency  # no FP4 curve: the flat figure
    assert DEVICES["gb200"].gemm_efficiency(8192, 8192, 8192, "fp4") == pytest.approx(7609.1 / 10000, abs=2e-4)
    gb200 = DEVICES["gb200"]
    assert gb200.gemm_efficiency(8192, 8192, 8192, "fp8") == pytest.approx(2876.6 / 5000, abs=5e-5)
    assert gb200.gemm_efficiency(8192, 8192, 8192, "bf16") == gb200.efficiency  # no bf16 curve on Blackwell


def test_an_fp8_linear_layer_is_priced_at_the_fp8_peak_on_the_fp8_curve() -> None:
    h100 = DEVICES["h100-sxm"]
    linear = Gemm(4096, 4096, 4096, linear=True)
    eff = h100.gemm_fp8(2 * 4096**3)
    assert matmul_ms((linear,), h100, "bf16", narrow="fp8") == pytest.approx(2 * 4096**3 / (1979e12 * eff) * 1e3)
    assert matmul_ms((linear,), h100, "bf16", narrow="fp8") == pytest.approx(0.11294, abs=1e-5)
    # the attention's matmuls stay in 16 bits under FP8 training
    scores = Gemm(2048, 128, 2048, count=4, head_dim=128)
    assert matmul_ms((scores,), h100, "bf16", narrow="fp8") == matmul_ms((scores,), h100, "bf16")


def _on(device: str, **hardware: object) -> Scenario:
    data = gpt().model_dump(exclude_none=True)
    data["hardware"] = {"device": device, **hardware}
    return parse_scenario(data)


def test_blackwell_ultra_s_bf16_and_fp4_gemms_are_the_te_guide_s_layer_over_the_peak() -> None:
    """Transformer Engine's GEMM guide times one layer's 12 GEMMs of a 5B model (h 4096, MLP 16384,
    15,872 tokens) on a B300: 3 passes x 2 x 15872 x (4096 x 12288 + 4096^2 + 2 x 4096 x 16384) =
    1.917e13 FLOPs, in 13.102 ms in bf16 (0.650 of 2,250 TFLOP/s) and 3.764 ms in NVFP4 on operands
    quantized beforehand (0.364 of 14,000); the GB300 takes the same fractions of its peaks."""
    import yaml

    guide = yaml.safe_load((ROOT / "bench" / "data" / "te_gemm_guide.yaml").read_text())
    flops = 3 * 2 * 15872 * (4096 * 12288 + 4096 * 4096 + 2 * 4096 * 16384)
    assert guide["layer_flops"] == pytest.approx(flops, rel=1e-4)
    kernel = guide["b300"]["prequantized"]
    b300 = DEVICES["b300"]
    for kind, curve in (("bf16", b300.gemm), ("nvfp4", b300.gemm_fp4)):
        peak = b300.peak_tflops["fp4" if kind == "nvfp4" else kind] * 1e12
        assert curve is not None and "GEMM profiling guide" in curve.source
        assert [f for _, f in curve.points] == [round(flops / (kernel[kind] * 1e-3) / peak, 3)] * 2
    assert DEVICES["gb300"].gemm == b300.gemm and DEVICES["gb300"].gemm_fp4 == b300.gemm_fp4
    # the layer's FP4 kernels ran 3.48x its bf16 ones, where the peaks differ 6.2x
    assert kernel["bf16"] / kernel["nvfp4"] == pytest.approx(3.48, abs=0.01)


def test_memory_bound_work_runs_at_the_measured_copy_under_the_curves_only() -> None:
    h100 = DEVICES["h100-sxm"]
    assert h100.hbm_copy is not None and h100.hbm_copy.gb_s == 2900 and h100.hbm_gb_s == 3350
    flat, curved = (build_workload(_on("h100-sxm", gemm_curves=c)) for c in (False, True))
    s = _on("h100-sxm", gemm_curves=True)
    _, block, _ = gpt_layers(s.model, 1)
    blocks = curved.partition[1]
    mid_flat, mid_curved = flat.costs.stages[1], curved.costs.stages[1]  # middle stages: blocks only
    assert mid_curved.forward_ms == pytest.approx(
        blocks * (matmul_ms(block.gemms.forward, h100, "bf16") + block.forward_bytes / 2900e6))
    assert mid_flat.forward_ms == pytest.approx(blocks * (block.forward_flops / (989e9 * 0.55)
                                                          + block.forward_bytes / 3350e6))
    # the optimizer step is memory-bound too: 3,350 / 2,900 times longer under the curves
    assert mid_curved.optimizer_ms == pytest.approx(mid_flat.optimizer_ms * 3350 / 2900)
    # a device without a measured copy keeps its datasheet rate in both
    cpu = DEVICES["cpu"]
    assert cpu.hbm_copy is None and cpu.memory_gb_s(measured=True) == cpu.hbm_gb_s == 20


def test_the_measured_copies_have_their_sources() -> None:
    assert DEVICES["h200"].hbm_copy is not None and DEVICES["h200"].hbm_copy.gb_s == 4273  # `ppexec device`, here
    assert "ppexec device" in DEVICES["h200"].hbm_copy.source
    assert DEVICES["h800"].hbm_copy == DEVICES["h100-sxm"].hbm_copy  # the same HBM3
    a100 = DEVICES["a100-80g"].hbm_copy
    assert a100 is not None and a100.gb_s == 1610 and "ND A100 v4" in a100.source
    # nvbandwidth's device_local_copy counts the copy once: a tray's sum / 4 GPUs x 2 (read and write)
    for names, tray_sum in ((("b200", "gb200"), 13094.41), (("b300", "gb300"), 13249.68)):
        for name in names:
            found = DEVICES[name].hbm_copy
            assert found is not None and found.gb_s == round(tray_sum / 4 * 2) and "nvbandwidth" in found.source
    for name, d in DEVICES.items():
        if d.hbm_copy is not None:
            assert d.hbm_copy.gb_s < d.hbm_gb_s, name  # no copy beats its datasheet


@pytest.mark.parametrize(("extra", "message"), [
    ("  gemm_fp8: {source: x, dtypes: [bf16], points: [[1.0e+9, 0.5], [1.0e+12, 0.7]]}", "dtypes is"),
    ("  gemm_fp8: {points: [[1.0e+9, 0.5], [1.0e+12, 0.7]]}", "gemm_fp8 needs a source"),
    ("  hbm_copy: {gb_s: 2900}", "hbm_copy is a mapping of gb_s"),
    ("  hbm_copy: {gb_s: -1, source: x}", "hbm_copy.gb_s is -1"),
    ("  hbm_copy: {gb_s: 2900, source: ' '}", "hbm_copy needs a source"),
    ("  intra_node_measured: {gb_s: 370, source: x, algorithm: ring}", "intra_node_measured is a mapping of gb_s"),
])
def test_a_device_file_refuses_a_bad_fp8_curve_or_copy_naming_it(tmp_path: Path, extra: str, message: str) -> None:
    refused_device_file(tmp_path, extra, message)


def test_a_device_with_only_a_measured_copy_is_priced_by_it_under_the_curves(tmp_path: Path) -> None:
    dev = tmp_path / "gpu.yaml"
    dev.write_text(device_entry("  hbm_copy: {gb_s: 1675, source: my copy}"))
    mine = read_devices(dev)["mine"]
    assert mine.measured and mine.memory_gb_s(measured=True) == 1675
    flat = build_workload(_on("mine", device_file=str(dev))).costs.stages[1]
    curved = build_workload(_on("mine", device_file=str(dev), gemm_curves=True)).costs.stages[1]
    # the matmuls at the flat efficiency in both (no curve), the memory-bound work twice as long
    assert curved.optimizer_ms == pytest.approx(2 * flat.optimizer_ms)
    assert curved.forward_ms > flat.forward_ms


def test_the_links_inside_a_node_run_at_the_measured_nvlink_rate_under_both_pricings() -> None:
    """No collective reaches the datasheet's NVLink rate (450 GB/s on an H100): the collectives run
    at the measured 370 whether the matmuls take the flat efficiency or the curves; a device with
    no measurement (the B200) keeps its datasheet's."""
    from ppsim.costs.links import scenario_links
    from ppsim.costs.table import Link

    h100 = DEVICES["h100-sxm"]
    assert h100.intra_node_measured is not None and h100.intra_node_measured.gb_s == 370
    flat = scenario_links(_on("h100-sxm"), h100, (0, 1, 2, 3))
    curved = scenario_links(_on("h100-sxm", gemm_curves=True), h100, (0, 1, 2, 3))
    for name in ("tensor_parallel", "data_parallel", "context_parallel", "expert_parallel", "expert_tensor"):
        assert getattr(curved, name) == getattr(flat, name) == Link.from_gb_s(370, 3), name
    assert curved.boundaries == flat.boundaries  # the NIC between nodes: the datasheet's in both
    b200 = DEVICES["b200"]
    assert b200.intra_node_measured is None
    assert scenario_links(_on("b200"), b200, (0, 1, 2, 3)).tensor_parallel == Link.from_gb_s(900, 3)
    # a link the scenario gives is its own in both
    given = scenario_links(_on("h100-sxm", gemm_curves=True, tp_link={"bandwidth_gb_s": 100, "latency_us": 2}),
                           h100, (0, 1, 2, 3))
    assert given.tensor_parallel == Link.from_gb_s(100, 2) and given.data_parallel == Link.from_gb_s(370, 3)


def test_a_cluster_routes_over_the_measured_nvlink_rate_under_both_pricings() -> None:
    from ppsim.costs.links import scenario_links

    data = yaml_scenario("llama31-405b-gb200.yaml")
    gb200 = DEVICES["gb200"]
    assert gb200.intra_node_measured is not None
    rates = {}
    for curves in (False, True):
        data["hardware"] = {**data["hardware"], "gemm_curves": curves}
        s = parse_scenario(data)
        stages = s.pipeline.stages * s.pipeline.chunks
        fabric = scenario_links(s, gb200, tuple(k % s.pipeline.stages for k in range(stages))).fabric
        assert fabric is not None
        rates[curves] = max(fabric.capacity.values())  # the NVLink hops: the fastest of the cluster
    assert rates[True] == rates[False] == pytest.approx(679.6e6)


def yaml_scenario(name: str) -> dict[str, object]:
    import yaml

    data = yaml.safe_load((ROOT / "scenarios" / name).read_text())
    assert isinstance(data, dict)
    return data


def test_run_notes_where_the_flat_pricing_outruns_the_device_s_measured_narrow_kernels() -> None:
    """NVFP4 on a GB300 under the flat 0.55: its FP4 GEMMs at 8,250 TFLOP/s, where the measured
    kernels reach 0.364 of 15,000 (5,460): one note naming the key and the switch; none under the
    curves, none where the measurement is near the flat figure (the H100's FP8: 0.66 at 1e12 FLOPs),
    none without a narrow format."""
    from ppsim.cli.common import pricing_notes

    def notes(device: str, **training: object) -> list[str]:
        data = gpt().model_dump(exclude_none=True)
        data["hardware"] = {"device": device}
        data["training"] = {**data.get("training", {}), **training}
        return pricing_notes(parse_scenario(data))

    (note,) = notes("gb300", fp4="nvfp4")
    assert note.startswith("training.fp4: the flat 55% prices gb300's FP4 GEMMs at 8,250 TFLOP/s")
    assert "(5,460)" in note and "hardware.gemm_curves: true" in note and "GEMM profiling guide" in note
    assert notes("h100-sxm", fp8="tensorwise") == [] and notes("gb300") == []
    curved = gpt().model_dump(exclude_none=True)
    curved["hardware"] = {"device": "gb300", "gemm_curves": True}
    curved["training"] = {**curved.get("training", {}), "fp4": "nvfp4"}
    assert pricing_notes(parse_scenario(curved)) == []
