"""Start a run's ranks on a cluster through DeepSpeed's launcher (``deepspeed --hostfile``, one rank
per GPU of each host), each running the same worker (``--module ppexec.worker``), and watch them
from here (``ppexec.launch.watch``); the run folder must be on a filesystem every host shares.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from ppexec.launch.local import free_port
from ppexec.launch.signals import StopSignals
from ppexec.launch.watch import stop_processes, watch
from ppexec.worker.events import RankState
from ppexec.worker.heartbeat import LAUNCHER_ENV


def run_deepspeed(run_dir: Path, world: int, hostfile: Path, deadline_s: float,
                  on_progress: Callable[[list[RankState]], None] | None = None,
                  hang_limit_s: float | None = None) -> list[RankState]:
    """Start every rank through DeepSpeed's launcher (one per GPU of each host in the hostfile)."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != LAUNCHER_ENV}  # its ranks are not this process's children
    with StopSignals() as signals:
        with (logs / "launcher.log").open("wb") as log:
            proc = subprocess.Popen(deepspeed_command(run_dir, hostfile, free_port()), stdout=log, env=env,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return watch([proc], run_dir, world, deadline_s, on_progress, per_rank=False, hang_limit_s=hang_limit_s,
                         signals=signals)
        finally:
            stop_processes([proc])


def deepspeed_command(run_dir: Path, hostfile: Path, master_port: int | None = None) -> list[str]:
    """The command that starts every rank through DeepSpeed's launcher (one rank per GPU of each
    host in the hostfile); the run folder must be on a filesystem all hosts share."""
    # --no_local_rank: the worker reads LOCAL_RANK from the environment and takes no other argument
    cmd = ["deepspeed", "--hostfile", str(hostfile), "--no_local_rank"]
    if master_port:
        cmd += ["--master_port", str(master_port)]
    return cmd + ["--module", "ppexec.worker", str(run_dir)]
