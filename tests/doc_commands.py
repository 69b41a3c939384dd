"""The command lines of README.md and docs/*.md, and how the docs tests run them: ``ppsim`` in
process (its TUI opened headless and closed), ``ppexec`` as the subprocess its console script is."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, invoke

DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
PROGRAMS = ("ppsim", "ppexec")
#: options whose value is a file or folder a command writes
OUTPUT_OPTIONS = ("--out", "--html", "--png", "--trace", "--save-trace", "--write", "--keep-run")
#: output options whose value is a folder the command creates
FOLDER_OPTIONS = ("--out", "--keep-run")
#: options whose value is a file a command reads
INPUT_OPTIONS = ("--profile", "--ds-config", "--hostfile")


@dataclass(frozen=True)
class Command:
    doc: str  #: the file's name: README.md, ppexec.md ...
    block: int  #: which shell block of the file (0-based)
    first_line: str  #: the block's first line, as written (names the block in skip lists)
    text: str  #: the command, continuation lines joined, the .venv/bin/ prefix kept

    @property
    def words(self) -> list[str]:
        try:
            words = shlex.split(self.text, comments=True)
        except ValueError:  # a quote that spans lines (a script's): as far as the words go
            words = self.text.split()
        return [words[0].removeprefix(".venv/bin/"), *words[1:]] if words else []

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""

    def outputs(self) -> list[str]:
        w = self.words
        out = [w[i + 1] for i, x in enumerate(w[:-1]) if x in OUTPUT_OPTIONS]
        if "--write-top" in w:
            out.append(w[w.index("--write-top") + 2])
        return out

    def output_files(self) -> list[str]:
        """The outputs that are files (not folders a command creates): their folder must exist."""
        w = self.words
        return [w[i + 1] for i, x in enumerate(w[:-1]) if x in OUTPUT_OPTIONS and x not in FOLDER_OPTIONS]

    def inputs(self) -> list[str]:
        """Files and folders the command reads: its arguments and the input options' values."""
        w, out = self.words, []
        skip_next = False
        for i, x in enumerate(w[1:], start=1):
            if skip_next:
                skip_next = False
                continue
            if x.startswith("-"):
                skip_next = x not in ("--json", "--force") and "=" not in x
                if x in INPUT_OPTIONS:
                    out.append(w[i + 1])
                continue
            if "/" in x or x.endswith((".yaml", ".yml", ".json", ".gz")):
                out.append(x)
        return out


def shell_blocks(doc: Path) -> list[str]:
    """The ``sh`` / ``bash`` code blocks of a Markdown file, in order."""
    return re.findall(r"```(?:sh|bash)\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S)


def commands(doc: Path) -> list[Command]:
    """Every command of the file's shell blocks, in order: comment lines dropped, lines ending in a
    backslash joined with the next."""
    out = []
    for k, block in enumerate(shell_blocks(doc)):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        first = lines[0] if lines else ""
        pending = ""
        for line in lines:
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            text, pending = pending + line, ""
            if not text.startswith("#"):
                out.append(Command(doc.name, k, first, text))
    return out


def placeholders(text: str) -> list[str]:
    """The ``<...>`` words and ``$VARIABLES`` of a command: what the reader fills in."""
    return re.findall(r"<[^<>\s][^<>]*>|\$\{?[A-Z_]+", text)


@contextmanager
def headless_tui(opened: list[str]) -> Iterator[None]:
    """``ppsim tui`` opens its app headless, lets it draw, and closes it (appending its title to ``opened``)."""
    from ppsim.views.tui.app import PpsimTui

    def run(self: PpsimTui, *args: object, **kwargs: object) -> None:
        async def go() -> None:
            async with self.run_test(size=(120, 40)) as pilot:
                await pilot.pause()
                opened.append(type(self).__name__)

        asyncio.run(go())

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PpsimTui, "run", run)
        yield


def run_command(cmd: Command, cwd: Path, timeout_s: float = 600) -> tuple[int, str]:
    """Run one documented command in ``cwd``: ppsim in process, ppexec as a subprocess."""
    words = cmd.words
    if cmd.program == "ppsim":
        from ppsim.cli import app

        here = os.getcwd()
        os.chdir(cwd)
        try:
            opened: list[str] = []
            with headless_tui(opened):
                res = invoke(app, *words[1:])
            if words[1] == "tui" and res.exit_code == 0 and not opened:
                return 1, f"{cmd.text}: the TUI did not open"
            return res.exit_code, res.output
        finally:
            os.chdir(here)
    if cmd.program == "ppexec":
        proc = subprocess.run([sys.executable, "-m", "ppexec.cli", *words[1:]], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout_s)
        return proc.returncode, proc.stdout + proc.stderr
    return 1, f"{cmd.text}: not a ppsim or ppexec command; list it among the skipped ones with the reason"
