"""docs/tutorial.md cannot rot: every command in its ``sh`` blocks runs, in a copy of docs/tutorial/."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, sh_commands

DOC = ROOT / "docs" / "tutorial.md"
FILES = ROOT / "docs" / "tutorial"
BIN = Path(sys.executable).parent


def commands() -> list[str]:
    return sh_commands(DOC)


def test_the_tutorial_has_its_commands() -> None:
    cmds = commands()
    assert len(cmds) >= 8
    assert all(c.split()[0] in ("ppsim", "ppexec") for c in cmds), cmds
    assert any(c.startswith("ppexec run") for c in cmds) and any(c.startswith("ppsim compare") for c in cmds)


@pytest.mark.slow  # runs ppexec
def test_every_command_of_the_tutorial_runs(tmp_path: Path) -> None:
    needs_exec = any(c.startswith("ppexec") for c in commands())
    if needs_exec and not all(importlib.util.find_spec(m) for m in ("torch", "deepspeed")):
        pytest.skip("the tutorial's ppexec commands need torch and deepspeed (make test installs them)")
    work = tmp_path / "tutorial"
    shutil.copytree(FILES, work)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    for cmd in commands():
        res = subprocess.run(shlex.split(cmd), cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
    for made in ("three-stages.html", "three-stages.trace.json", "predicted.json", "compare.html",
                 "runs/three-stages/trace.json", "validation/comparison.html"):
        assert (work / made).is_file(), made
