"""The launcher's half of the heartbeats (the worker's: ``ppexec.worker.heartbeat``): it compares
each rank's beat count with what it read before, on its own clock (so hosts whose clocks disagree,
and file times on a shared filesystem, do not matter), and calls a rank hung when its count has not
changed for :func:`hang_limit_s` of the run's timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

from ppexec.worker.heartbeat import heartbeat_path

BLAME_SILENT_S = 3.0  #: when a peer reports a failure, a rank silent this long (or stopped) is named instead
FIRST_BEAT_GRACE_S = 30.0  #: a rank's first beat may come this late after its start (interpreter, imports)


def hang_limit_s(timeout_s: float) -> float:
    """Seconds without a beat after which a rank is hung: half the run's timeout, so a hung rank is
    named before its peers' waits on it time out, and at least 5 s (loading a large library can hold
    the interpreter for seconds). With a shorter timeout a peer's wait fails first, and the launcher
    still names the silent rank (:data:`BLAME_SILENT_S`)."""
    return max(5.0, timeout_s / 2)


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
