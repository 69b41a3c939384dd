"""Price one candidate plan: its exact peak memory first (no simulation), the simulation only when
it fits."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ppsim.errors import PpsimError
from ppsim.search.tune.space import Candidate, apply


@dataclass(frozen=True)
class Evaluation:
    """What one candidate gave. ``error``: the plan cannot run (a layer split, a placement); a plan
    that does not fit is priced no further (``simulated`` False)."""

    candidate: Candidate
    fits: bool = False
    simulated: bool = False
    peak_memory_bytes: float | None = None  #: the largest stage's
    memory_capacity_bytes: float | None = None
    step_time_ms: float | None = None
    throughput_samples_per_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    bubble_fraction: float | None = None
    device_compute_ms: float | None = None  #: compute time of all devices in one step (recompute shows here)
    error: str | None = None

    @property
    def ranked(self) -> bool:
        return self.fits and self.simulated and self.throughput_samples_per_s is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidate"] = self.candidate.to_dict()
        d["plan"] = self.candidate.label()
        return d


def evaluate(base: dict[str, Any], c: Candidate) -> Evaluation:
    """Build the candidate's scenario and costs, check its memory exactly, simulate it if it fits."""
    from ppsim.inputs.hardware import get_device
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.prediction import build, predict
    from ppsim.sim import peak_memory_bytes
    from ppsim.trace.metrics import summarize

    try:
        s = parse_scenario(apply(base, c), source="the plan")
        built = build(s)
        peak = max(peak_memory_bytes(built.plan, built.workload.costs))
        capacity = get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30
        if peak > capacity:
            return Evaluation(c, fits=False, peak_memory_bytes=peak, memory_capacity_bytes=capacity)
        summary = summarize(predict(s, built=built).trace)
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))
    return Evaluation(
        c, fits=True, simulated=True, peak_memory_bytes=peak, memory_capacity_bytes=capacity,
        step_time_ms=summary.step_time_ms, throughput_samples_per_s=summary.throughput_samples_per_s,
        tokens_per_s=summary.tokens_per_s, mfu=summary.mfu, bubble_fraction=summary.bubble_fraction,
        device_compute_ms=sum(st.busy_ms for st in summary.per_rank) * c.data_parallel * c.tensor_parallel,
    )


def evaluate_many(base: dict[str, Any], cands: list[Candidate]) -> list[Evaluation]:
    return [evaluate(base, c) for c in cands]
