"""What README.md and docs/*.md quote as a command's output is what the command prints, figures
included, so a change that moves a figure moves it in the docs in the same commit.

A quoted output is a fenced block right under a marker naming the command:

    <!-- output of: ppsim run scenarios/gpt.yaml -->
    <!-- output of (measured): ppexec run scenarios/tiny-cpu.yaml --out runs/tiny --steps 2 -->

The block may be an excerpt: its lines must appear in the output in the same order (trailing spaces
aside); a line ``...`` stands for lines left out, a line ending in `` ...`` for the rest of its line,
and blank lines are not compared. A ``(measured)`` block is one real run's output (ppexec, or a
comparison with a run), whose figures vary from run to run: it is checked by shape only, every
number a placeholder. Each command runs in a fresh folder holding the project's scenarios/
(tutorial.md's in a copy of docs/tutorial/), after the commands above it in the same doc that write
what it reads; ppsim in process (fast, the normal suite), ppexec as a subprocess (marked slow). A
block whose quoted lines start with ``error:`` expects the command to fail. A block that needs ppexec
and quotes one of its doc's commands is checked by the slow test that runs the doc's commands in
order (tests/docs/test_docs_commands.py, tests/docs/test_tutorial.py) as it goes, not here a second time.

When figures move, ``PPSIM_UPDATE_DOCS=1 .venv/bin/python -m pytest tests/docs/test_docs_outputs.py``
rewrites each quoted line of the blocks it runs with the printed line of the same shape (the line
with its numbers masked), so the docs follow in one command; review the diff. A line whose shape
changed (new words, a new column) and measured blocks are left to be edited by hand: the failure
shows the quoted line and the printed one.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
from doc_commands import (
    DOCS,
    MARKER,
    PROGRAMS,
    Command,
    Quoted,
    check_quoted,
    checked_in_order,
    marker_lines,
    mismatches,
    placeholders,
    prerequisites,
    quoted_blocks,
    run_command,
    updated,
)

from conftest import ROOT

#: marked blocks whose command is too slow for CI, by (file, the start of the command): why
NOT_RUN: dict[tuple[str, str], str] = {}
#: marked ppsim blocks slow enough for the slow tests alone, by (file, the start of the command): why
SLOW: dict[tuple[str, str], str] = {
    ("tune.md", "ppsim tune scenarios/megatron-gpt3-175b.yaml"): "searches 5,352 plans of GPT-3 175B (about a minute)",
}

#: what ppsim's summary prints (and ppsim compare's headline): a block quoting such a line needs a marker
SUMMARY_LINE = re.compile(r"\s*(step time\s+(predicted\s+)?[-\d,.]+ ms|MFU\s+[\d.]+ %|throughput\s+[\d,.]+ samples/s)")

QUOTED = [q for d in DOCS for q in quoted_blocks(d)]


def _listed(q: Quoted, table: dict[tuple[str, str], str]) -> str | None:
    return next((why for (doc, start), why in table.items() if doc == q.doc.name and q.command.text.startswith(start)),
                None)


def _param(q: Quoted) -> object:
    runs_exec = any(c.program == "ppexec" for c in (*prerequisites(q), q.command))
    marks = [pytest.mark.slow] if runs_exec or _listed(q, SLOW) else []  # DeepSpeed's ranks, a profile, a long search
    if why := _listed(q, NOT_RUN):
        marks.append(pytest.mark.skip(reason=f"too slow for CI: {why}"))
    return pytest.param(q, marks=marks, id=f"{q.where} {q.command.text[:60]}")


def test_the_docs_quote_outputs() -> None:
    quoting = {q.doc.name for q in QUOTED}
    assert {"README.md", "tutorial.md", "ppexec.md", "views.md", "calibration.md"} <= quoting, quoting
    assert sum(not q.measured for q in QUOTED) >= 8


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_marker_names_a_command_and_sits_on_a_fenced_block(doc: Path) -> None:
    lines = doc.read_text(encoding="utf-8").splitlines()
    for n, text in marker_lines(doc):
        m = MARKER.fullmatch(text.rstrip())
        assert m, (f"{doc.name}:{n}: {text!r} is not a marker; write `<!-- output of: COMMAND -->` or "
                   "`<!-- output of (measured): COMMAND -->`, alone at the start of its line")
        assert n < len(lines) and lines[n].startswith("```"), (
            f"{doc.name}:{n}: the marker must sit right above the fenced block it quotes (no blank line)")
        q = next(q for q in quoted_blocks(doc) if q.line == n)
        assert q.command.program in PROGRAMS, f"{doc.name}:{n}: {q.command.text!r} is not a ppsim or ppexec command"
        assert not placeholders(q.command.text), f"{doc.name}:{n}: {q.command.text!r} has something to fill in"
        assert any(line.strip() and line.strip() != "..." for line in q.lines), f"{doc.name}:{n}: quotes nothing"


def _quoted(text: str, measured: bool = False) -> Quoted:
    cmd = "ppsim run scenarios/gpt.yaml"
    return Quoted(ROOT / "README.md", 1, Command("README.md", -1, cmd, cmd), measured, tuple(text.splitlines()))


PRINTED = """scenario       gpt3-13b-64xa100  (simulated)
step time      19,140.801 ms
MFU            45.1 %
memory         DOES NOT FIT: rank 0 needs 142.42 GiB, 62.42 GiB too many, at 0F1; rank 1 needs ...
"""


def test_the_check_catches_a_wrong_figure_and_the_update_takes_the_printed_one() -> None:
    assert mismatches(_quoted("...\nstep time      19,140.801 ms\n\nMFU            45.1 %   \n..."), PRINTED) == []
    found = mismatches(_quoted("step time      17,140.155 ms\nMFU            45.1 %"), PRINTED)
    assert [(m.quoted, m.printed, m.same_shape) for m in found] == [
        ("step time      17,140.155 ms", "step time      19,140.801 ms", True)]
    assert updated(found[0].quoted, found[0].printed) == "step time      19,140.801 ms"
    prefix = "memory         DOES NOT FIT: rank 0 needs 150.00 GiB, 70.00 GiB too many, ..."
    found = mismatches(_quoted(prefix), PRINTED)
    assert len(found) == 1 and found[0].same_shape
    assert updated(prefix, found[0].printed) == ("memory         DOES NOT FIT: rank 0 needs 142.42 GiB, 62.42 GiB "
                                                 "too many, ...")
    assert mismatches(_quoted("MFU            45.1 %\nstep time      19,140.801 ms"), PRINTED)  # order matters
    assert mismatches(_quoted("step time      19,140.801 ms (per step)"), PRINTED)  # other words: no partner
    assert not mismatches(_quoted("step time      17,140.155 ms\nMFU            9.9 %", measured=True), PRINTED)
    assert mismatches(_quoted("step time      17,140.155 s", measured=True), PRINTED)  # a measured shape is checked


def test_every_listed_command_names_a_marker() -> None:
    for doc, start in (*NOT_RUN, *SLOW):
        assert any(q.doc.name == doc and q.command.text.startswith(start) for q in QUOTED), (
            f"{doc} has no marker of {start!r}")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_no_summary_is_quoted_without_a_marker(doc: Path) -> None:
    """A block that looks like ppsim's summary (``step time  ... ms``) must say which command prints it."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    marked = {q.line + 1 for q in quoted_blocks(doc)}  # the opening fences of quoted blocks
    start = None
    for i, line in enumerate(lines, start=1):
        if not line.startswith("```"):
            continue
        if start is None:
            start = i
            continue
        if start not in marked:
            summary = [x for x in lines[start:i - 1] if SUMMARY_LINE.match(x)]
            assert not summary, (f"{doc.name}:{start}: the block quotes what looks like ppsim's output "
                                 f"({summary[0].strip()!r}) without a `<!-- output of: COMMAND -->` marker above it")
        start = None


def _folder(q: Quoted, tmp_path: Path) -> Path:
    """A fresh folder for the doc's commands: a copy of docs/tutorial/ for the tutorial, else one
    with the project's scenarios."""
    if q.doc.name == "tutorial.md":
        shutil.copytree(ROOT / "docs" / "tutorial", tmp_path / "tutorial")
        return tmp_path / "tutorial"
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    return tmp_path


@pytest.mark.parametrize("q", [_param(q) for q in QUOTED if not checked_in_order(q)])
def test_every_quoted_output_is_what_the_command_prints(tmp_path: Path, q: Quoted) -> None:
    chain = [*prerequisites(q), q.command]
    if any(c.program == "ppexec" for c in chain) and not all(importlib.util.find_spec(m) for m in ("torch", "deepspeed")):
        pytest.skip("ppexec needs torch and deepspeed (make test installs them)")
    cwd = _folder(q, tmp_path)
    for cmd in chain[:-1]:
        code, output = run_command(cmd, cwd)
        assert code == 0, f"{q.where}: {cmd.text!r}, run first for what it writes, failed\n{output[-3000:]}"
    code, output = run_command(q.command, cwd)
    if problem := check_quoted(q, code, output):
        pytest.fail(problem, pytrace=False)
