"""Scenario files of tuned plans (``ppsim tune --write`` and ``--write-top``): the source scenario as
its file gives it, with the plan laid over it by the rules of the command-line plan options
(:func:`ppsim.inputs.overrides.plan_mapping`), under a comment saying where it came from (the
command and the search's counts), what it predicts, and where each next command is meant to run.
``ppsim run`` on the file predicts what the tuner did."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from ppsim.formats import TUNED_SCENARIO_MARKER
from ppsim.inputs.overrides import PlanOverrides, plan_mapping
from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.space import Candidate

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from ppsim.inputs.scenario import Scenario
    from ppsim.search.tune.report import TuneCounts

GIB = 2**30


def plan_of(c: Candidate) -> PlanOverrides:
    """The candidate as plan options: what ``ppsim run`` would be given to run it."""
    return PlanOverrides(schedule=c.schedule, stages=c.stages, microbatches=c.microbatches, chunks=c.chunks,
                         partition="balanced", data_parallel=c.data_parallel, tensor_parallel=c.tensor_parallel,
                         context_parallel=c.context_parallel,
                         micro_batch=c.micro_batch, recompute=c.recompute, zero_stage=c.zero_stage,
                         expert_parallel=c.expert_parallel if c.expert_parallel > 1 else None,
                         expert_tensor_parallel=c.expert_tensor if c.expert_tensor not in (None, c.tensor_parallel)
                         else None)


def local_run_bytes(s: Scenario) -> int | None:
    """The host memory a local ``ppexec run`` of ``s`` needs (every rank a process on one machine's
    CPUs; :func:`~ppsim.costs.host_memory.host_run_bytes`); None without a model."""
    from ppsim.costs.host_memory import host_run_bytes

    if s.model is None:
        return None
    return host_run_bytes(s.model, s.training.micro_batch, s.microbatches, devices(s))


def machine_memory_bytes() -> int | None:
    """This machine's physical memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def devices(s: Scenario) -> int:
    """The devices the plan runs on: t x p x d, one rank each."""
    return s.devices


def next_lines(s: Scenario, path: Path) -> list[str]:
    """The header's hints, each saying where its command is meant to run: ppsim on any machine;
    ppexec on the cluster the plan is for, and on this machine only where a local run can work
    (else why not: the memory ppexec would ask for, or fp16, which does not train on a CPU)."""
    shown, out = shlex.quote(str(path)), shlex.quote("runs/" + path.stem)
    lines = [f"# next, on any machine: ppsim run {shown}; ppsim tui {shown}"]
    need = local_run_bytes(s)
    if need is None:  # nothing for ppexec to build
        return lines
    n = devices(s)
    lines.append(f"# next, on the cluster it plans for ({n} x {s.hardware.device}): ppexec run {shown} "
                 f"--launcher deepspeed --hostfile HOSTFILE --out {out}")
    have = machine_memory_bytes()
    need_gib = f"needs about {need / GIB:,.1f} GiB"
    if s.model is not None and s.model.dtype == "fp16":
        lines.append("#   not on this machine: fp16 does not train on a CPU")
    elif have is None:
        lines.append(f"#   a local ppexec run puts all {n} ranks on one machine's CPUs and {need_gib}")
    elif need > have:
        lines.append(f"#   not on this machine ({have / GIB:,.1f} GiB): a local ppexec run puts all {n} ranks on its "
                     f"CPUs and {need_gib}")
    else:
        lines.append(f"# or on this machine, all {n} ranks on its CPUs (about {need / GIB:,.1f} of its "
                     f"{have / GIB:,.1f} GiB): ppexec run {shown} --out {out}")
    return lines


def scenario_text(source: Scenario, e: Evaluation, rank: int, counts: TuneCounts, command: str, path: Path) -> str:
    """The YAML of ``source`` running ``e``'s plan, the ``rank``-th of the plans the search simulated
    (``counts``), headed by where it came from (``command``), the search's counts, its predicted
    figures and where to run it next; validated as a scenario."""
    import yaml

    from ppsim.inputs.scenario import parse_scenario

    data = source.model_dump(exclude_unset=True, exclude_none=True)
    data.pop("deepspeed", None)  # its values are in the mapping; read again it would override the plan
    data = plan_mapping(data, plan_of(e.candidate))
    tuned = parse_scenario(data, source=f"the tuned plan {e.candidate.label()}")
    header = [
        f"{TUNED_SCENARIO_MARKER}: plan {rank} of {counts.simulated:,} simulated, for "
        f"{source.name or 'the scenario'} on {devices(tuned)} devices",
        f"# search: {counts.text()}",
        f"# command: {command}",
        f"# plan: {e.candidate.label()}",
        f"# predicted: step {e.step_time_ms:,.3f} ms, {e.throughput_samples_per_s:,.2f} samples/s, "
        f"MFU {(e.mfu or 0) * 100:.1f} %, bubble {(e.bubble_fraction or 0) * 100:.1f} %, "
        f"peak memory {(e.peak_memory_bytes or 0) / GIB:,.1f} of {(e.memory_capacity_bytes or 0) / GIB:,.0f} GiB",
        *next_lines(tuned, path),
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)
