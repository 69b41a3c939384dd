"""bench/exec_overhead.py runs end to end with the smallest settings (the timing itself is not checked)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from conftest import ROOT  # noqa: E402

pytestmark = pytest.mark.slow  # runs DeepSpeed


@pytest.mark.parametrize("runtime", ["deepspeed", "torch"])
def test_exec_overhead_bench_runs(runtime: str) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "exec_overhead.py"), "--steps", "2", "--warmup", "0",
           "--layers", "2" if runtime == "deepspeed" else "4",  # torch runs interleaved: a block per virtual stage
           "--hidden", "32", "--seq-len", "16", "--micro-batch", "2", "--microbatches", "2",
           "--timeout", "30", "--runtime", runtime]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "stock" in out and "timed" in out and "overhead:" in out
    assert ": ok" in out or ": MISSED" in out
    # both engines train the same model on the same data: the same losses
    found = re.search(r"differ by at most (\S+)", out)
    assert found is not None, out
    assert float(found.group(1)) < 1e-5, out
