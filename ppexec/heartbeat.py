"""Heartbeats: how the launcher tells a rank that stopped making progress from one that waits.

Every worker starts a background thread that rewrites ``RUN_DIR/ranks/rank-R.heartbeat.json`` with a
growing count every :data:`BEAT_S` seconds. A rank that is stopped (SIGSTOP, a debugger) or stuck
in native code holding the interpreter stops beating; a rank that waits on a peer keeps beating.
The launcher compares what it reads with what it read before, on its own clock (so hosts whose
clocks disagree, and file times on a shared filesystem, do not matter), and calls a rank hung when
its count has not changed for :func:`hang_limit_s` of the run's timeout.

Started by ppexec's local launcher (``PPEXEC_LAUNCHER_PID`` set), the thread also ends the rank's
process group when the launcher is gone (killed with SIGKILL, say), so no rank outlives its launcher.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

BEAT_S = 0.25  #: seconds between two beats of a rank
LAUNCHER_ENV = "PPEXEC_LAUNCHER_PID"  #: set by the local launcher: the pid the worker's parent must stay
BLAME_SILENT_S = 3.0  #: when a peer reports a failure, a rank silent this long (or stopped) is named instead
FIRST_BEAT_GRACE_S = 30.0  #: a rank's first beat may come this late after its start (interpreter, imports)


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "ranks" / f"rank-{rank}.heartbeat.json"


def hang_limit_s(timeout_s: float) -> float:
    """Seconds without a beat after which a rank is hung: half the run's timeout, so a hung rank is
    named before its peers' waits on it time out, and at least 5 s (loading a large library can hold
    the interpreter for seconds). With a shorter timeout a peer's wait fails first, and the launcher
    still names the silent rank (:data:`BLAME_SILENT_S`)."""
    return max(5.0, timeout_s / 2)


def start_beating(run_dir: Path, rank: int) -> threading.Thread:
    """Start the worker's heartbeat thread (a daemon: it ends with the process)."""
    path = heartbeat_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    launcher = os.environ.get(LAUNCHER_ENV)
    thread = threading.Thread(target=_beat, args=(path, int(launcher) if launcher else None),
                              name="ppexec-heartbeat", daemon=True)
    thread.start()
    return thread


def _beat(path: Path, launcher_pid: int | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    count = 0
    while True:
        if launcher_pid is not None and os.getppid() != launcher_pid:
            _end_own_group()
        count += 1
        try:
            os.pwrite(fd, f'{{"beat": {count}}}\n'.encode(), 0)  # the text only grows: no stale tail
        except OSError:  # a full disk: the launcher will see the silence, and say so
            pass
        time.sleep(BEAT_S)


def _end_own_group() -> None:
    """The launcher is gone: end this rank and whatever it started (its process group)."""
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(1)


class Pulse:
    """The launcher's view of every rank's heartbeat: when, on the launcher's clock, each last changed."""

    def __init__(self, run_dir: Path, world: int) -> None:
        now = time.monotonic()
        self.paths = [heartbeat_path(run_dir, r) for r in range(world)]
        self.seen: list[bytes | None] = [None] * world
        self.changed = [now] * world  #: before the first beat: the rank's start

    def read(self) -> None:
        now = time.monotonic()
        for r, path in enumerate(self.paths):
            try:
                text = path.read_bytes()
            except OSError:
                continue
            if text and text != self.seen[r]:
                self.seen[r], self.changed[r] = text, now

    def silent_s(self, rank: int) -> float:
        """Seconds since rank's heartbeat last changed (since its start, before its first beat)."""
        return time.monotonic() - self.changed[rank]

    def hung(self, limit_s: float, ranks: list[int]) -> list[int]:
        """Which of ``ranks`` have not beaten for ``limit_s`` (before a first beat: for the start's grace too)."""
        return [r for r in ranks
                if self.silent_s(r) > (limit_s if self.seen[r] is not None else max(limit_s, FIRST_BEAT_GRACE_S))]


def process_state(pid: int | None) -> str | None:
    """Linux's one-letter state of a process ('T': stopped), or None where it cannot be read."""
    if pid is None or pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:][:1] or None
