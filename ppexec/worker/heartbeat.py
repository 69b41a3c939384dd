"""A rank's heartbeat: how the launcher tells a rank that stopped making progress from one that waits.

Every worker starts a background thread that rewrites ``RUN_DIR/ranks/rank-R.heartbeat.json`` with a
growing count every :data:`BEAT_S` seconds. A rank that is stopped (SIGSTOP, a debugger) or stuck
in native code holding the interpreter stops beating; a rank that waits on a peer keeps beating.
The launcher's half, which reads the beats and names a rank hung, is ``ppexec.launch.pulse``.

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


def heartbeat_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "ranks" / f"rank-{rank}.heartbeat.json"


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
