"""bench/published.py: every published case is predicted, in the source's FLOP convention."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BENCH = ROOT / "bench" / "published.py"


def _bench():  # the module, to check its formula against the paper's own worked figure
    spec = importlib.util.spec_from_file_location("published", BENCH)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["published"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_flop_convention_is_the_papers() -> None:
    # Narayanan et al., sec. 5.1: the 1T model at batch 3072 on 3072 GPUs at 163 TFLOP/s per GPU
    # reaches 502 PFLOP/s in all; its FLOPs per iteration over that rate give the iteration time
    b = _bench()
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
    assert len(doc["cases"]) == len(_bench().CASES)
    assert all(c["predicted_tflops"] > 0 and c["fits"] for c in doc["cases"])
    assert "median |error|" in res.stdout
