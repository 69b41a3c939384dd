"""bench/ep_overlap.py: Megatron-Bridge's measured A/B (the all-to-alls overlapped or not) as two
scenarios that differ in the overlap alone, each printed beside its measured step."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "ep_overlap.py"


def test_the_two_cases_differ_in_the_overlap_alone_and_run_in_bf16_with_hybrideps_kernels() -> None:
    b = bench_module("ep_overlap")
    exposed, overlapped = b.scenario(False, False), b.scenario(True, False)
    for data in (exposed, overlapped):
        assert data["training"]["moe_dispatcher"] == "hybridep" and "fp8" not in data["training"]
        assert (data["expert_parallel"], data["data_parallel"], data["tensor_parallel"]) == (16, 16, 1)
        assert data["pipeline"]["stages"] == 1 and data["training"]["micro_batch"] == 1
    assert exposed["pipeline"]["schedule"] == "1f1b" and overlapped["pipeline"]["schedule"] == "combined-1f1b"
    assert "moe_comm_sms" not in exposed["training"] and overlapped["training"]["moe_comm_sms"] == 32
    rest = {k: v for k, v in exposed.items() if k not in ("pipeline", "training", "name")}
    assert rest == {k: v for k, v in overlapped.items() if k not in ("pipeline", "training", "name")}


def test_the_bench_prints_both_cases_and_the_gain() -> None:
    out = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "exposed     measured  24.71 s" in out and "overlapped  measured  20.99 s" in out
    assert "the overlap's gain: measured 1.177x" in out
