"""Signals to the launcher while its ranks run: SIGTERM (``kill``, ``timeout``, a job scheduler), SIGINT
(Ctrl-C) and SIGHUP (the terminal closed) end the run through its cleanup, which stops every rank
(its whole process group: SIGTERM, a short wait, SIGKILL), and the error says where the partial run is.

The handler only notes the signal; the launcher's watch loop acts on it within a tenth of a second,
so a signal never cuts the cleanup short. Further signals while the run stops are ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from ppsim.errors import PpsimError

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(PpsimError):
    """The launcher was told to stop; ``exit_code`` is 128 + the signal's number, the shell's
    convention (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), so a job scheduler or a script
    tells a stopped run from a failed one (1)."""

    def __init__(self, signum: int, run_dir: Path) -> None:
        name = signal.Signals(signum).name
        how = f"signal {name} (Ctrl-C)" if signum == signal.SIGINT else f"signal {name}"
        super().__init__(f"the run was stopped by {how}; every rank was stopped; the partial run is in {run_dir} "
                         "(events in ranks/, logs in logs/)")
        self.signum = signum
        self.exit_code = 128 + int(signum)


class StopSignals:
    """While inside, the handled signals are noted instead of acted on; :meth:`check` raises on one."""

    def __init__(self) -> None:
        self.received: int | None = None
        #: the handlers replaced: a function, SIG_DFL / SIG_IGN (ints), or None (one not set from Python)
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # handlers belong to the main thread
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, previous in self._previous.items():
            # None: a handler installed outside Python, which Python cannot put back; the default is the closest
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)

    def _note(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum

    def check(self, run_dir: Path) -> None:
        if self.received is not None:
            raise Interrupted(self.received, run_dir)
