"""Watch the ranks of a run, whoever started them, and stop them: follow their event files and
heartbeats, stop every rank on the first fault, and name the rank at fault.

Faults: when a rank fails, the others are stopped at once and the error names the rank and the
action it was in; a rank whose heartbeat stops (``ppexec.launch.pulse``: stopped, or stuck) is named
as hung within half the timeout; when the run outlives its deadline, every rank is stopped and the
error names where each was; SIGTERM, SIGINT or SIGHUP to the launcher stop the run
(``ppexec.launch.signals``). No process is left behind (each rank's process group gets SIGTERM, then
SIGKILL), and everything recorded so far stays in the run folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ppexec.launch.pulse import BLAME_SILENT_S, Pulse, process_state
from ppexec.launch.signals import StopSignals
from ppexec.worker.events import RankState, read_events
from ppsim.errors import PpsimError

STOP_GRACE_S = 3.0  #: seconds a stopped rank's process group has between SIGTERM and SIGKILL


class RunFailed(PpsimError):
    """A rank crashed, deadlocked or the run timed out."""


def _where(st: RankState) -> str:
    if st.error and st.error.action:
        return f"in action {st.error.action}"
    if st.steps:
        last = st.steps[-1].spans[-1][0] if st.steps[-1].spans else "?"
        return f"after step {st.steps[-1].step} (last action {last})"
    return "before its first recorded step"


def stop_processes(procs: list[subprocess.Popen[bytes]], grace_s: float = STOP_GRACE_S) -> None:
    """End every process group of the run that still runs: SIGTERM (with SIGCONT, so a stopped
    process gets it), then, once its leader has exited or after ``grace_s``, SIGKILL to the group
    (whatever a rank started goes with it) before the leader is reaped."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        _signal_group(proc.pid, signal.SIGTERM)
        _signal_group(proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    for proc in running:
        if _wait_unreaped(proc.pid, deadline):  # the unreaped leader keeps its group id from reuse
            _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    for proc in procs:
        proc.wait()


def _wait_unreaped(pid: int, deadline: float) -> bool:
    """Wait until child ``pid`` exits (without reaping it) or until ``deadline``; False if it is no
    child of ours any more (reaped elsewhere: its group id may be another's now)."""
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return False
        time.sleep(0.05)
    return True


def _signal_group(pgid: int, sig: int) -> None:
    if pgid <= 0:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(procs: list[subprocess.Popen[bytes]], run_dir: Path, world: int, deadline_s: float,
          on_progress: Callable[[list[RankState]], None] | None, *, per_rank: bool, hang_limit_s: float | None = None,
          signals: StopSignals | None = None) -> list[RankState]:
    """Follow the ranks' event files until every rank is done; stop everything on the first fault:
    a failed rank, a rank whose heartbeat is silent for ``hang_limit_s`` (None: not watched), the
    deadline, or a signal to the launcher."""
    states = [RankState(r) for r in range(world)]
    pulse = Pulse(run_dir, world)
    start = time.monotonic()
    while True:
        time.sleep(0.1)
        if signals is not None:
            signals.check(run_dir)
        read_events(run_dir, states)
        pulse.read()
        if on_progress:
            on_progress(states)
        codes = [p.poll() for p in procs]
        reported = [st.rank for st in states if st.error]
        failed = _failed(codes, states) if per_rank else []
        launcher_failed = not per_rank and codes[0] not in (None, 0) and not all(st.done for st in states)
        if failed or reported or launcher_failed:
            # let the failing rank's last line land; a killed rank closes its sockets (its peers report
            # the lost connection) a moment before it can be reaped, so look at the exit codes again
            time.sleep(0.3)
            read_events(run_dir, states)
            pulse.read()
            codes = [p.poll() for p in procs]
            failed = _failed(codes, states) if per_rank else []
            launcher_failed = not per_rank and codes[0] not in (None, 0) and not all(st.done for st in states)
            if not (failed or reported or launcher_failed):
                continue  # the exit was a finished rank's teardown
            running = _running(states, codes, per_rank)
            silent = [r for r in running if _stopped(states[r], procs, per_rank)
                      or (pulse.seen[r] is not None and pulse.silent_s(r) > BLAME_SILENT_S)]
            states_of = {r: process_state(_pid(states[r], procs, per_rank)) for r in silent}
            stop_processes(procs)
            if silent:  # a peer's wait on a hung rank timed out: name the hung one
                raise RunFailed(_hung_message(run_dir, states, pulse, silent, states_of))
            if launcher_failed and not any(st.error for st in states):
                raise RunFailed(f"the launcher exited with code {codes[0]} before any rank reported an error; "
                                f"see {run_dir / 'logs' / 'launcher.log'}")
            raise RunFailed(_failure_message(run_dir, states, failed, codes))
        if all(st.done for st in states) and (not per_rank or all(c is not None for c in codes)):
            return states
        if all(c is not None for c in codes):
            read_events(run_dir, states)
            if all(st.done for st in states):
                return states
            missing = [st.rank for st in states if not st.done]
            raise RunFailed(f"the launcher ended but ranks {missing} never finished; logs in {run_dir / 'logs'}")
        hung = pulse.hung(hang_limit_s, _running(states, codes, per_rank)) if hang_limit_s is not None else []
        if hung:
            states_of = {r: process_state(_pid(states[r], procs, per_rank)) for r in hung}
            stop_processes(procs)
            read_events(run_dir, states)
            raise RunFailed(_hung_message(run_dir, states, pulse, hung, states_of))
        if time.monotonic() - start > deadline_s:
            stop_processes(procs)
            read_events(run_dir, states)
            where = "; ".join(f"rank {st.rank} {_where(st)}" for st in states if not st.done)
            raise RunFailed(f"the run did not finish within {deadline_s:.0f} s and was stopped: {where}; "
                            f"logs in {run_dir / 'logs'}")


def _pid(st: RankState, procs: list[subprocess.Popen[bytes]], per_rank: bool) -> int | None:
    """The rank's process id on this host (None: unknown, or on another host)."""
    if per_rank:
        return procs[st.rank].pid
    if st.ready and st.ready.host == socket.gethostname():
        return st.ready.pid
    return None


def _running(states: list[RankState], codes: list[int | None], per_rank: bool) -> list[int]:
    """Ranks not done whose process still runs (as far as the launcher can tell)."""
    return [st.rank for st in states if not st.done and (not per_rank or codes[st.rank] is None)]


def _stopped(st: RankState, procs: list[subprocess.Popen[bytes]], per_rank: bool) -> bool:
    return process_state(_pid(st, procs, per_rank)) in ("T", "t")


def _hung_message(run_dir: Path, states: list[RankState], pulse: Pulse, hung: list[int],
                  process_states: dict[int, str | None]) -> str:
    def log_of(rank: int) -> Path:
        own = run_dir / "logs" / f"rank-{rank}.log"
        return own if own.exists() else run_dir / "logs" / "launcher.log"

    r = hung[0]
    others = f" (ranks {', '.join(map(str, hung[1:]))} too)" if len(hung) > 1 else ""
    why = ("its process was stopped (SIGSTOP, or a debugger)" if process_states.get(r) in ("T", "t")
           else "stuck outside Python, or starved of CPU")
    return (f"rank {r} stopped making progress {_where(states[r])}: no heartbeat for {pulse.silent_s(r):.1f} s, "
            f"{why}{others}; every process of the run was stopped; log: {log_of(r)}; the partial run is in {run_dir}")


def teardown_notes(states: list[RankState]) -> list[str]:
    """One line per rank that faulted after recording everything (the run itself is complete)."""
    out = []
    for st in states:
        if st.teardown_code is not None:
            out.append(f"rank {st.rank} exited with code {st.teardown_code} in its teardown, after recording "
                       "everything; the run is complete")
        elif st.teardown_error is not None:
            out.append(f"rank {st.rank} reported after recording everything: {st.teardown_error.error}")
    return out


def _failed(codes: list[int | None], states: list[RankState]) -> list[int]:
    """Ranks that exited non-zero before finishing. A rank that wrote "done" has recorded all it
    measured: a crash after that (gloo's threads at process teardown abort now and then) is kept in
    ``teardown_code`` and does not fail the run."""
    out = []
    for r, c in enumerate(codes):
        if c in (None, 0):
            continue
        if r < len(states) and states[r].done:
            states[r].teardown_code = c
        else:
            out.append(r)
    return out


_SECONDARY = ("Connection reset", "Connection closed", "Timed out", "timed out", "Timeout", "Broken pipe")


def _failure_message(run_dir: Path, states: list[RankState], failed: list[int], codes: list[int | None]) -> str:
    """Name the rank that caused the failure: one that died without a word (killed, out of memory)
    comes first, then one whose own error is not about losing a peer, then the rest."""
    logs = run_dir / "logs"

    def log_of(rank: int) -> Path:
        own = logs / f"rank-{rank}.log"
        return own if own.exists() else logs / "launcher.log"  # the deepspeed launcher keeps one log

    silent = [r for r in failed if r < len(states) and states[r].error is None]
    if silent:
        r = silent[0]
        return (f"rank {r} exited with code {codes[r]} {_where(states[r])} without reporting an error "
                f"(killed, or out of memory?); log: {log_of(r)}")
    reported = [(st, st.error) for st in states if st.error is not None]
    if reported:
        first, error = min(reported, key=lambda x: (any(w in x[1].error for w in _SECONDARY), x[0].rank))
        return f"rank {first.rank} failed {_where(first)}: {error.error}; log: {log_of(first.rank)}"
    return f"a rank exited with codes {codes} without reporting an error; logs in {logs}"
