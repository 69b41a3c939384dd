"""Start a run's ranks on this machine: one process (and process group) per rank, CPU and gloo,
each running ``python -m ppexec.worker RUN_DIR``, watched until every rank is done
(``ppexec.launch.watch``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ppexec.launch.signals import StopSignals
from ppexec.launch.watch import stop_processes, watch
from ppexec.worker.events import RankState
from ppexec.worker.heartbeat import LAUNCHER_ENV


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_rank_env(rank: int, world: int, port: int) -> dict[str, str]:
    """The environment of one rank on this machine: torch.distributed's variables, one thread per
    rank (more threads per rank make 2-core steps 3-5x slower), DeepSpeed on the CPU accelerator."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    return dict(base, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"), PYTHONUNBUFFERED="1",
                **{LAUNCHER_ENV: str(os.getpid())})


def run_local(run_dir: Path, world: int, deadline_s: float,
              on_progress: Callable[[list[RankState]], None] | None = None,
              hang_limit_s: float | None = None) -> list[RankState]:
    """Run ``world`` ranks on this machine (CPU, gloo) and wait for them; raise RunFailed on a fault
    (a rank silent for ``hang_limit_s`` is one), Interrupted on SIGTERM, SIGINT or SIGHUP."""
    port = free_port()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    with StopSignals() as signals:
        try:
            for r in range(world):
                env = local_rank_env(r, world, port)
                with (logs / f"rank-{r}.log").open("wb") as log:
                    procs.append(subprocess.Popen([sys.executable, "-m", "ppexec.worker", str(run_dir)], env=env,
                                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            return watch(procs, run_dir, world, deadline_s, on_progress, per_rank=True, hang_limit_s=hang_limit_s,
                         signals=signals)
        finally:
            stop_processes(procs)
