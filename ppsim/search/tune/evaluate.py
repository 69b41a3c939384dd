"""Price one candidate plan: its exact peak memory and a lower bound on its step time first (no
simulation, :func:`bound`), the simulation only when it fits (:func:`evaluate`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
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
    #: no simulated step can be shorter (:mod:`ppsim.sim.bound`); known for every plan that fits
    step_time_bound_ms: float | None = None

    @property
    def ranked(self) -> bool:
        return self.fits and self.simulated and self.throughput_samples_per_s is not None

    @property
    def skipped(self) -> bool:
        """It fits, but its bound showed it cannot change what the search reports: not simulated."""
        return self.fits and not self.simulated and self.error is None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidate"] = self.candidate.to_dict()
        d["plan"] = self.candidate.label()
        return d


#: the costs of the last few candidates, by what they depend on: the candidate but its schedule,
#: and the placement of its virtual stages (the costs know no schedule; schedules of one placement
#: share them, and the search bounds them in a row: :func:`~ppsim.search.tune.prune.search`)
_WORKLOADS: OrderedDict[tuple[Candidate, tuple[int, ...]], Any] = OrderedDict()
_WORKLOADS_KEPT = 4


def _workload(s: Any, c: Candidate) -> Any:
    """The candidate's costs (``scenario_workload``), shared with the candidates of the same plan
    but for a schedule of the same placement."""
    from ppsim.prediction.path import scenario_workload, stage_to_rank

    key = (replace(c, schedule=""), stage_to_rank(s))
    w = _WORKLOADS.get(key)
    if w is None:
        w = _WORKLOADS[key] = scenario_workload(s)
        if len(_WORKLOADS) > _WORKLOADS_KEPT:
            _WORKLOADS.popitem(last=False)
    _WORKLOADS.move_to_end(key)
    return w


def _built(base: dict[str, Any], c: Candidate) -> tuple[Any, Any, Evaluation]:
    """The candidate's scenario and built plan, and its evaluation so far: its exact memory (which
    settles a plan that does not fit). Raises PpsimError when the plan cannot run."""
    from ppsim.inputs.hardware import get_device
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.prediction import build
    from ppsim.sim import peak_memory_bytes

    s = parse_scenario(apply(base, c), source="the plan")
    built = build(s, workload=_workload(s, c))
    peak = max(peak_memory_bytes(built.plan, built.workload.costs))
    capacity = get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30
    return s, built, Evaluation(c, fits=peak <= capacity, peak_memory_bytes=peak, memory_capacity_bytes=capacity)


def bound(base: dict[str, Any], c: Candidate) -> Evaluation:
    """The candidate's exact peak memory and, when it fits, a lower bound on its step time.
    Nothing is simulated."""
    from ppsim.sim.bound import step_time_bound_ms

    try:
        s, built, ev = _built(base, c)
        if not ev.fits:
            return ev
        lower = step_time_bound_ms(built.plan, built.workload.costs, data_parallel=s.data_parallel,
                                   clip=s.training.grad_clip > 0)
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))
    return replace(ev, step_time_bound_ms=lower)


def tighten(base: dict[str, Any], c: Candidate) -> Evaluation:
    """:func:`bound` with the tighter, costlier bound of the plan's own order
    (:func:`~ppsim.sim.bound.ordered_bound_ms`): what the search asks before it simulates a plan."""
    from ppsim.sim.bound import ordered_bound_ms

    ev = bound(base, c)
    if not ev.fits or ev.step_time_bound_ms is None:
        return ev
    s, built, _ = _built(base, c)
    ordered = ordered_bound_ms(built.plan, built.workload.costs, data_parallel=s.data_parallel,
                               clip=s.training.grad_clip > 0)
    return replace(ev, step_time_bound_ms=max(ev.step_time_bound_ms, ordered))


def evaluate(base: dict[str, Any], c: Candidate) -> Evaluation:
    """The candidate's exact peak memory and, when it fits, its simulated step and throughput."""
    from ppsim.prediction import predict
    from ppsim.trace.metrics import headline

    try:
        s, built, ev = _built(base, c)
        if not ev.fits:
            return ev
        head = headline(predict(s, built=built).trace)
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))
    return replace(
        ev, simulated=True, step_time_ms=head.step_time_ms, throughput_samples_per_s=head.throughput_samples_per_s,
        tokens_per_s=head.tokens_per_s, mfu=head.mfu, bubble_fraction=head.bubble_fraction,
        device_compute_ms=sum(head.busy_ms) * c.data_parallel * c.tensor_parallel,
    )


Work = Callable[[dict[str, Any], Candidate], Evaluation]  #: :func:`bound`, :func:`tighten` or :func:`evaluate`


def evaluate_many(base: dict[str, Any], cands: list[Candidate], work: Work = evaluate) -> list[Evaluation]:
    return [work(base, c) for c in cands]
