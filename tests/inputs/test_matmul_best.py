"""Each device's flat efficiency from its best measured matmul (``matmul_best``): one share of it,
the H100's, for every device and dtype that has one; the device's own ``efficiency`` elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppsim.costs.analytic import matmul_ms
from ppsim.costs.gemms import Gemm
from ppsim.costs.workload import datasheet_source
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import DEVICES, STEP_SHARE, read_devices
from ppsim.inputs.scenario import parse_scenario

#: Stas Bekman's MAMF table (stas00/ml-engineering @ 744d01e, compute/accelerator/README.md), TFLOP/s
H100_BF16, H100_FP8 = 794.5, 1402.6
A100_BF16 = 271.2  # the A100 SXM row: not in the catalogue, the rule's check below


def test_the_share_is_the_h100s_flat_efficiency_over_its_best_matmul() -> None:
    assert STEP_SHARE == pytest.approx(0.55 / (794.5 / 989)) and STEP_SHARE == pytest.approx(0.6847, abs=1e-4)
    h100 = DEVICES["h100-sxm"]
    assert h100.flat_efficiency("bf16") == pytest.approx(0.55) and h100.efficiency == pytest.approx(0.55)
    assert h100.flat_efficiency("fp8") == pytest.approx(STEP_SHARE * H100_FP8 / 1979)  # 0.4852
    assert h100.flat_efficiency("fp8") == pytest.approx(0.4852, abs=1e-4)
    assert h100.flat_efficiency("fp16") == h100.flat_efficiency("fp32") == h100.efficiency  # bf16's, unmeasured


def test_the_a100s_own_figure_is_the_same_share_of_its_best_matmul() -> None:
    """The A100's 0.6 predates the rule and was checked against its own published runs
    (bench/published.py); the rule, from the H100 alone, gives 0.595 for it: within 1 %."""
    a100 = DEVICES["a100-80g"]
    assert a100.matmul_best is None and a100.efficiency == 0.6
    assert STEP_SHARE * A100_BF16 / 312 == pytest.approx(0.6, rel=0.01)


@pytest.mark.parametrize("name, bf16, fp8, bf16_peak, fp8_peak", [
    ("h200", 794.5, 1453.4, 989, 1979),
    ("h800", 794.5, 1402.6, 989, 1979),  # the H100's: the same compute
    ("b200", 1745.0, 3432.5, 2250, 4500),
    ("b300", 1769.0, 3353.3, 2250, 4500),
    ("gb200", 1822.0, 3615.6, 2500, 5000),
])
def test_each_dtype_takes_the_share_of_its_own_best(name: str, bf16: float, fp8: float, bf16_peak: float,
                                                   fp8_peak: float) -> None:
    device = DEVICES[name]
    assert device.flat_efficiency("bf16") == pytest.approx(STEP_SHARE * bf16 / bf16_peak)
    assert device.flat_efficiency("fp8") == pytest.approx(STEP_SHARE * fp8 / fp8_peak)
    assert device.efficiency == device.flat_efficiency("bf16")
    if "fp4" in device.peak_tflops:  # no FP4 measurement: the 16-bit figure
        assert device.flat_efficiency("fp4") == device.efficiency


def test_gb200_reaches_less_of_its_peak_than_the_b200_and_the_gb300_keeps_hoppers_figure() -> None:
    """GB200: 1,822 of 2,500 bf16 (0.499 flat) against the B200's 1,745 of 2,250 (0.531); the GB300
    has no measurement and keeps the 0.55 the catalogue's devices had."""
    assert DEVICES["gb200"].flat_efficiency("bf16") == pytest.approx(0.4990, abs=1e-4)
    assert DEVICES["b200"].flat_efficiency("bf16") == pytest.approx(0.5310, abs=1e-4)
    gb300 = DEVICES["gb300"]
    assert gb300.matmul_best is None and all(gb300.flat_efficiency(d) == 0.55 for d in gb300.peak_tflops)


def test_a_narrow_gemm_is_priced_at_its_dtypes_figure_and_an_override_prices_every_dtype() -> None:
    gb200 = DEVICES["gb200"]
    linear = Gemm(8192, 8192, 8192, linear=True)
    flops = 2 * 8192**3
    flat = matmul_ms((linear,), gb200, "bf16", efficiency=gb200.flat_efficiency, narrow="fp8")
    assert flat == pytest.approx(flops / (5000e9 * STEP_SHARE * 3615.6 / 5000))  # = flops / (STEP_SHARE x 3,615.6)
    wide = matmul_ms((linear,), gb200, "bf16", efficiency=gb200.flat_efficiency)
    assert wide == pytest.approx(flops / (STEP_SHARE * 1822e9))
    assert matmul_ms((linear,), gb200, "bf16", efficiency=0.5, narrow="fp8") == pytest.approx(flops / (5000e9 * 0.5))


def _scenario(device: str, **training: object) -> dict[str, object]:
    return {"model": {"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 1024, "vocab": 32000},
            "pipeline": {"stages": 2}, "training": {"global_batch": 8, "micro_batch": 1, **training},
            "hardware": {"device": device}}


def test_the_costs_line_says_each_dtypes_figure_and_where_it_comes_from() -> None:
    fp8 = parse_scenario(_scenario("h800", fp8="tensorwise"))
    line = datasheet_source(fp8, DEVICES["h800"])
    assert "at 55 % efficiency, 48.5 % for fp8 (the device's: 68 % of its best measured matmul)" in line
    assert "at 60 % efficiency (the device's)" in datasheet_source(parse_scenario(_scenario("a100-80g")),
                                                                  DEVICES["a100-80g"])
    over = parse_scenario({**_scenario("h800", fp8="tensorwise"), "hardware": {"device": "h800", "efficiency": 0.4}})
    assert "at 40 % efficiency (hardware.efficiency)" in datasheet_source(over, DEVICES["h800"])


ENTRY = ("my-gpu:\n  peak_tflops: {bf16: 100, fp16: 100, fp32: 10, fp8: 200}\n  memory_gb: 16\n  hbm_gb_s: 1000\n"
         "  intra_node: {bandwidth_gb_s: 100, latency_us: 2}\n  inter_node: {bandwidth_gb_s: 10, latency_us: 5}\n")


def test_a_device_file_may_give_its_best_matmul_instead_of_an_efficiency(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(ENTRY + "  matmul_best: {bf16: 80, fp8: 150, source: my sweep}\n")
    device = read_devices(path)["my-gpu"]
    assert device.flat_efficiency("bf16") == pytest.approx(STEP_SHARE * 0.8)
    assert device.flat_efficiency("fp8") == pytest.approx(STEP_SHARE * 0.75)
    assert device.matmul_best is not None and device.matmul_best.source == "my sweep"


@pytest.mark.parametrize("extra, says", [
    ("", "give efficiency .* or matmul_best"),
    ("  efficiency: 0.5\n  matmul_best: {bf16: 80, source: s}\n", "not both"),
    ("  matmul_best: {fp8: 150, source: s}\n", "bf16 among them"),
    ("  matmul_best: {bf16: 80}\n", "matmul_best needs a source"),
    ("  matmul_best: {bf16: 120, source: s}\n", r"matmul_best.bf16 is 120; .* at most the bf16 peak \(100\)"),
    ("  matmul_best: {bf16: 0, source: s}\n", "matmul_best.bf16 is 0"),
    ("  matmul_best: {bf16: 80, fp4: 300, source: s}\n", "matmul_best.fp4: the device has no fp4 peak"),
    ("  matmul_best: [80]\n", "matmul_best maps dtypes"),
])
def test_a_bad_best_matmul_is_refused_naming_the_key(tmp_path: Path, extra: str, says: str) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(ENTRY + extra)
    with pytest.raises(ScenarioError, match=says) as err:
        read_devices(path)
    assert err.value.field == "hardware.device_file"
