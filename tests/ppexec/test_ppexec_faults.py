"""ppexec under faults and bad input (issue 21): a hung rank, signals to the launcher, an earlier run in
--out, a damaged run folder, an output path that cannot be written. Each ends with one error line
naming the rank, file or option, exit 1 (130 for Ctrl-C), no traceback, no file changed that was
there before, and no process left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import SCENARIOS
from ppexec.cli import app

TINY = SCENARIOS / "tiny-cpu.yaml"
runner = CliRunner()


# ----- what every case asserts ---------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> contents)."""
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error(output: str, *names: str) -> str:
    """The single ``error:`` line of ``output`` (at most 3 lines of message, no traceback), naming ``names``."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    start = output.splitlines().index(lines[0])
    assert len([x for x in output.splitlines()[start:] if x.strip()]) <= 3, output
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def processes_of(run_dir: Path, pids: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Live processes of a run: those whose command line names ``run_dir``, those in ``pids``, and any
    in the sessions those lead (each rank leads its own)."""
    found = []
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with deepspeed
        psutil = None
    if psutil is not None:
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if proc.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                mine = str(run_dir) in " ".join(proc.info["cmdline"] or [])
                if mine or proc.pid in pids or os.getsid(proc.pid) in pids:
                    found.append(proc.pid)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return found
    for entry in Path("/proc").iterdir():  # pragma: no cover - without psutil
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            pid = int(entry.name)
            if state != "Z" and (str(run_dir) in cmdline or pid in pids or os.getsid(pid) in pids):
                found.append(pid)
        except (OSError, IndexError):
            continue
    return found


def no_process_left(run_dir: Path, pids: set[int] = frozenset(), within_s: float = 5.0) -> None:  # type: ignore[assignment]
    deadline = time.monotonic() + within_s
    while processes_of(run_dir, pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of(run_dir, pids) == [], f"processes of {run_dir} left behind"


# ----- folders made without running ranks ------------------------------------------------------------
@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder `ppexec prepare` wrote (run.json; no rank has run)."""
    out = tmp_path_factory.mktemp("prepared") / "run"
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(out), "--backend", "gloo", "--steps", "1",
                              "--warmup", "0"])
    assert res.exit_code == 0, res.output
    return out


def earlier_run(prepared: Path, where: Path) -> Path:
    """A copy of the prepared folder with an earlier run's measurements in it."""
    shutil.copytree(prepared, where)
    (where / "ranks" / "rank-0.jsonl").write_text('{"type": "done", "rank": 0}\n')
    (where / "trace.json").write_text('{"measured": "keep me"}')
    return where


@pytest.mark.parametrize("command", ["run", "prepare"])
def test_an_earlier_run_in_out_is_refused_without_force(prepared: Path, tmp_path: Path, command: str) -> None:
    out = earlier_run(prepared, tmp_path / "earlier")
    before = snapshot(out)
    extra = ["--backend", "gloo"] if command == "prepare" else []
    res = runner.invoke(app, [command, str(TINY), "--out", str(out), *extra])
    assert res.exit_code == 1, res.output
    one_error(res.output, "--out", str(out), "earlier run", "--force")
    assert snapshot(out) == before
    no_process_left(out)


def test_force_replaces_the_earlier_run_and_only_it(prepared: Path, tmp_path: Path) -> None:
    out = earlier_run(prepared, tmp_path / "earlier")
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(out), "--backend", "gloo", "--force"])
    assert res.exit_code == 0, res.output
    assert not (out / "trace.json").exists() and not any((out / "ranks").iterdir())


def test_a_prepared_folder_that_never_ran_is_prepared_again(prepared: Path, tmp_path: Path) -> None:
    out = shutil.copytree(prepared, tmp_path / "again")
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(out), "--backend", "gloo", "--steps", "2"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "run.json").read_text())["steps"] == 2


def test_validate_refuses_an_earlier_validation_without_force(tmp_path: Path) -> None:
    out = tmp_path / "validation"
    out.mkdir()
    (out / "comparison.json").write_text('{"earlier": true}')
    before = snapshot(out)
    res = runner.invoke(app, ["validate", str(TINY), "--out", str(out)])
    assert res.exit_code == 1, res.output
    one_error(res.output, "--out", "earlier validation", "--force")
    assert snapshot(out) == before


def test_profile_refuses_earlier_runs_in_keep_run_without_force(prepared: Path, tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    earlier_run(prepared, keep / "run-0")
    before = snapshot(keep)
    res = runner.invoke(app, ["profile", str(TINY), "--out", str(tmp_path / "p.yaml"), "--keep-run", str(keep)])
    assert res.exit_code == 1, res.output
    one_error(res.output, "--keep-run", "earlier run", "--force")
    assert snapshot(keep) == before and not (tmp_path / "p.yaml").exists()


# ----- ppexec collect on a damaged or foreign run folder -------------------------------------------
READY = {"type": "ready", "rank": 0, "pipe_rank": 0, "replica": 0, "tp_rank": 0, "host": "h", "clock_ns": 0,
         "pid": 1, "backend": "gloo", "runtime": "deepspeed"}


def _lines(*events: dict) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


@pytest.mark.parametrize("name, damage, says", [
    ("truncated run.json", lambda d: (d / "run.json").write_text((d / "run.json").read_text()[:500]),
     ["run.json", "not valid JSON"]),
    ("a JSON list", lambda d: (d / "run.json").write_text("[1, 2, 3]"), ["run.json", "not a ppexec run description"]),
    ("another format", lambda d: (d / "run.json").write_text('{"format": "ppsim-plan"}'),
     ["run.json", "not a ppexec run description"]),
    ("fields missing", lambda d: (d / "run.json").write_text('{"format": "ppexec-run", "steps": "three"}'),
     ["run.json", "steps (str)", "world_size (missing)"]),
    ("a garbage event line", lambda d: (d / "ranks" / "rank-0.jsonl").write_text("\x00garbage{{\n"),
     ["rank-0.jsonl", "line 1", "not a ppexec event"]),
    ("an event of the wrong shape", lambda d: (d / "ranks" / "rank-1.jsonl").write_text(
        _lines(READY, {"type": "step", "step": "first", "loss": None, "spans": 7})),
     ["rank-1.jsonl", "line 2", "step (str)", "spans (int)"]),
    ("too few steps", lambda d: [(d / "ranks" / f"rank-{r}.jsonl").write_text(
        _lines({**READY, "rank": r, "pipe_rank": r}, {"type": "done", "rank": r})) for r in (0, 1)],
     ["rank-0.jsonl", "records 0 steps"]),
    ("actions of another plan", lambda d: [(d / "ranks" / f"rank-{r}.jsonl").write_text(_lines(
        {**READY, "rank": r, "pipe_rank": r}, {"type": "step", "step": 0, "loss": 1.0, "spans": [["7F9", 0, 1]]},
        {"type": "done", "rank": r})) for r in (0, 1)],
     ["rank-0.jsonl", "'7F9'", "not this run's"]),
])
def test_collect_names_the_damaged_file(prepared: Path, tmp_path: Path, name: str, damage, says: list[str]) -> None:
    out = shutil.copytree(prepared, tmp_path / "run")
    damage(out)
    before = snapshot(out)
    res = runner.invoke(app, ["collect", str(out)])
    assert res.exit_code == 1, res.output
    one_error(res.output, *says)
    assert snapshot(out) == before


# ----- output paths that cannot be written -----------------------------------------------------------
def _bad_paths(tmp_path: Path) -> dict[str, Path]:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    (tmp_path / "a-file").write_text("keep me")
    return {
        "unwritable": Path("/sys/ppexec-test/out"),  # sysfs takes no new files, not even from root
        "symlink loop": loop / "out",
        "300 characters": tmp_path / ("x" * 300),
        "under a file": tmp_path / "a-file" / "out",
    }


@pytest.mark.parametrize("case", ["unwritable", "symlink loop", "300 characters", "under a file"])
@pytest.mark.parametrize("command", ["run", "profile"])
def test_an_output_path_that_cannot_be_written_is_one_line(tmp_path: Path, command: str, case: str) -> None:
    path = _bad_paths(tmp_path)[case]
    if command == "profile":  # a file: in the folder that cannot take it
        path = path.parent / "profile.yaml" if case != "300 characters" else path.with_suffix(".yaml")
    before = snapshot(tmp_path)
    res = runner.invoke(app, [command, str(TINY), "--out", str(path)])
    assert res.exit_code == 1, res.output
    one_error(res.output, "--out", "cannot write" if command == "run" else "")
    assert snapshot(tmp_path) == before
    assert not Path("/sys/ppexec-test").exists()


# ----- real runs: a hung rank, signals to the launcher -------------------------------------------------
def _launch(out: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ppexec.cli", "run", str(TINY), "--out", str(out), "--steps", "500", "--warmup", "0",
           "--runtime", "torch", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _pids_once_stepping(out: Path, launcher: subprocess.Popen[str], timeout_s: float = 120) -> dict[int, int]:
    """Rank -> pid, once every rank has recorded a step."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert launcher.poll() is None, launcher.communicate()
        pids, stepping = {}, 0
        for path in (out / "ranks").glob("rank-*.jsonl"):
            events = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
            pids.update({e["rank"]: e["pid"] for e in events if e["type"] == "ready"})
            stepping += any(e["type"] == "step" for e in events)
        if stepping == 2 and len(pids) == 2:
            return pids
        time.sleep(0.2)
    raise AssertionError("the ranks did not start stepping")


@pytest.mark.slow  # starts ranks (about 10 s)
def test_a_stopped_rank_is_named_within_the_timeout_and_every_process_ends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    launcher = _launch(out, "--timeout", "10")
    pids = _pids_once_stepping(out, launcher)
    os.kill(pids[1], signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _, stderr = launcher.communicate(timeout=30)
    finally:
        for pid in pids.values():  # should the test fail, leave nothing behind
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    assert time.monotonic() - stopped < 10 + 5, "not ended within the timeout and a few seconds"
    assert launcher.returncode == 1, stderr
    line = one_error(stderr, "rank 1 stopped making progress", "no heartbeat", "stopped (SIGSTOP", str(out))
    assert "rank 0" not in line
    no_process_left(out, set(pids.values()))


@pytest.mark.slow  # starts ranks (about 8 s each)
@pytest.mark.parametrize("sig, code, says", [
    (signal.SIGINT, 130, "stopped by signal SIGINT (Ctrl-C)"),
    (signal.SIGTERM, 143, "stopped by signal SIGTERM"),
    (signal.SIGHUP, 129, "stopped by signal SIGHUP"),
])
def test_a_signal_to_the_launcher_stops_every_rank_and_says_where_the_run_is(
        tmp_path: Path, sig: int, code: int, says: str) -> None:
    out = tmp_path / "run"
    launcher = _launch(out)
    pids = _pids_once_stepping(out, launcher)
    launcher.send_signal(sig)
    _, stderr = launcher.communicate(timeout=20)
    assert launcher.returncode == code, stderr
    one_error(stderr, says, f"the partial run is in {out}")
    assert any(json.loads(line)["type"] == "step" for line in (out / "ranks" / "rank-0.jsonl").read_text().splitlines())
    no_process_left(out, set(pids.values()), within_s=1.0)


@pytest.mark.slow  # starts ranks (about 8 s)
def test_ranks_end_themselves_when_the_launcher_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    launcher = _launch(out)
    pids = _pids_once_stepping(out, launcher)
    launcher.kill()  # SIGKILL: no cleanup runs in the launcher
    launcher.communicate(timeout=10)
    no_process_left(out, set(pids.values()), within_s=5.0)


@pytest.mark.slow  # starts ranks (about 8 s each)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_rank_ended_by_a_signal_is_named_and_every_process_ends(tmp_path: Path, sig: int) -> None:
    """A rank ended from outside (the OOM killer, a scheduler) stops the run: exit 1, the message
    names that rank and where the partial run is, and no process of the run is left."""
    out = tmp_path / "run"
    launcher = _launch(out, "--timeout", "10")
    pids = _pids_once_stepping(out, launcher)
    os.kill(pids[1], sig)
    ended = time.monotonic()
    _, stderr = launcher.communicate(timeout=30)
    assert time.monotonic() - ended < 10 + 5, "not ended within the timeout and a few seconds"
    assert launcher.returncode == 1, stderr
    line = one_error(stderr, "rank 1", str(out))
    assert "rank 0 " not in line.split("rank 1", 1)[0], line  # the ended rank is the one blamed
    no_process_left(out, set(pids.values()))


def test_a_handler_python_did_not_install_is_restored_as_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """signal.signal returns None for a handler installed outside Python; leaving the block must not
    pass None back (signal.signal refuses it): the default handler goes back instead."""
    import signal

    from ppexec.launch.signals import StopSignals

    real = signal.signal
    calls: list[tuple[int, object]] = []

    def fake(sig: int, handler: object) -> object:
        calls.append((sig, handler))
        previous = real(sig, handler)  # raises TypeError on None, as the real one does
        return None if sig == signal.SIGTERM else previous  # as if SIGTERM's handler was not Python's

    monkeypatch.setattr(signal, "signal", fake)
    with StopSignals():
        pass
    assert (signal.SIGTERM, signal.SIG_DFL) in calls
