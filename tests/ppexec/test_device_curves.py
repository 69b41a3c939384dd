"""``ppexec device``: the shapes it times, how timings become a catalogue curve, the device file it
writes (read back by ppsim), and the catalogue's H200 curve re-derived from its committed timings."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from conftest import ROOT, invoke
from ppexec.measure.device_curves import (
    PASS_LAYOUTS,
    attention_shapes,
    harmonic_mean,
    layer_gemm_shapes,
    octave_curve,
    octave_medians,
    pool_adjacent_violators,
)
from ppsim.formats import DEVICE_FILE_MARKER
from ppsim.inputs.hardware import DEVICES, get_device, read_devices

H200_TIMINGS = ROOT / "bench" / "measured" / "h200-2026-12-04.csv"


def test_pooling_adjacent_violators_by_hand() -> None:
    assert pool_adjacent_violators([1, 3, 2, 4], [1, 1, 1, 1]) == [1, 2.5, 2.5, 4]
    # weighted: (3 x 1 + 2 x 3) / 4 = 2.25, then 1.5 < 2.25 pools all three: (9 + 1.5) / 5 = 2.1
    assert pool_adjacent_violators([3, 2, 1.5], [1, 3, 1]) == pytest.approx([2.1] * 3)
    assert pool_adjacent_violators([1, 2, 3], [5, 1, 1]) == [1, 2, 3]


@given(st.lists(st.tuples(st.floats(0.01, 1.0), st.integers(1, 50)), min_size=1, max_size=30))
def test_pooled_values_never_decrease_and_keep_the_weighted_sum(pairs: list[tuple[float, int]]) -> None:
    values, weights = [v for v, _ in pairs], [w for _, w in pairs]
    pooled = pool_adjacent_violators(values, weights)
    assert len(pooled) == len(values)
    assert all(b >= a - 1e-12 for a, b in zip(pooled, pooled[1:]))
    assert sum(p * w for p, w in zip(pooled, weights)) == pytest.approx(sum(v * w for v, w in zip(values, weights)))


def test_an_octave_curve_by_hand() -> None:
    # octave 2^30: fractions 0.2, 0.4, 0.9 -> median 0.4; octave 2^31: 0.3 (a dip, pooled with the
    # first by count: (0.4 x 3 + 0.3) / 4 = 0.375); octave 2^33: 0.7; then flat to 2^34
    samples = [(2.0**30, 0.2), (1.5 * 2**30, 0.4), (1.9 * 2**30, 0.9), (2.0**31, 0.3), (1.1 * 2**33, 0.7)]
    assert octave_medians(samples) == {30: (0.4, 3), 31: (0.3, 1), 33: (0.7, 1)}
    assert octave_curve(samples) == [(1.07e9, 0.375), (2.15e9, 0.375), (8.59e9, 0.7), (1.72e10, 0.7)]
    assert octave_curve([]) == []


def test_the_layer_sweep_times_each_weight_gemm_in_its_three_passes_with_equal_flops() -> None:
    shapes = layer_gemm_shapes([1024], tokens=8192, splits=(1, 4), squares=(64,))
    assert len(shapes) == 2 * 4 * 3 + 1
    fc1 = {s.what.split()[-1]: s for s in shapes if s.what.startswith("fc1 h=1024 t=4")}
    assert set(fc1) == set(PASS_LAYOUTS)
    assert (fc1["forward"].m, fc1["forward"].n, fc1["forward"].k) == (8192, 1024, 1024)  # h -> 4h/t
    assert (fc1["weight_grad"].m, fc1["weight_grad"].n, fc1["weight_grad"].k) == (1024, 8192, 1024)
    assert {s.layout for s in fc1.values()} == {"nt", "nn", "tn"}
    assert len({s.flops for s in fc1.values()}) == 1 and fc1["forward"].flops == 2 * 8192 * 1024 * 1024
    # a split that leaves under a multiple of 32 columns is left out
    assert not [s for s in layer_gemm_shapes([128], splits=(8,), squares=()) if "t=8" in s.what]


def test_attention_shapes_and_their_combined_rate() -> None:
    scores, context = attention_shapes(128, seq_len=2048, batch=4, heads=128, split=2)
    assert scores.batch == context.batch == 256
    assert scores.flops == context.flops == 2 * 256 * 2048 * 128 * 2048
    # equal FLOPs one after the other: 1 s at rate 1 and 0.5 s at rate 2 -> 2 units in 1.5 s
    assert harmonic_mean(1.0, 2.0) == pytest.approx(4 / 3)


def test_the_catalogue_h200_curve_is_what_its_committed_timings_give() -> None:
    """Provenance: the points in devices.yaml are octave_curve of bench/measured's timings."""
    with H200_TIMINGS.open() as fh:
        assert fh.readline().strip() == DEVICE_FILE_MARKER
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1689 and {r["layout"] for r in rows} == {"nn", "nt", "tn"}
    peak = DEVICES["h200"].peak_flops("bf16")
    # FLOPs from the shape (the flops column has 6 digits: 2^25 would round down into the octave below)
    flops = [2.0 * int(r["batch"]) * int(r["m"]) * int(r["n"]) * int(r["k"]) for r in rows]
    fractions = [f / (float(r["ms"]) / 1e3) / peak for f, r in zip(flops, rows)]
    assert fractions == pytest.approx([float(r["fraction_of_peak"]) for r in rows], abs=1e-4)
    curve = octave_curve(zip(flops, fractions))
    assert tuple(curve) == DEVICES["h200"].gemm.points


def _quick_entry(tmp_path: Path) -> Path:
    out = tmp_path / "measured.yaml"
    result = invoke(_ppexec_app(), "device", "--like", "h200", "--device", "cpu", "--quick", "--out", out,
                    "--samples", tmp_path / "gemms.csv", "--name", "mine")
    assert result.exit_code == 0, result.output
    return out


def _ppexec_app():  # noqa: ANN202 - typer app
    from ppexec.cli import app

    return app


def test_ppexec_device_writes_a_device_file_ppsim_reads(tmp_path: Path) -> None:
    out = _quick_entry(tmp_path)
    text = out.read_text()
    assert text.startswith(DEVICE_FILE_MARKER + "\n")
    mine = read_devices(out)["mine"]
    base = get_device("h200")
    assert mine.peak_tflops == base.peak_tflops and mine.intra_node_gb_s == base.intra_node_gb_s
    assert mine.gemm is not None and mine.gemm.dtypes == ("bf16",) and "ppexec device" in mine.gemm.source
    fractions = [f for _, f in mine.gemm.points]
    assert fractions == sorted(fractions) and all(0 < f <= 1 for f in fractions)
    assert mine.hbm_copy is not None and mine.hbm_copy.gb_s > 0 and mine.attention is not None
    assert mine.hbm_gb_s == base.hbm_gb_s and "ppexec device" in mine.hbm_copy.source  # the datasheet's kept
    rows = (tmp_path / "gemms.csv").read_text().splitlines()
    assert rows[0] == DEVICE_FILE_MARKER and rows[1].startswith("what,m,n,k,batch,layout,")
    assert len(rows) - 2 == len(layer_gemm_shapes([128, 256], tokens=256, squares=(32, 64)))
    # its own file is replaced without --force
    assert invoke(_ppexec_app(), "device", "--like", "h200", "--device", "cpu", "--quick", "--out", out).exit_code == 0
    assert "h200-measured" in yaml.safe_load(out.read_text().split("\n", 1)[1])


def test_ppexec_device_never_overwrites_a_users_file_and_names_bad_input(tmp_path: Path) -> None:
    mine = tmp_path / "devices.yaml"
    mine.write_text("my-gpu: {}\n")
    result = invoke(_ppexec_app(), "device", "--like", "h200", "--device", "cpu", "--quick", "--out", mine)
    assert result.exit_code == 1 and "was not written by ppsim" in result.output and "--force" in result.output
    assert mine.read_text() == "my-gpu: {}\n"
    result = invoke(_ppexec_app(), "device", "--like", "h900", "--device", "cpu", "--out", tmp_path / "x.yaml")
    assert result.exit_code == 1 and "unknown device 'h900'" in result.output and "h200" in result.output
    assert not (tmp_path / "x.yaml").exists()
    result = invoke(_ppexec_app(), "device", "--like", "h200", "--dtype", "int8", "--out", tmp_path / "x.yaml")
    assert result.exit_code == 2


def test_the_hosts_launch_time_is_measured_and_read_back(tmp_path: Path) -> None:
    """The launch timing runs (here on the CPU, whose figure only says it works: microseconds a
    call), and a GPU's entry carries it as ``launch``, which ppsim reads; a CPU's entry has none
    (a CPU runs each op as it is called)."""
    from ppexec.measure.device_bench import DeviceMeasurement, Stopwatch, device_entry, launch_us

    us = launch_us(Stopwatch("cpu", repeats=1), calls=200)
    assert 0 < us < math.inf  # a time a call; how long, a loaded CI machine decides (16 ms once, 2026-12-07)
    base = get_device("h200")
    entry = device_entry(base, [(1e9, 0.5), (1e12, 0.7)], [(64, 0.3), (128, 0.4)], 3000.0, "bf16", "a GPU",
                         launch=12.345678)
    path = tmp_path / "mine.yaml"
    path.write_text(DeviceMeasurement(entry, [], 1.0).device_file("mine"))
    mine = read_devices(path)["mine"]
    launch = mine.launch
    assert launch is not None and launch.us == 12.3 and "host time per call" in launch.source
    # the flat pricing of the entry is the base's: its best matmuls, so each dtype keeps its own figure
    assert all(mine.flat_efficiency(d) == base.flat_efficiency(d) for d in base.peak_tflops)
    assert mine.flat_efficiency("fp8") < mine.flat_efficiency("bf16")
    assert "launch" not in yaml.safe_load(_quick_entry(tmp_path).read_text().split("\n", 1)[1])["mine"]


def test_ppexec_device_on_a_machine_without_cuda_says_so(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    result = invoke(_ppexec_app(), "device", "--like", "h200", "--out", tmp_path / "x.yaml")
    assert result.exit_code == 1 and "no CUDA device" in result.output and "--device cpu" in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_a_measured_curve_prices_a_block_through_ppsims_own_path(tmp_path: Path) -> None:
    """The bench's prediction of one block (two blocks less one, one stage) is the block's GEMMs on
    the curve plus its elementwise bytes at HBM bandwidth, as ppsim.costs.analytic prices them."""
    import importlib.util

    from ppsim.costs.analytic import matmul_ms
    from ppsim.costs.layers import gpt_layers
    from ppsim.inputs.scenario import ModelSpec

    spec = importlib.util.spec_from_file_location("device_check", ROOT / "bench" / "device_check.py")
    bench = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    predicted_block_ms = bench.predicted_block_ms
    model = {"hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 51200}
    fwd, bwd = predicted_block_ms(model, 1, "h200", None, curves=True)
    _, block, _ = gpt_layers(ModelSpec(**model, layers=1, dropout=False), 1, flash_attention=True)
    h200 = get_device("h200")
    hbm = h200.memory_gb_s(measured=True) * 1e6  # under the curves: its measured copy
    assert fwd == pytest.approx(matmul_ms(block.gemms.forward, h200, "bf16", flash_attention=True)
                                + block.forward_bytes / hbm, rel=1e-9)
    assert bwd == pytest.approx(sum(matmul_ms(g, h200, "bf16", flash_attention=True, backward=True)
                                    for g in (block.gemms.input_grad, block.gemms.weight_grad))
                                + block.backward_bytes / hbm, rel=1e-9)
    flat_fwd, _ = predicted_block_ms(model, 1, "h200", None, curves=False)
    assert math.isclose(flat_fwd, block.forward_flops / (989e12 * 0.55 / 1e3)
                        + block.forward_bytes / (h200.hbm_gb_s * 1e6), rel_tol=1e-9)  # flat: the datasheet's


def test_the_device_bench_runs_end_to_end_small_on_a_cpu(tmp_path: Path) -> None:
    """bench/device_check.py --quick on the CPU: the sweep, the curves file, FlashAttention and the
    block table (figures meaningless; the path is what is checked, as on a GPU)."""
    import subprocess
    import sys

    out = tmp_path / "cpu.yaml"
    cmd = [sys.executable, str(ROOT / "bench" / "device_check.py"), "--device", "cpu", "--like", "cpu", "--quick",
           "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "tiny h=256" in done.stdout and "curve: median |error|" in done.stdout
    assert read_devices(out)["cpu-measured"].gemm is not None and out.with_suffix(".csv").is_file()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)  # never over what is there
    assert again.returncode == 2 and "exists" in again.stderr
