"""Scenario files of tuned plans (``ppsim tune --write`` and ``--write-top``): the source scenario as
its file gives it, with the plan laid over it by the rules of the command-line plan options
(:func:`ppsim.search.plan_options.plan_mapping`), under a comment saying where it came from and what
it predicts. ``ppsim run`` on the file predicts what the tuner did."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from ppsim.formats import TUNED_SCENARIO_MARKER
from ppsim.search.plan_options import PlanOverrides, plan_mapping
from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.space import Candidate

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from ppsim.inputs.scenario import Scenario

GIB = 2**30


def plan_of(c: Candidate) -> PlanOverrides:
    """The candidate as plan options: what ``ppsim run`` would be given to run it."""
    return PlanOverrides(schedule=c.schedule, stages=c.stages, microbatches=c.microbatches, chunks=c.chunks,
                         partition="balanced", data_parallel=c.data_parallel, tensor_parallel=c.tensor_parallel,
                         micro_batch=c.micro_batch, recompute=c.recompute, zero_stage=c.zero_stage)


def scenario_text(source: Scenario, e: Evaluation, rank: int, ranked: int, command: str, path: Path) -> str:
    """The YAML of ``source`` running ``e``'s plan, the ``rank``-th of ``ranked`` plans that fit,
    headed by where it came from (``command``) and its predicted figures; validated as a scenario."""
    import yaml

    from ppsim.inputs.scenario import parse_scenario

    data = source.model_dump(exclude_unset=True, exclude_none=True)
    data.pop("deepspeed", None)  # its values are in the mapping; read again it would override the plan
    data = plan_mapping(data, plan_of(e.candidate))
    parse_scenario(data, source=f"the tuned plan {e.candidate.label()}")
    shown = shlex.quote(str(path))
    header = [
        f"{TUNED_SCENARIO_MARKER}: plan {rank} of the {ranked} that fit, for {source.name or 'the scenario'}",
        f"# command: {command}",
        f"# plan: {e.candidate.label()}",
        f"# predicted: step {e.step_time_ms:,.3f} ms, {e.throughput_samples_per_s:,.2f} samples/s, "
        f"MFU {(e.mfu or 0) * 100:.1f} %, bubble {(e.bubble_fraction or 0) * 100:.1f} %, "
        f"peak memory {(e.peak_memory_bytes or 0) / GIB:,.1f} of {(e.memory_capacity_bytes or 0) / GIB:,.0f} GiB",
        f"# next: ppsim run {shown}; ppsim tui {shown}; ppexec run {shown} --out {shlex.quote('runs/' + path.stem)}",
    ]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)
