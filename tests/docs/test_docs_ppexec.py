"""docs/ppexec.md stays in step with the ppexec CLI, the files a run writes and the schedules that run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

from conftest import ROOT, SCENARIOS, table_rows
from ppexec.cli import app
from ppsim.errors import PpsimError

DOC = ROOT / "docs" / "ppexec.md"
PPEXEC = ROOT / "ppexec"

#: run-folder entries a local `ppexec run` does not write (other launcher, Python API only)
NOT_IN_A_LOCAL_RUN = {"logs/launcher.log", "ranks/params-R.pt"}


@pytest.fixture(scope="module")
def doc() -> str:
    assert DOC.is_file(), f"{DOC} is missing"
    return DOC.read_text(encoding="utf-8")


def _commands() -> dict[str, Any]:
    """The click commands of the ``ppexec`` app (typer 0.29 vendors click, so this is duck-typed)."""
    group = typer.main.get_command(app)
    commands = getattr(group, "commands", None)
    assert isinstance(commands, dict), "ppexec's typer app is not a group of commands"
    return dict(commands)


def _section(doc: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading of its level or above."""
    lines = doc.splitlines()
    assert heading in lines, f"{DOC.name} has no heading {heading!r}"
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    body = []
    in_code = False
    for line in lines[start + 1:]:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            hashes = len(line) - len(line.lstrip("#"))
            if hashes <= level:
                break
        body.append(line)
    return "\n".join(body)


def _table_rows(text: str) -> list[list[str]]:
    """Cells of every table row whose first cell is code (skips headers and separators)."""
    return [cells for cells in table_rows(text) if cells and cells[0].startswith("`")]


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option" and "--help" not in p.opts]


def _documented_default(param: Any) -> str | None:
    """How the option table must show the default; None where it shows no fixed value."""
    if param.required:
        return "required"
    if param.default is None:
        return None
    if param.default is False:
        return "off"
    if param.default is True:  # a --x / --no-x pair, on unless turned off
        return "on"
    if isinstance(param.default, float) and param.default.is_integer():
        return str(int(param.default))
    return str(param.default)


# --- commands and options -------------------------------------------------------------------------


def test_the_cli_has_the_commands_this_test_expects() -> None:
    # guards the parametrisation below: an empty or renamed command list must not pass silently
    assert {"run", "prepare", "collect"} <= set(_commands())


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_has_a_section(doc: str, name: str) -> None:
    assert f"ppexec {name}" in doc
    _section(doc, f"#### `ppexec {name}`")  # fails if the heading is missing


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_is_in_its_commands_table_with_its_default(doc: str, name: str) -> None:
    cmd = _commands()[name]
    rows = _table_rows(_section(doc, f"#### `ppexec {name}`"))
    by_option = {r[0].strip("`").split()[0]: r for r in rows if r[0].strip("`").startswith("--")}
    options = _options(cmd)
    assert options, f"ppexec {name} has no options"
    for param in options:
        opt = param.opts[0]
        assert opt in by_option, f"ppexec {name} {opt} has no row in its option table in {DOC.name}"
        want = _documented_default(param)
        if want is not None:
            got = by_option[opt][1]
            assert got == want, f"ppexec {name} {opt}: the doc says default {got!r}, the CLI has {want!r}"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_documented_option_exists(doc: str, name: str) -> None:
    real = {o for p in _options(_commands()[name]) for o in p.opts}
    rows = _table_rows(_section(doc, f"#### `ppexec {name}`"))
    documented = {r[0].strip("`").split()[0] for r in rows if r[0].strip("`").startswith("--")}
    assert documented, f"no option table under ppexec {name}"
    assert documented <= real, f"ppexec {name} has no options {sorted(documented - real)}"


# --- the run folder -------------------------------------------------------------------------------


def _documented_paths(doc: str) -> list[str]:
    rows = _table_rows(_section(doc, "### The run folder"))
    paths = [r[0].strip("`") for r in rows]
    assert paths, "no run-folder table"
    return paths


def _placeholder(name: str) -> str:
    """``step-K.trace.json`` / ``step-{k}.trace.json`` -> ``step-N.trace.json``."""
    return re.sub(r"\{[^}]*\}|(?<=-)[KR](?=\.)", "N", name)


def _pattern(path: str) -> re.Pattern[str]:
    parts = re.split(r"(?<=-)[KR](?=\.)", path)
    return re.compile(r"\d+".join(re.escape(p) for p in parts))


def test_run_folder_names_match_the_files_the_code_writes(doc: str) -> None:
    # every file-name literal in ppexec's sources (run.json, f"step-{k}.trace.json", "launcher.log" ...)
    literal = re.compile(r"""[rf]?(["'])([\w{}.-]+\.(?:json|jsonl|log|pt))\1""")
    in_code = {
        _placeholder(m.group(2))
        for src in sorted(PPEXEC.rglob("*.py"))
        if src.name != "prediction_check.py"  # writes a validation folder around a run folder (checked below)
        and src.parent.name != "rank"  # ppexec rank writes its traces to a folder of its own (checked below)
        for m in literal.finditer(src.read_text(encoding="utf-8"))
    }
    assert {"trace.json", "run.json", "rank-N.jsonl"} <= in_code, "the scan of ppexec's sources found too little"
    in_doc = {_placeholder(Path(p).name) for p in _documented_paths(doc)}
    assert in_doc == in_code, (f"undocumented: {sorted(in_code - in_doc)}; "
                               f"documented but never written: {sorted(in_doc - in_code)}")


def test_the_rank_files_are_in_the_rank_section(doc: str) -> None:
    code = (PPEXEC / "rank" / "command.py").read_text(encoding="utf-8")
    assert 'f"rank{r}.{side}.json"' in code and '("measured", "predicted")' in code
    section = _section(doc, "#### `ppexec rank`")
    assert "`rankR.measured.json`" in section and "`rankR.predicted.json`" in section


def test_validation_files_are_in_the_validate_section(doc: str) -> None:
    literal = re.compile(r"""(["'])([\w.-]+\.(?:json|html|yaml))\1""")
    sources = ((PPEXEC / "results" / "prediction_check.py").read_text(encoding="utf-8")
               + (PPEXEC / "cli.py").read_text(encoding="utf-8"))
    written = {m.group(2) for m in literal.finditer(sources)}
    assert {"predicted.trace.json", "comparison.json", "comparison.html", "profile.yaml"} <= written
    section = _section(doc, "#### `ppexec validate`")
    missing = sorted(name for name in written if f"`{name}`" not in section)
    assert not missing, f"files `ppexec validate` writes but its section does not name: {missing}"


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    out = tmp_path_factory.mktemp("docrun") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ppexec.cli", "run", str(SCENARIOS / "tiny-cpu.yaml"), "--out", str(out),
         "--steps", "2", "--warmup", "0", "--timeout", "30"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.mark.slow  # starts ranks
def test_run_folder_table_matches_a_real_run(doc: str, local_run: Path) -> None:
    paths = _documented_paths(doc)
    assert NOT_IN_A_LOCAL_RUN <= set(paths), f"{sorted(NOT_IN_A_LOCAL_RUN - set(paths))} not documented"
    written = sorted(p.relative_to(local_run).as_posix() for p in local_run.rglob("*") if p.is_file())
    patterns = {path: _pattern(path) for path in paths}
    unexplained = [f for f in written if not any(pat.fullmatch(f) for pat in patterns.values())]
    assert not unexplained, f"a run writes files the doc does not list: {unexplained}"
    missing = [path for path, pat in patterns.items()
               if path not in NOT_IN_A_LOCAL_RUN and not any(pat.fullmatch(f) for f in written)]
    assert not missing, f"the doc lists files a local run did not write: {missing}"
    # two recorded steps, two ranks (tiny-cpu: 2 stages x 1 replica)
    assert {"steps/step-0.trace.json", "steps/step-1.trace.json", "ranks/rank-1.jsonl", "logs/rank-1.log"} <= set(written)


# --- schedules, deadline, worker environment ------------------------------------------------------


def test_schedule_table_matches_what_each_runtime_runs(doc: str) -> None:
    from ppexec.launch.prepare import prepare
    from ppsim.inputs.scenario import load
    from ppsim.plan.schedules import NAMES, describe

    rows = _table_rows(_section(doc, "## Which schedules run, and where"))
    table = {r[0].strip("`"): {"deepspeed": r[1], "torch": r[2]} for r in rows}
    assert set(table) == set(NAMES), f"schedule table {sorted(table)} != every name {sorted(NAMES)}"
    tiny = load(SCENARIOS / "tiny-cpu.yaml")
    for name, by_runtime in table.items():
        s = tiny.with_overrides(schedule=name, chunks=describe(name).chunks.default)
        for runtime, runs in by_runtime.items():
            assert runs in ("yes", "refused"), (name, runtime, runs)
            if runs == "yes":
                assert prepare(s, runtime=runtime).runtime == runtime
            else:
                with pytest.raises(PpsimError, match="--runtime|pipeline.schedule"):
                    prepare(s, runtime=runtime)
        auto = next((r for r in ("deepspeed", "torch") if by_runtime[r] == "yes"), None)
        if auto:
            assert prepare(s).runtime == auto, f"auto runs {name} in {auto}"


def test_documented_deadline_is_the_code_s(doc: str) -> None:
    from ppexec.launch.prepare import RunOptions, deadline_s

    defaults = {p.name: p.default for p in _commands()["run"].params}
    opts = RunOptions(out=Path("."), steps=defaults["steps"], warmup=defaults["warmup"], timeout_s=defaults["timeout"])
    assert "`120 + 2 x timeout + 30 x (steps + warmup)`" in doc
    assert f"({deadline_s(opts):.0f} s with the defaults)" in doc
    for steps, warmup, timeout in ((1, 0, 1.0), (7, 3, 45.0)):
        o = RunOptions(out=Path("."), steps=steps, warmup=warmup, timeout_s=timeout)
        assert deadline_s(o) == 120 + 2 * timeout + 30 * (steps + warmup)


def test_worker_environment_is_documented(doc: str) -> None:
    src = (PPEXEC / "worker" / "rank.py").read_text(encoding="utf-8")
    read = set(re.findall(r"""_env_int\(["'](\w+)["']""", src))
    assert {"RANK", "WORLD_SIZE"} <= read, read
    section = _section(doc, "## On a GPU cluster")
    for var in sorted(read | {"MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"}):
        assert f"`{var}`" in section, f"{var} is not documented under 'On a GPU cluster'"
    blocks = re.findall(r"```sh\n(.*?)```", _section(doc, "### On Slurm"), flags=re.S)
    script = next((b for b in blocks if "#SBATCH" in b), None)
    assert script is not None, "no sbatch script under 'On Slurm'"
    for piece in ("srun ", "RANK=$SLURM_PROCID", "WORLD_SIZE=$SLURM_NTASKS", "LOCAL_RANK=$SLURM_LOCALID",
                  'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)', "MASTER_PORT=",
                  "ppexec prepare ", "python -m ppexec.worker ", "ppexec collect "):
        assert piece in script, f"the Slurm script lacks {piece!r}"
    # prepare, then the ranks, then collect
    assert script.index("ppexec prepare") < script.index("srun ") < script.index("ppexec collect")
