"""Every command of README.md and docs/*.md runs as written, in the order written, in a folder with
the project's scenarios (the slow test below, which also checks each output the doc quotes for a
command as it runs it, see tests/docs/test_docs_outputs.py); what cannot run here is a template whose words in
``<angle brackets>`` or ``$VARIABLES`` the reader fills in, listed here with the reason. The fast
tests check, without running anything, that each command's input files exist or were written by
an earlier command of the same file, and that the lists below match the docs."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from doc_commands import DOCS, PROGRAMS, Command, check_quoted, commands, placeholders, quoted_for, run_command

from conftest import ROOT

#: files whose commands another test runs, in their own folder
COVERED_ELSEWHERE = {
    "tutorial.md": "tests/docs/test_tutorial.py runs them in a copy of docs/tutorial/",
    "views.md": "tests/docs/test_docs_views.py runs them and checks each picture is the one they make",
}

#: whole shell blocks that cannot run here, by (file, the block's first line): why
SKIPPED_BLOCKS = {
    ("README.md", "make run    # ppsim run scenarios/gpt.yaml, writing out/gpt.html (timeline) and out/gpt.trace.json "
                  "(Perfetto)"): "sets up .venv and runs the whole suite: what CI does before this test",
    ("calibration.md", "ppsim run <your-scenario.yaml> --comm async --save-trace predicted.json  # same stages, chunks, "
                       "micro-batches, schedule"):
        "a template for the reader's own profiled torch job (tests/trace/test_kineto.py compares real ones)",
    ("ppexec.md", "pip install torch==2.13.0"): "installs packages (make test does)",
    ("ppexec.md", "cat hostfile"): "a GPU cluster: DeepSpeed's launcher over ssh to the hosts of a hostfile",
    ("ppexec.md", "deepspeed --hostfile hostfile --no_local_rank --master_port <port> --module ppexec.worker "
                  "<shared>/runs/gpt"): "what ppexec runs on a cluster, shown",
    ("ppexec.md", "ppexec prepare <scenario.yaml> --out <shared>/runs/gpt          # nccl, --timeout 300"):
        "a GPU cluster (DeepSpeed's launcher)",
    ("ppexec.md", "# once, on any host (the folder must be shared):"): "a GPU cluster (torchrun on every node)",
    ("ppexec.md", "#!/bin/bash"): "a Slurm job script",
}

#: single commands that cannot run here, by (file, the start of the command): why
SKIPPED_COMMANDS = {
    ("README.md", ".venv/bin/ppsim compare <predicted.json> <traces>/"):
        "a template for someone's own torch profiler traces (tests/trace/test_kineto.py compares real ones)",
    ("tune.md", "ppsim tune scenarios/gpt.yaml --executor ray --ray-address <head-node>:6379"):
        "needs a running Ray cluster (tests/search/test_tune.py runs the Ray executor on a local one)",
}

#: runnable commands left out of CI for their time alone: (file, start of the command): why
TOO_LONG = {
    ("tune.md", "ppsim tune scenarios/megatron-gpt3-175b.yaml "):
        "searches 5,352 plans of GPT-3 175B on 1,024 GPUs for minutes (the output quoted next to it); "
        "tests/search/test_tune.py searches smaller spaces, bench/tune_speed.py times this one",
}

RUN_DOCS = [d for d in DOCS if commands(d) and d.name not in COVERED_ELSEWHERE]


@cache
def _in_the_repository() -> frozenset[str]:
    """Every file git tracks and every folder above one, relative to the root: what a fresh checkout has
    (not what earlier runs left in this working copy, such as out/ or runs/)."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return frozenset(files) | {str(parent) for f in files for parent in Path(f).parents if str(parent) != "."}


def _exists(base: Path, path: str) -> bool:
    return str((base / path).relative_to(ROOT)) in _in_the_repository()


def _block_skipped(cmd: Command) -> str | None:
    return SKIPPED_BLOCKS.get((cmd.doc, cmd.first_line))


def _skip_reason(cmd: Command) -> str | None:
    """Why ``cmd`` is not run, or None."""
    return _block_skipped(cmd) or next((why for (doc, start), why in {**SKIPPED_COMMANDS, **TOO_LONG}.items()
                                        if doc == cmd.doc and cmd.text.startswith(start)), None)


def test_every_doc_with_commands_is_run_here_or_elsewhere() -> None:
    with_commands = {d.name for d in DOCS if commands(d)}
    assert {"README.md", "ppexec.md", "calibration.md", "tune.md", "tui.md", "tutorial.md", "views.md"} <= with_commands
    assert set(COVERED_ELSEWHERE) <= with_commands
    for name, test in COVERED_ELSEWHERE.items():
        assert (ROOT / test.split()[0]).is_file(), f"{name}: {test}"


def test_every_listed_skip_names_a_command_of_the_docs() -> None:
    every = [c for d in DOCS for c in commands(d)]
    for doc, first in SKIPPED_BLOCKS:
        assert any(c.doc == doc and c.first_line == first for c in every), f"{doc} has no block starting {first!r}"
    for doc, start in (*SKIPPED_COMMANDS, *TOO_LONG):
        assert any(c.doc == doc and c.text.startswith(start) for c in every), f"{doc} has no command {start!r}"


def _listed(cmd: Command, table: dict[tuple[str, str], str]) -> bool:
    return any(doc == cmd.doc and cmd.text.startswith(start) for doc, start in table)


@pytest.mark.parametrize("doc", RUN_DOCS, ids=lambda d: d.name)
def test_commands_that_cannot_run_are_templates(doc: Path) -> None:
    """A skipped ppsim or ppexec command shows what to fill in; a command that runs shows nothing
    to fill in; any other program is not ours to run, and listed."""
    for cmd in commands(doc):
        skipped = bool(_block_skipped(cmd)) or _listed(cmd, SKIPPED_COMMANDS)
        if skipped and cmd.program in PROGRAMS:
            assert placeholders(cmd.text), f"{doc.name}: {cmd.text!r} is skipped but reads as a real command"
        if not skipped:
            assert cmd.program in PROGRAMS, f"{doc.name}: {cmd.text!r} is neither ppsim nor ppexec nor listed as skipped"
            assert not placeholders(cmd.text), f"{doc.name}: {cmd.text!r} has a placeholder but is not listed as skipped"


@pytest.mark.parametrize("doc", RUN_DOCS + [ROOT / "docs" / n for n in COVERED_ELSEWHERE], ids=lambda d: d.name)
def test_every_input_exists_or_an_earlier_command_wrote_it(doc: Path) -> None:
    """So no command reads a file before the doc says how to make it (README once opened
    ``predicted.json`` that only a later command wrote), nor writes into a folder nothing made."""
    base = ROOT / "docs" / "tutorial" if doc.name == "tutorial.md" else ROOT
    written: list[str] = []
    for cmd in commands(doc):
        if _block_skipped(cmd) or cmd.program not in PROGRAMS:
            continue
        if not _skip_reason(cmd):
            for path in cmd.inputs():
                p = path.rstrip("/")
                made = any(p == w or p.startswith(w.rstrip("/") + "/") for w in written)
                assert made or _exists(base, p), (f"{doc.name}: {cmd.text!r} reads {path}, which neither exists "
                                                     "nor was written by an earlier command")
            for path in cmd.output_files():
                folder = str(Path(path).parent)
                assert folder == "." or folder in written or _exists(base, folder), (
                    f"{doc.name}: {cmd.text!r} writes {path}, but no earlier command makes its folder {folder}")
        written += [w.rstrip("/") for w in cmd.outputs()]


@pytest.mark.slow  # runs every command: predictions, pages and PNGs, the tuner, ppexec's ranks
@pytest.mark.parametrize("doc", RUN_DOCS, ids=lambda d: d.name)
def test_every_command_runs_in_the_order_written(tmp_path: Path, doc: Path) -> None:
    cmds = [c for c in commands(doc) if not _skip_reason(c)]
    assert cmds, f"{doc.name}: nothing to run"
    if any(c.program == "ppexec" for c in cmds) and not all(importlib.util.find_spec(m) for m in ("torch", "deepspeed")):
        pytest.skip("ppexec's commands need torch and deepspeed (make test installs them)")
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    problems = []  # quoted outputs that differ: all of them reported at the end
    for cmd in cmds:
        code, output = run_command(cmd, tmp_path)
        assert code == 0, f"{doc.name}: {cmd.text}\n{output[-3000:]}"
        for out in cmd.outputs():
            assert (tmp_path / out).exists(), f"{doc.name}: {cmd.text!r} did not write {out}"
        problems += [p for q in quoted_for(cmd) if (p := check_quoted(q, code, output))]
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)
