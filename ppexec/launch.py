"""Start the ranks of a run and watch them: locally (one process per rank, CPU and gloo) or through
the ``deepspeed`` launcher on a cluster. Whatever the launcher, each rank runs ``ppexec.worker``.

Faults: when a rank fails, the others are stopped at once and the error names the rank and the
action it was in; when the run outlives its deadline, every rank is stopped and the error names
where each was. No process is left behind, and everything recorded so far stays in the run folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppexec.events import Done, Failure, Measure, Ready, Step, decode, events_path
from ppsim.errors import PpsimError


class RunFailed(PpsimError):
    """A rank crashed, deadlocked or the run timed out."""


@dataclass
class RankState:
    """What the launcher knows of one rank, from its events."""

    rank: int
    ready: Ready | None = None
    steps: list[Step] = field(default_factory=list)
    error: Failure | None = None
    done: bool = False
    teardown_code: int | None = None  #: a non-zero exit after "done": a crash in the teardown, the run complete
    teardown_error: Failure | None = None  #: an error reported after "done" (in the final barrier)
    measurements: dict[str, Any] = field(default_factory=dict)  #: a profiling rank's ``Measure`` events
    offset: int = 0  #: bytes of the event file already read


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_events(run_dir: Path, states: list[RankState]) -> None:
    """Read the new lines of every rank's event file into ``states``."""
    for st in states:
        path = events_path(run_dir, st.rank)
        if not path.exists():
            continue
        with path.open("rb") as fh:
            fh.seek(st.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        st.offset += len(complete)
        for line in complete.splitlines():
            event = decode(line)
            if isinstance(event, Ready):
                st.ready = event
            elif isinstance(event, Step):
                st.steps.append(event)
            elif isinstance(event, Failure) and st.done:
                st.teardown_error = event  # a peer left the final barrier early: all was recorded
            elif isinstance(event, Failure):
                st.error = event
            elif isinstance(event, Done):
                st.done = True
            elif isinstance(event, Measure):
                st.measurements[event.name] = event.data


def _where(st: RankState) -> str:
    if st.error and st.error.action:
        return f"in action {st.error.action}"
    if st.steps:
        last = st.steps[-1].spans[-1][0] if st.steps[-1].spans else "?"
        return f"after step {st.steps[-1].step} (last action {last})"
    return "before its first recorded step"


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process group still running, then SIGKILL what is left after 5 s."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def local_rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The environment of one rank on this machine: torch.distributed's variables, one thread per
    rank (more threads per rank make 2-core steps 3-5x slower), DeepSpeed on the CPU accelerator."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    return dict(base, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"), PYTHONUNBUFFERED="1")


@contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """While the ranks run, SIGTERM (``timeout``, a job scheduler, ``kill``) ends the launcher
    through its cleanup, which stops every rank, instead of leaving them behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise RunFailed(f"the run was stopped by signal {signal.Signals(signum).name}; every rank was stopped")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_local(run_dir: Path, world: int, deadline_s: float,
              on_progress: Callable[[list[RankState]], None] | None = None) -> list[RankState]:
    """Run ``world`` ranks on this machine (CPU, gloo) and wait for them; raise RunFailed on a fault."""
    port = free_port()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    with _stopped_by_sigterm():
        return _start_and_watch(procs, run_dir, world, port, logs, deadline_s, on_progress)


def _start_and_watch(procs: list[subprocess.Popen[bytes]], run_dir: Path, world: int, port: int, logs: Path,
                     deadline_s: float, on_progress: Callable[[list[RankState]], None] | None) -> list[RankState]:
    try:
        for r in range(world):
            env = local_rank_env(r, world, port)
            with (logs / f"rank-{r}.log").open("wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "ppexec.worker", str(run_dir)], env=env,
                                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return watch(procs, run_dir, world, deadline_s, on_progress, per_rank=True)
    finally:
        stop_processes(procs)


def run_deepspeed(run_dir: Path, world: int, hostfile: Path, deadline_s: float,
                  on_progress: Callable[[list[RankState]], None] | None = None) -> list[RankState]:
    """Start every rank through DeepSpeed's launcher (one per GPU of each host in the hostfile)."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with _stopped_by_sigterm():
        with (logs / "launcher.log").open("wb") as log:
            proc = subprocess.Popen(deepspeed_command(run_dir, hostfile, free_port()), stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return watch([proc], run_dir, world, deadline_s, on_progress, per_rank=False)
        finally:
            stop_processes([proc])


def watch(procs: list[subprocess.Popen[bytes]], run_dir: Path, world: int, deadline_s: float,
          on_progress: Callable[[list[RankState]], None] | None, *, per_rank: bool) -> list[RankState]:
    """Follow the ranks' event files until every rank is done; stop everything on the first fault."""
    states = [RankState(r) for r in range(world)]
    start = time.monotonic()
    while True:
        time.sleep(0.1)
        read_events(run_dir, states)
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
            codes = [p.poll() for p in procs]
            failed = _failed(codes, states) if per_rank else []
            launcher_failed = not per_rank and codes[0] not in (None, 0) and not all(st.done for st in states)
            if not (failed or reported or launcher_failed):
                continue  # the exit was a finished rank's teardown
            stop_processes(procs)
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
        if time.monotonic() - start > deadline_s:
            stop_processes(procs)
            read_events(run_dir, states)
            where = "; ".join(f"rank {st.rank} {_where(st)}" for st in states if not st.done)
            raise RunFailed(f"the run did not finish within {deadline_s:.0f} s and was stopped: {where}; "
                            f"logs in {run_dir / 'logs'}")


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


def deepspeed_command(run_dir: Path, hostfile: Path, master_port: int | None = None) -> list[str]:
    """The command that starts every rank through DeepSpeed's launcher (one rank per GPU of each
    host in the hostfile); the run folder must be on a filesystem all hosts share."""
    # --no_local_rank: the worker reads LOCAL_RANK from the environment and takes no other argument
    cmd = ["deepspeed", "--hostfile", str(hostfile), "--no_local_rank"]
    if master_port:
        cmd += ["--master_port", str(master_port)]
    return cmd + ["--module", "ppexec.worker", str(run_dir)]
