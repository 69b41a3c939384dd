"""Where ppexec writes, checked before any work: a path it can write (not too long, no symbolic-link
loop, a folder it may create files in), and run folders that never lose an earlier run's
measurements: a folder holding one is refused unless ``--force``, which replaces that run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ppsim.errors import PpsimError, file_error, shown_path

#: what a run writes at the top of its folder (``ppexec.results.collect.write_run_outputs``), besides run.json
RUN_OUTPUTS = ("trace.json", "trace.chrome.json", "summary.json", "plan.json")
RUN_SUBFOLDERS = ("ranks", "logs", "steps")


def _nearest_existing(path: Path, option: str) -> Path:
    """``path`` or its nearest ancestor that exists; an unusable path (too long, a link loop) is an error."""
    p = path
    while True:
        try:
            os.stat(p)
            return p
        except FileNotFoundError:
            if p.parent == p:
                return p
            p = p.parent
        except OSError as exc:  # a name too long, a symbolic-link loop, a file where a folder should be
            raise file_error(path, exc, writing=True, field=option) from None


def check_writable(path: Path, option: str, *, folder: bool) -> None:
    """Refuse, naming ``option``, a path ppexec could not write: a file (``folder=False``) or a folder
    whose files it writes (``folder=True``). Tries a temporary file where the first one would go."""
    base = _nearest_existing(path, option)
    if base == path and not folder:
        base = path.parent
    if not base.is_dir():
        raise PpsimError(f"cannot write {shown_path(path)}: {shown_path(base)} is a file, not a folder; choose another "
                         "path", field=option)
    try:
        fd, probe = tempfile.mkstemp(prefix=".ppexec-", suffix=".probe", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise file_error(path, exc, writing=True, field=option) from None


def holds_measurements(out: Path) -> bool:
    """Whether a run folder holds what a run measured: rank events, or the traces made of them."""
    ranks = out / "ranks"
    if ranks.is_dir() and any(p.stat().st_size > 0 for p in ranks.glob("rank-*.jsonl")):
        return True
    return any((out / name).exists() for name in RUN_OUTPUTS[:3]) or any((out / "steps").glob("*.json"))


def check_run_folder(out: Path, force: bool = False, option: str = "--out") -> None:
    """A run folder is new, empty, prepared but not run, or (with ``force``) an earlier run to replace."""
    check_writable(out, option, folder=True)
    if out.exists() and not out.is_dir():
        raise PpsimError(f"{shown_path(out)} exists and is not a folder; choose another {option}", field=option)
    if out.is_dir() and any(out.iterdir()) and not (out / "run.json").exists():
        raise PpsimError(f"{shown_path(out)} holds files that are not a ppexec run; choose an empty or new folder", field=option)
    if not force and out.is_dir() and holds_measurements(out):
        raise PpsimError(f"{shown_path(out)} holds an earlier run, whose measurements this run would replace; choose a new "
                         "folder, or pass --force to replace it", field=option)


def clear_run_folder(out: Path) -> None:
    """Remove an earlier run's files (its events, logs, traces), so none is read or shown as this run's."""
    for sub in RUN_SUBFOLDERS:
        (out / sub).mkdir(exist_ok=True)
        for old in (out / sub).iterdir():
            if old.is_file():
                old.unlink()
    for name in RUN_OUTPUTS:
        (out / name).unlink(missing_ok=True)


def check_runs_folder(top: Path, force: bool, option: str) -> None:
    """A folder of several runs (``run-0``, ``run-1`` ... of ``ppexec profile --keep-run``): new,
    empty, or (with ``force``) earlier runs to replace."""
    check_writable(top, option, folder=True)
    if top.exists() and not top.is_dir():
        raise PpsimError(f"{shown_path(top)} exists and is not a folder; choose another {option}", field=option)
    entries = list(top.iterdir()) if top.is_dir() else []
    foreign = sorted(p.name for p in entries if not (p.is_dir() and p.name.startswith("run-")))
    if foreign:
        raise PpsimError(f"{shown_path(top)} holds files that are not ppexec runs ({', '.join(foreign[:3])}); choose an empty "
                         "or new folder", field=option)
    for run in entries:
        check_run_folder(run, force, option)
