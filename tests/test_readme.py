"""README.md's ppsim commands run as written (in a folder with the project's scenarios), so the
front page cannot promise what ppsim no longer does. The TUI's are interactive (tests/test_tui.py
drives it); ``tune``'s searches 1,900 plans for minutes (tests/test_tune.py runs smaller searches)."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, invoke, sh_commands
from ppsim.cli import app

README = ROOT / "README.md"


def _ppsim_commands() -> list[list[str]]:
    out = []
    for line in sh_commands(README, "bash|sh"):
        words = shlex.split(line, comments=True)
        if words and words[0].endswith("bin/ppsim"):
            out.append(words[1:])
    return out


def _runnable(words: list[str]) -> bool:
    """Not the TUI, and no input that only an earlier ppexec run makes (runs/, traces/, profiles)."""
    files = [w for w in words[1:] if not w.startswith("-")]
    outputs = [w for w in files if w.endswith((".html", ".png", ".json"))]
    inputs = [w for w in files if w not in outputs]
    return (words[0] not in ("tui", "tune") and all("/" not in w for w in outputs)
            and all(w.startswith("scenarios/") or not ("/" in w or "." in w) for w in inputs))


COMMANDS = [c for c in _ppsim_commands() if _runnable(c)]


def test_the_readme_shows_the_main_commands() -> None:
    names = {c[0] for c in _ppsim_commands()}
    assert {"run", "schedules", "plan", "compare-schedules", "sweep", "tui", "tune", "compare"} <= names
    assert len(COMMANDS) >= 9


@pytest.mark.parametrize("words", COMMANDS, ids=lambda c: " ".join(c)[:60])
def test_every_ppsim_command_of_the_readme_runs(tmp_path: Path, words: list[str]) -> None:
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = invoke(app, *words)
    finally:
        os.chdir(here)
    assert res.exit_code == 0, res.output
    for w in words:
        if w.endswith((".html", ".png", ".json")) and not w.startswith("scenarios/"):
            assert (tmp_path / w).stat().st_size > 0, w
