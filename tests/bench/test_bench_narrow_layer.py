"""bench/narrow_layer.py: the guide's layer is 12 GEMMs of 1.917e13 FLOPs, priced at the recipe's
peak; its autocast casts are the calls' inputs and weights at the cast bytes per value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "narrow_layer.py"


def test_the_layer_is_its_twelve_gemms_and_the_autocast_casts() -> None:
    """Flat, on the B300 (2,250 bf16, 4,500 fp8 TFLOP/s; 8,000 GB/s): bf16 runs the 1.917e13 FLOPs at
    the step's share (0.55 / (794.5 / 989)) of its best bf16 matmul, 1,769 TFLOP/s, and MXFP8 at that
    share of its best FP8 matmul, 3,353.3 TFLOP/s, at MXFP8's 0.95 of per-tensor scaling's speed;
    its casts move 2 + 2 x (1 + 1/32)
    bytes for each of the calls' 2,483 M input and weight values, taking 1.2x a copy of them."""
    b = bench_module("narrow_layer")
    calls = b.gemm_calls()
    flops = sum(2 * m * k * n for m, k, n in calls)
    assert len(calls) == 12 and flops == 3 * 2 * 15872 * (4096 * 12288 + 4096 * 4096 + 2 * 4096 * 16384)
    alone, with_casts = b.predicted_ms("b300", "bf16", curves=False)
    share = 0.55 / (794.5 / 989)
    assert alone == with_casts == pytest.approx(flops / (1769e9 * share))
    kernels, total = b.predicted_ms("b300", "mxfp8", curves=False)
    assert kernels == pytest.approx(flops / (3353.3e9 * share * 0.95))
    values = sum(m * k + k * n for m, k, n in calls)
    assert values == pytest.approx(2483.03e6, rel=1e-5)
    assert total - kernels == pytest.approx(1.2 * values * (2 + 2 * (1 + 1 / 32)) / 8000e6)


def test_the_bench_prints_every_measured_precision() -> None:
    out = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    for name in ("fp8_current", "fp8_delayed", "mxfp8", "nvfp4", "fp8_block"):
        assert name in out
    assert "speedups over bf16" in out
