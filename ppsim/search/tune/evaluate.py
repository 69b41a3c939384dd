"""Price one candidate plan: its exact peak memory and a lower bound on its step time first (no
simulation, :func:`bound`), the simulation only when it fits (:func:`evaluate`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
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
    device_optimizer_ms: float | None = None  #: the part of it in optimizer steps (with DualPipe's copies' sum)
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
#: the placement of its virtual stages, the copies of the model they form and the memory rules of
#: the runtime the schedule names (the costs know no more of the schedule; schedules of one
#: placement share them, and the search bounds them in a row: :func:`~ppsim.search.tune.prune.search`)
_WORKLOADS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_WORKLOADS_KEPT = 4


def _workload(s: Any, c: Candidate) -> Any:
    """The candidate's costs (``scenario_workload``), shared with the candidates of the same plan
    but for a schedule of the same placement."""
    from ppsim.costs.table import memory_rules
    from ppsim.plan import schedules
    from ppsim.prediction.path import scenario_workload, stage_to_rank

    # and the memory rules, which depend on the schedule (torch runs some, Megatron and DeepSeek others)
    key = (replace(c, schedule=""), stage_to_rank(s), schedules.describe(c.schedule).pipes,
           *memory_rules(s.pipeline).values())
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


def evaluate(base: dict[str, Any], c: Candidate) -> Evaluation:
    """The candidate's exact peak memory and, when it fits, its simulated step and throughput."""
    try:
        s, built, ev = _built(base, c)
        if not ev.fits:
            return ev
        return _simulated(s, built, ev)
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))


@dataclass(frozen=True)
class Gated:
    """A candidate to simulate only if no bound shows its step above ``threshold`` (what the
    search's frontier lets it reach and still be reported); ``bound``: its :func:`bound`'s, when known."""

    candidate: Candidate
    threshold: float
    bound: float | None = None


def evaluate_gated(base: dict[str, Any], g: Gated) -> Evaluation:
    """The candidate simulated if its bound is at or under the threshold, else left skipped. On a
    cluster's network, under a finite threshold, it is first bounded again by its own order
    (:func:`~ppsim.sim.bound.ordered_bound_ms`, tighter where the order itself makes ranks wait):
    there a simulation shares the links of every message at every event, many times the one pass
    over the plan that bound takes; on static links a simulation costs only about twice that pass,
    and the bound would not pay for the simulations it saves (docs/tune.md)."""
    from ppsim.sim.bound import ordered_bound_ms, step_time_bound_ms

    c = g.candidate
    try:
        s, built, ev = _built(base, c)
        if not ev.fits:
            return ev
        costs, d, clip = built.workload.costs, s.data_parallel, s.training.grad_clip > 0
        lower = g.bound if g.bound is not None else step_time_bound_ms(built.plan, costs, data_parallel=d, clip=clip)
        if costs.fabric is not None and g.threshold != float("inf"):  # no bound skips a plan under no bar
            lower = max(lower, ordered_bound_ms(built.plan, costs, data_parallel=d, clip=clip))
        ev = replace(ev, step_time_bound_ms=lower)
        return ev if lower > g.threshold else _simulated(s, built, ev)
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))


def _simulated(s: Any, built: Any, ev: Evaluation) -> Evaluation:
    """``ev`` with the simulated step of the built plan."""
    from ppsim.prediction import predict
    from ppsim.trace.metrics import headline

    return _with_step(ev, headline(predict(s, built=built, placements=False).trace))


def _with_step(ev: Evaluation, head: Any) -> Evaluation:
    """``ev`` with the figures of its simulated step (a :class:`~ppsim.trace.metrics.Headline`)."""
    c = ev.candidate
    return replace(
        ev, simulated=True, step_time_ms=head.step_time_ms, throughput_samples_per_s=head.throughput_samples_per_s,
        tokens_per_s=head.tokens_per_s, mfu=head.mfu, bubble_fraction=head.bubble_fraction,
        device_compute_ms=sum(head.busy_ms) * c.data_parallel * c.tensor_parallel * c.context_parallel,
        device_optimizer_ms=head.optimizer_ms * c.data_parallel * c.tensor_parallel * c.context_parallel,
    )


def own_plan(s: Any) -> Evaluation:
    """The scenario's own plan predicted as ``ppsim run`` predicts it (its partition, schedule and
    options as written): what the search's best is measured against."""
    from ppsim.prediction import predict
    from ppsim.trace.metrics import headline, summarize

    moe = s.model is not None and s.model.moe is not None
    c = Candidate(s.pipeline.stages, s.data_parallel, s.tensor_parallel, s.training.micro_batch, s.microbatches,
                  s.pipeline.schedule, s.pipeline.chunks, s.training.recompute, s.training.zero_stage,
                  s.expert_parallel, s.expert_tensor if moe else None, s.context_parallel)
    try:
        trace = predict(s, placements=False).trace
    except PpsimError as exc:
        return Evaluation(c, error=str(exc))
    summary = summarize(trace, waits=False)
    peaks = [r.peak_memory_bytes for r in summary.per_rank if r.peak_memory_bytes is not None]
    return _with_step(Evaluation(c, fits=summary.fits is not False, peak_memory_bytes=max(peaks, default=None),
                                 memory_capacity_bytes=summary.memory_capacity_bytes), headline(trace))


#: :func:`bound` or :func:`evaluate` over candidates, or :func:`evaluate_gated` over :class:`Gated` ones
Work = Callable[[dict[str, Any], Any], Evaluation]


def evaluate_many(base: dict[str, Any], cands: Sequence[Any], work: Work = evaluate) -> list[Evaluation]:
    return [work(base, c) for c in cands]
