"""The command lines of README.md and docs/*.md, and how the docs tests run them: ``ppsim`` in
process (its TUI opened headless and closed), ``ppexec`` as the subprocess its console script is."""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, invoke

DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "internals").glob("*.md")))
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
    if cmd.program == "ppexec":  # stdout and stderr in one pipe, unbuffered: in the order a terminal shows them
        proc = subprocess.run([sys.executable, "-m", "ppexec.cli", *words[1:]], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        return proc.returncode, proc.stdout
    return 1, f"{cmd.text}: not a ppsim or ppexec command; list it among the skipped ones with the reason"


# ----- quoted outputs: a fenced block under `<!-- output of: COMMAND -->` is what COMMAND prints ---------

#: the marker, alone on the line right above the fenced block it vouches for; ``(measured)``: the
#: figures are one real run's (ppexec, or ppsim compare against a run), checked by shape only
MARKER = re.compile(r"<!-- output of(?P<measured> \(measured\))?: (?P<command>\S.*?) -->")
#: what starts a marker, well formed or not (a line starting so must be a marker)
MARKER_START = re.compile(r"<!--\s*output\s+of\b", flags=re.I)
#: a quoted line that stands for lines left out (a line ending in `` ...`` stands for the rest of its line)
ELISION = "..."
_TOKEN = re.compile(r"(?P<number>[-+]?\d[\d,]*(?:\.\d+)?)|"
                    r"(?P<space>\s+)|(?P<rule>(?P<rule_char>[━─═])(?P=rule_char)*)|(?P<other>.)")
_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"


@dataclass(frozen=True)
class Quoted:
    """A fenced block that a marker says is what ``command`` prints (an excerpt: its lines appear in
    the output in the same order)."""

    doc: Path
    line: int  #: the marker's line (1-based)
    command: Command
    measured: bool
    lines: tuple[str, ...]  #: the block's lines, trailing spaces stripped

    @property
    def first_line(self) -> int:
        """The line (1-based) of the block's first quoted line, under the marker and the fence."""
        return self.line + 2

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


@dataclass(frozen=True)
class Mismatch:
    index: int  #: which line of the block (0-based)
    quoted: str
    printed: str | None  #: the printed line of the same shape, or the closest one, or None
    same_shape: bool  #: ``printed`` is the quoted line with other figures (the update mode takes it)


def _fenced(lines: list[str]) -> list[bool]:
    """For each line: whether it is inside a fenced block (the fences themselves included)."""
    inside, out = False, []
    for line in lines:
        fence = line.startswith("```")
        out.append(inside or fence)
        if fence:
            inside = not inside
    return out


def marker_lines(doc: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced blocks that starts like a marker."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    return [(i + 1, line) for i, (line, fenced) in enumerate(zip(lines, _fenced(lines), strict=True))
            if not fenced and MARKER_START.match(line.lstrip())]


def quoted_blocks(doc: Path) -> list[Quoted]:
    """Every well-formed marker of a Markdown file with the fenced block under it."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    out = []
    for n, text in marker_lines(doc):
        m = MARKER.fullmatch(text.rstrip())
        if not m or n >= len(lines) or not lines[n].startswith("```"):
            continue
        end = next((j for j in range(n + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        cmd = m["command"]
        out.append(Quoted(doc, n, Command(doc.name, -1, cmd, cmd), bool(m["measured"]),
                          tuple(line.rstrip() for line in lines[n + 1:end])))
    return out


def shell_block_lines(doc: Path) -> list[int]:
    """The line (1-based) each ``sh`` / ``bash`` block of ``shell_blocks`` opens on."""
    text = doc.read_text(encoding="utf-8")
    return [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S)]


def prerequisites(q: Quoted) -> list[Command]:
    """The commands of the doc above the marker that write what its command reads (and what those
    read, and so on), in the doc's order: what must run first, in the same folder."""
    starts = shell_block_lines(q.doc)
    earlier = [c for c in commands(q.doc)
               if starts[c.block] < q.line and c.program in PROGRAMS and not placeholders(c.text)]
    needed, chosen = [p.rstrip("/") for p in q.command.inputs()], set()
    for k in range(len(earlier) - 1, -1, -1):
        outs = [o.rstrip("/") for o in earlier[k].outputs()]
        if any(p == o or p.startswith(o + "/") for o in outs for p in needed):
            chosen.add(k)
            needed += [p.rstrip("/") for p in earlier[k].inputs()]
    return [c for k, c in enumerate(earlier) if k in chosen]


def _split(quoted: str) -> tuple[str, bool]:
    """The text a quoted line vouches for, and whether it is only the start of the printed line."""
    if quoted.endswith(" " + ELISION):
        return quoted[: -len(ELISION)].rstrip(), True
    return quoted, False


def shape(quoted: str) -> re.Pattern[str]:
    """The printed lines ``quoted`` may stand for with other figures: each number any number, each
    run of spaces (or of a table's rule) any length; a line ending in `` ...`` only starts there."""
    text, prefix = _split(quoted)
    parts = []
    for t in _TOKEN.finditer(text):
        if t["number"]:
            parts.append(_NUMBER)
        elif t["space"]:
            parts.append(r"\s+")
        elif t["rule"]:
            parts.append(re.escape(t["rule"][0]) + "+")
        else:
            parts.append(re.escape(t["other"]))
    return re.compile("".join(parts) + ("" if prefix else r"\Z"))


def _same(quoted: str, printed: str) -> bool:
    text, prefix = _split(quoted)
    return printed.startswith(text) if prefix else printed == text


def mismatches(q: Quoted, output: str) -> list[Mismatch]:
    """The quoted lines the output does not have, in order (nothing: the block is what it prints).
    A measured block's lines are compared by shape (every number a placeholder), others as they are;
    an elision line (``...``) and blank lines are not compared."""
    printed = [line.rstrip() for line in output.splitlines()]
    pos, out = 0, []
    for k, line in enumerate(line.rstrip() for line in q.lines):
        if not line.strip() or line.strip() == ELISION:
            continue
        pattern = shape(line)
        matches = (lambda p, pattern=pattern: bool(pattern.match(p))) if q.measured else (lambda p, line=line: _same(line, p))
        hit = next((i for i in range(pos, len(printed)) if matches(printed[i])), None)
        if hit is not None:
            pos = hit + 1
            continue
        partner = None if q.measured else next((i for i in range(pos, len(printed)) if pattern.match(printed[i])), None)
        if partner is not None:
            out.append(Mismatch(k, line, printed[partner], True))
            pos = partner + 1
        else:
            close = difflib.get_close_matches(line, printed[pos:] or printed, n=1, cutoff=0.0)
            out.append(Mismatch(k, line, close[0] if close else None, False))
    return out


def updated(quoted: str, printed: str) -> str:
    """``quoted`` rewritten with ``printed``'s figures (its start only, for a line ending in `` ...``)."""
    if not _split(quoted)[1]:
        return printed
    m = shape(quoted).match(printed)
    assert m, (quoted, printed)
    return printed[: m.end()].rstrip() + " " + ELISION


def rewrite(q: Quoted, lines: dict[int, tuple[str, str]]) -> None:
    """Replace quoted lines of ``q``'s block in its doc: {index in the block: (old, new)}. Locks the
    file, so parallel test workers may rewrite blocks of one doc (each line stays one line)."""
    import fcntl

    with open(q.doc, "r+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        text = f.read().splitlines(keepends=True)
        for k, (old, new) in lines.items():
            i = q.first_line - 1 + k
            assert text[i].rstrip() == old, f"{q.where}: line {i + 1} changed since the test read it"
            text[i] = new + "\n"
        f.seek(0)
        f.write("".join(text))
        f.truncate()


UPDATE = os.environ.get("PPSIM_UPDATE_DOCS", "") not in ("", "0")
UPDATE_COMMAND = "PPSIM_UPDATE_DOCS=1 .venv/bin/python -m pytest tests/docs/test_docs_outputs.py"


def quoted_for(cmd: Command) -> list[Quoted]:
    """The marked blocks of ``cmd``'s doc that quote what ``cmd`` prints."""
    doc = next(d for d in DOCS if d.name == cmd.doc)
    return [q for q in quoted_blocks(doc) if q.command.text == cmd.text]


def checked_in_order(q: Quoted) -> bool:
    """Whether the slow test that runs its doc's commands in order checks ``q`` as it goes (a block
    whose command, or one run first for it, is ppexec's, and whose command is one of the doc's):
    tests/docs/test_docs_outputs.py then does not run those commands a second time."""
    return (any(c.program == "ppexec" for c in (*prerequisites(q), q.command))
            and any(c.text == q.command.text for c in commands(q.doc)))


def check_quoted(q: Quoted, code: int, output: str) -> str | None:
    """Why ``output`` (and exit ``code``) is not what ``q`` quotes, or None when it is. With
    ``PPSIM_UPDATE_DOCS=1`` a quoted line with other figures than the printed line of its shape is
    rewritten in the doc (measured blocks aside) instead of failing."""
    fails = any(line.startswith("error:") for line in q.lines)
    if (code != 0) != fails:
        return (f"{q.where}: `{q.command.text}` exited {code}, the doc quotes {'an error' if fails else 'a success'}"
                f"\n{output[-3000:]}")
    found = mismatches(q, output)
    if UPDATE and not q.measured:
        fixed = {m.index: (m.quoted, updated(m.quoted, m.printed)) for m in found if m.same_shape and m.printed}
        if fixed:
            rewrite(q, fixed)
            warnings.warn(f"{q.where}: rewrote {len(fixed)} quoted line(s) with what `{q.command.text}` prints",
                          stacklevel=2)
        found = [m for m in found if m.index not in fixed]
    return _report(q, found, output) if found else None


def _report(q: Quoted, found: list[Mismatch], output: str) -> str:
    kind = "by shape, numbers aside (a measured run's figures)" if q.measured else "line by line"
    rows = []
    for m in found:
        rows += [f"  quoted  (line {q.first_line + m.index}): {m.quoted}",
                 f"  printed{' (same shape)' if m.same_shape else ' (closest)   '}: {m.printed}"]
    hint = (f"\nto take the printed figures: {UPDATE_COMMAND}" if any(m.same_shape for m in found)
            else "\nedit the block by hand: no printed line has its shape")
    printed = "\n".join(line.rstrip() for line in output.splitlines())
    return (f"{q.where}: `{q.command.text}` does not print what the doc quotes (compared {kind}):\n"
            + "\n".join(rows) + hint + "\n--- what it printed ---\n" + printed[-4000:])
