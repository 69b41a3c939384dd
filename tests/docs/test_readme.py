"""README.md's ppsim commands that need only the project's scenarios run as written, one by one (fast;
``ppsim tui`` opens headless and closes). tests/docs/test_docs_commands.py runs every command of the README
in order (slow: ppexec's runs, the tuner) and checks that no command reads a file no earlier one wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from doc_commands import Command, commands, placeholders, run_command

from conftest import ROOT

README = ROOT / "README.md"


def _ppsim_commands() -> list[Command]:
    return [c for c in commands(README) if c.program == "ppsim"]


def _runnable(cmd: Command) -> bool:
    """Not the tuner (minutes: the slow test runs it), nothing to fill in, reads only scenarios/ and
    writes into no folder an earlier command makes."""
    return (cmd.words[1] != "tune" and not placeholders(cmd.text)
            and all(p.startswith("scenarios/") for p in cmd.inputs()) and all("/" not in o for o in cmd.outputs()))


COMMANDS = [c for c in _ppsim_commands() if _runnable(c)]


def test_the_readme_shows_the_main_commands() -> None:
    names = {c.words[1] for c in _ppsim_commands()}
    assert {"run", "schedules", "plan", "compare-schedules", "sweep", "tui", "tune", "compare"} <= names
    assert len(COMMANDS) >= 11
    assert any(c.words[1] == "tui" for c in COMMANDS)


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c.words[1:])[:60])
def test_every_ppsim_command_of_the_readme_runs(tmp_path: Path, cmd: Command) -> None:
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    code, output = run_command(cmd, tmp_path)
    assert code == 0, output
    for out in cmd.outputs():
        assert (tmp_path / out).stat().st_size > 0, out
