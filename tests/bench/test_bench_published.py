"""bench/published.py: every published case is predicted, in the source's FLOP convention."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "published.py"


def test_the_flop_convention_is_the_papers() -> None:
    # Narayanan et al., sec. 5.1: the 1T model at batch 3072 on 3072 GPUs at 163 TFLOP/s per GPU
    # reaches 502 PFLOP/s in all; its FLOPs per iteration over that rate give the iteration time
    b = bench_module("published")
    one_t = next(c for c in b.CASES if c.row == "Table 1, 1008.0B")
    assert 3072 * 163e12 == pytest.approx(502e15, rel=0.01)
    assert b.narayanan_flops(one_t) == pytest.approx(96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / (6 * 25600)
                                                                                     + 51200 / (16 * 128 * 25600)))
    s = b.scenario(one_t)
    assert (s.tensor_parallel, s.pipeline.stages, s.data_parallel, s.microbatches) == (8, 64, 6, 512)


def test_the_bench_prints_every_case(tmp_path: Path) -> None:
    out = tmp_path / "published.json"
    res = subprocess.run([sys.executable, str(BENCH), "--json", str(out)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    assert len(doc["cases"]) == len(bench_module("published").CASES)
    assert all(c["predicted_tflops"] > 0 and c["fits"] for c in doc["cases"])
    assert "median |error|" in res.stdout


def test_each_run_has_the_configuration_of_megatrons_own_scripts() -> None:
    # Megatron-LM examples/sc21/run_table_1.sh: 530B runs MBS=1 with one layer per virtual stage
    # (105 layers / 35 stages = 3 chunks), 1T MBS=1 without interleaving, 1.7B MBS=16 with torch DDP
    b = bench_module("published")
    case = {c.row: c for c in b.CASES}
    s = b.scenario(case["Table 1, 529.6B"])
    assert (s.pipeline.schedule, s.pipeline.chunks, s.data_parallel, s.microbatches) == ("interleaved-1f1b", 3, 9, 280)
    s = b.scenario(case["Table 2, PTD-P 529.6B, 560 GPUs"])
    assert (s.pipeline.schedule, s.pipeline.chunks, s.data_parallel, s.microbatches) == ("interleaved-1f1b", 3, 2, 1120)
    s = b.scenario(case["Table 1, 1008.0B"])
    assert (s.pipeline.schedule, s.pipeline.chunks) == ("1f1b", 1)
    s = b.scenario(case["Table 1, 1.7B"])  # 512 sequences over 32 replicas in one micro-batch of 16
    assert (s.training.micro_batch, s.microbatches, s.training.overlap_grad_reduce) == (16, 1, True)
    s = b.scenario(case["Table 1, 76.1B"])  # 60 layers / (4 stages x 5 per virtual stage); 1792 / (32 x 2)
    assert (s.pipeline.chunks, s.training.micro_batch, s.microbatches, s.training.overlap_grad_reduce) == (3, 2, 28, False)
    s = b.scenario(case["Table 2, PTD-P 174.6B, 384 GPUs"])  # 96 layers / (12 stages x 2 per virtual stage)
    assert (s.pipeline.chunks, s.microbatches) == (4, 384)
