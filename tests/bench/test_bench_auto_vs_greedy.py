"""bench/auto_vs_greedy.py runs and finds auto never behind the zero-bubble authors' greedy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_auto_is_never_behind_the_authors_greedy_in_the_bench() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "auto_vs_greedy.py")], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("p=")]
    assert len(rows) == 12
    assert "behind in 0" in res.stdout and res.stdout.rstrip().endswith("ok")
