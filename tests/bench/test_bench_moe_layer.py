"""bench/moe_layer.py: one MoE layer's prediction is the layer's own cost, worked out by hand on the
flat pricing, and the bench prints every published case beside it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "moe_layer.py"


def test_the_mixtral_like_layer_is_its_gemms_memory_work_and_all_to_alls() -> None:
    """8 experts of 14,336 (GELU: two matrices), top 2, h = 4096, 4,096 tokens a GPU, EP 8 on
    H100s at the flat 0.55 of 989 TFLOP/s: each GPU's one expert takes 8,192 token copies, 2 x 2 x
    8192 x 4096 x 14336 FLOPs forward, plus the router's 2 x 4096 x 4096 x 8; the dispatch and the
    combine each send 7/8 of 8,192 x 4096 x 2 bytes at the 370 GB/s collectives reach on an H100's
    NVLink, with 7 latencies of 3 us, after NCCL's dispatcher exchanged each rank's 8 token counts
    (8 bytes each). HybridEP sends the same bytes (a token's two experts are always on two devices)
    at its 0.717 of the datasheet's 450 GB/s, and counts them itself."""
    b = bench_module("moe_layer")
    arch = yaml.safe_load(b.DATA.read_text())["models"]["mixtral"]
    forward, backward = b.predicted_layer_ms(arch, "bf16", False, "alltoall")
    gemms = (2 * 2 * 8192 * 4096 * 14336 + 2 * 4096 * 4096 * 8) / (989e9 * 0.55)
    counts = 7 * 3e-3 + 8 * 8 * 7 / 8 / 370e6
    a2a = 2 * (7 * 3e-3 + 8192 * 4096 * 2 * 7 / 8 / 370e6) + counts
    memory = forward - gemms - a2a  # the norm, residual, activation and permutation's bytes
    assert 0 < memory < 0.1 * forward
    assert backward > 1.9 * gemms  # input and weight grads: twice the forward's GEMMs, and more
    fp8_forward, _ = b.predicted_layer_ms(arch, "fp8", False, "alltoall")
    assert fp8_forward < forward  # the experts' GEMMs at the FP8 peak, their casts besides
    hybrid, _ = b.predicted_layer_ms(arch, "bf16", False, "hybridep")
    hybrid_a2a = 2 * (7 * 3e-3 + 8192 * 4096 * 2 * 7 / 8 / (450e6 * 0.717))  # no exchange of counts
    assert hybrid - forward == pytest.approx(hybrid_a2a - a2a)


def test_the_bench_prints_every_case_and_its_summary() -> None:
    out = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    cases = yaml.safe_load((ROOT / "bench" / "data" / "megatron_moe_layer.yaml").read_text())["cases"]
    assert all(name in out for name in cases)
    assert out.count("median |error|") == 4  # flat and curves, bf16 and fp8
