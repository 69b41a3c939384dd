"""docs/tutorial.md cannot rot: every command in its ``sh`` blocks runs, in a copy of docs/tutorial/,
and prints what the tutorial quotes for it."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from doc_commands import check_quoted, quoted_for, run_command
from doc_commands import commands as doc_commands

from conftest import ROOT, sh_commands

DOC = ROOT / "docs" / "tutorial.md"
FILES = ROOT / "docs" / "tutorial"


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
    problems = []  # quoted outputs that differ (tests/docs/test_docs_outputs.py): all of them reported at the end
    for cmd in doc_commands(DOC):
        code, output = run_command(cmd, work)
        assert code == 0, f"{cmd.text}\n{output[-3000:]}"
        problems += [p for q in quoted_for(cmd) if (p := check_quoted(q, code, output))]
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)
    for made in ("three-stages.html", "three-stages.trace.json", "predicted.json", "compare.html",
                 "runs/three-stages/trace.json", "validation/comparison.html"):
        assert (work / made).is_file(), made
