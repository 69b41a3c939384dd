"""Metrics computed from a Trace alone, so they work on simulated and measured traces alike.

Figures are per *rank* (a device of the pipeline), which holds one virtual stage or, with v
chunks, several. Definitions (used everywhere in ppsim):
- step time: from the earliest span start to the latest span end.
- busy time of a rank: the time its compute lane is occupied (forward, backward, weight grad,
  optimizer step), overlapping spans counted once.
- bubble fraction of a rank: idle / total = 1 - busy / step time.
- overall bubble fraction: 1 - sum(busy) / (ranks x step time).
- peak activation micro-batches of a rank: the most micro-batches whose activations it holds at
  once, a micro-batch counting from the start of its forward to the end of its last backward piece
  (B, or W when the backward is split); with v chunks per rank each chunk's micro-batch counts 1/v.
- exposed comm and peer wait of a rank: its time blocked in sends, receives and collectives outside
  compute, split by what it waited for: the data moving (or queued for a link), or a peer's work
  (:mod:`ppsim.trace.waits`); the rest of its bubble is idle, outside every action.
- peak memory of a rank: the highest value of its ``memory_bytes`` counter (model states, buffers
  and the activations held), with the action running then; the plan fits when every rank's peak
  is within ``meta["device_memory_bytes"]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from ppsim.plan import Kind
from ppsim.trace.critical import Bottleneck, bottleneck, critical_path
from ppsim.trace.ideal import ideal_bubble_fraction
from ppsim.trace.intervals import union_length
from ppsim.trace.meta import StaticMemory, TraceMeta
from ppsim.trace.trace import Span, Trace
from ppsim.trace.waits import busy_times, rank_times

#: what a rank holds all step, in the order a peak's breakdown lists it (activations come last)
STATIC_PARTS = ("weights", "gradients", "optimizer", "buffers")
#: the part of a peak that split backwards keep from an input grad for its weight grad, beyond the activations
OWED_PART = "weight-grad inputs"


@dataclass(frozen=True)
class RankMetrics:
    """The figures of one rank (device) of the pipeline; ``stages`` are the virtual stages it holds."""

    rank: int
    stages: tuple[int, ...]
    busy_ms: float
    bubble_fraction: float
    peak_activation_microbatches: float
    compute_ms: dict[str, float]  #: busy time split by kind (F, B, I, W, OPT)
    #: blocked outside compute while its data moved or queued for a link (:mod:`~ppsim.trace.waits`)
    exposed_comm_ms: float | None
    peer_wait_ms: float | None  #: blocked outside compute until a peer produced, sent or asked for the data
    peak_memory_bytes: float | None = None  #: highest ``memory_bytes`` counter value (simulated traces)
    peak_memory_at: str | None = None  #: the action running when the peak was reached
    static_memory_bytes: StaticMemory | None = None  #: weights, gradients, optimizer, buffers, total
    #: of the peak, what split backwards keep for their weight grads beyond the activations (None:
    #: the plan keeps none, or the trace does not say)
    peak_weight_grad_input_bytes: float | None = None

    def peak_parts(self) -> dict[str, float] | None:
        """The peak broken down: what the rank holds all step (:data:`STATIC_PARTS`), the
        activations in flight then (the rest) and, in a plan of split backwards, what they keep
        for weight grads not yet run (:data:`OWED_PART`), in bytes that add up to the peak; None
        without the static part."""
        static, peak = self.static_memory_bytes, self.peak_memory_bytes
        if static is None or peak is None:
            return None
        parts: dict[str, float] = {name: float(static[name]) for name in STATIC_PARTS}  # type: ignore[literal-required]  # StaticMemory's keys
        owed = self.peak_weight_grad_input_bytes
        parts["activations"] = max(0.0, peak - sum(parts.values()) - (owed or 0.0))
        if owed is not None:
            parts[OWED_PART] = owed
        return parts


@dataclass(frozen=True)
class Summary:
    """The headline figures of a trace and each rank's."""

    source: str
    schedule: str
    num_ranks: int
    microbatches: int
    chunks: int
    data_parallel: int
    step_time_ms: float
    bubble_fraction: float
    throughput_samples_per_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    per_rank: tuple[RankMetrics, ...]
    meta: TraceMeta
    memory_capacity_bytes: float | None = None  #: the device's memory
    fits: bool | None = None  #: every rank's peak within the capacity (None: memory not modelled)
    mfu_above_peak: str | None = None  #: why MFU exceeds 100 %, when it does (:func:`mfu_above_peak`)
    #: what sets the step time, from the critical path (:mod:`ppsim.trace.critical`; with waits only)
    bottleneck: Bottleneck | None = None
    #: the bubble of the same order with communication free (:mod:`ppsim.trace.ideal`; with waits only)
    ideal_bubble_fraction: float | None = None

    @property
    def num_stages(self) -> int:
        """Virtual stages: ranks x chunks."""
        return self.num_ranks * self.chunks

    def over_capacity(self) -> list[RankMetrics]:
        """Ranks whose peak memory exceeds the device's."""
        cap = self.memory_capacity_bytes
        return [r for r in self.per_rank if cap and r.peak_memory_bytes is not None and r.peak_memory_bytes > cap]

    def to_json_dict(self) -> dict[str, Any]:
        """The document ``ppsim run --json`` prints."""
        return {
            "source": self.source,
            "scenario": self.meta.get("scenario"),
            "schedule": self.schedule,
            "ranks": [{**asdict(r), "peak_memory_parts": r.peak_parts()} for r in self.per_rank],
            "num_ranks": self.num_ranks,
            "num_stages": self.num_stages,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "data_parallel": self.data_parallel,
            "partition": self.meta.get("partition"),
            "partition_balance": self.meta.get("partition_balance"),
            "step_time_ms": self.step_time_ms,
            "bubble_fraction": self.bubble_fraction,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "samples_per_step": self.meta.get("samples_per_step"),
            "tokens_per_step": self.meta.get("tokens_per_step"),
            "comm": self.meta.get("comm"),
            "costs_from": self.meta.get("costs_from"),
            "costs_source": self.meta.get("costs_source"),
            "mfu_above_peak": self.mfu_above_peak,
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits": self.fits,
            "ideal_bubble_fraction": self.ideal_bubble_fraction,
            "critical_path": None if self.bottleneck is None else self.bottleneck.to_json_dict(),
        }


def step_bounds(trace: Trace) -> tuple[float, float]:
    if not trace.spans:
        return 0.0, 0.0
    return min(s.start for s in trace.spans), max(s.end for s in trace.spans)


def step_time_ms(trace: Trace) -> float:
    lo, hi = step_bounds(trace)
    return hi - lo


def peak_activations(spans: list[Span], chunks: int, layerwise: bool = False, store: bool = False) -> float:
    """Most micro-batches of activations held at once on one rank (see module docstring); an
    overlapped forward and backward counted at its start and end, or (``layerwise``: they
    interleave layer by layer) both at its end; a split backward's freed at its weight grad, or
    (``store``: through a weight-gradient store) at its input grad."""
    F, B, I, W, OVERLAP = Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B
    split = {(s.action[0], s.action[2]) for s in spans if s.action[1] is W}
    events: list[tuple[float, int, float]] = []
    add = events.append
    weight = 1.0 / chunks
    frees = False
    for s in spans:
        action = s.action
        # an overlapped action: its forward at its start, its backward at its end
        overlapped = action[1] is OVERLAP
        for stage, k, mb in (action.parts if overlapped else (action,)):
            if k is F:
                add((s.end if overlapped and layerwise else s.start, 1, weight))
            elif (k is B or (k is W and not store)
                  or (k is I and (store or (stage, mb) not in split))):
                add((s.end, 0, -weight))
                frees = True
    # an inference plan frees nothing: a forward holds its activations only while it runs
    if not frees:
        events += [(s.end, 0, -weight) for s in spans if s.action[1] is F]
    held = peak = 0.0
    events.sort()
    for _, _, delta in events:
        held += delta
        if held > peak:
            peak = held
    return round(peak, 9)


def rank_stages(trace: Trace, rank: int) -> tuple[int, ...]:
    """The virtual stages ``rank`` holds: from the trace's ``stage_to_rank``, else from its spans."""
    placement = trace.meta.get("stage_to_rank")
    if placement:
        return tuple(s for s, r in enumerate(placement) if r == rank)
    return tuple(sorted({s.action.stage for s in trace.spans if s.rank == rank}))


def memory_peak(trace: Trace, rank: int, compute: list[Span]) -> tuple[float, str | None, float] | None:
    """(peak of the rank's ``memory_bytes`` counter, the action of ``compute`` — the rank's compute
    spans — running then, the moment), if the rank has that counter."""
    counter = next((c for c in trace.counters if c.rank == rank and c.name == "memory_bytes"), None)
    if counter is None or not counter.points:
        return None
    t, peak = max(counter.points, key=lambda p: (p[1], -p[0]))
    running = [s for s in compute if s.start <= t <= s.end]
    at = min(running, key=lambda s: (abs(s.start - t), s.start)) if running else None
    return peak, str(at.action) if at else None, t


def weight_grad_inputs_held(compute: list[Span], t: float, pending: list[int]) -> float:
    """What a rank's split backwards keep for their weight grads at moment ``t``, beyond the
    activations: of each micro-batch whose input grad has started (it takes them at its start) and
    whose weight grad has not ended, ``pending[stage]`` bytes (:mod:`ppsim.plan.held`)."""
    I, W, OVERLAP = Kind.I, Kind.W, Kind.OVERLAP_F_B
    started: set[tuple[int, int | None]] = set()
    freed: set[tuple[int, int | None]] = set()
    for s in compute:
        for stage, k, mb in (s.action.parts if s.action[1] is OVERLAP else (s.action,)):
            if k is I and s.start <= t:
                started.add((stage, mb))
            elif k is W and s.end <= t:
                freed.add((stage, mb))
    return float(sum(pending[stage] for stage, _ in started - freed))


def rank_metrics(trace: Trace, step: float | None = None, *, waits: bool = True) -> list[RankMetrics]:
    """Busy time, bubble, activations held, waiting (unless ``waits`` is False: None) and memory of
    every rank (``step``: the trace's step time, when the caller has it)."""
    if step is None:
        step = step_time_ms(trace)
    chunks = int(trace.meta.get("chunks", 1))
    static = trace.meta.get("memory_static_bytes")
    pending = trace.meta.get("weight_grad_pending_bytes")
    out = []
    for r, time in enumerate(rank_times(trace) if waits else busy_times(trace)):
        compute, busy = time.compute, time.busy_ms
        kinds: dict[Kind, float] = {}
        for s in compute:
            k = s.action[1]
            kinds[k] = kinds.get(k, 0.0) + (s.end - s.start)
        by_kind = {k.value: ms for k, ms in kinds.items()}
        peak = memory_peak(trace, r, compute)
        owed = weight_grad_inputs_held(compute, peak[2], pending) if peak and pending else None
        out.append(
            RankMetrics(
                rank=r,
                stages=rank_stages(trace, r),
                busy_ms=busy,
                bubble_fraction=(1.0 - busy / step) if step > 0 else 0.0,
                peak_activation_microbatches=peak_activations(compute, chunks, bool(trace.meta.get("overlap_layerwise")),
                                                              bool(trace.meta.get("input_grad_frees"))),
                compute_ms=by_kind,
                exposed_comm_ms=time.exposed_comm_ms,
                peer_wait_ms=time.peer_wait_ms,
                peak_memory_bytes=peak[0] if peak else None,
                peak_memory_at=peak[1] if peak else None,
                static_memory_bytes=static[r] if static and r < len(static) else None,
                peak_weight_grad_input_bytes=owed,
            )
        )
    return out


@dataclass(frozen=True)
class Headline:
    """What a ranking of plans needs: the step, each rank's busy time and what follows from them."""

    step_time_ms: float
    busy_ms: tuple[float, ...]
    bubble_fraction: float
    throughput_samples_per_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    optimizer_ms: float = 0.0  #: the ranks' optimizer steps, summed (a part of their busy time)


def headline(trace: Trace) -> Headline:
    """The headline figures alone, in one pass over the spans (:func:`summarize` adds each rank's
    memory, activations and waits, which cost several more)."""
    meta = trace.meta
    compute: list[list[tuple[float, float]]] = [[] for _ in range(trace.num_ranks)]
    lo, hi = float("inf"), float("-inf")
    optimizer = 0.0
    for s in trace.spans:
        if s.start < lo:
            lo = s.start
        if s.end > hi:
            hi = s.end
        if s.lane == "compute":
            compute[s.rank].append((s.start, s.end))
            if s.action.kind is Kind.OPT:
                optimizer += s.end - s.start
    head = _headline(meta, hi - lo if trace.spans else 0.0, tuple(union_length(c) for c in compute))
    return replace(head, optimizer_ms=optimizer)


def _headline(meta: TraceMeta, step: float, busy: tuple[float, ...]) -> Headline:
    """The headline figures from the step time and each rank's busy time."""
    p = len(busy)
    bubble = (1.0 - sum(busy) / (p * step)) if step > 0 and p else 0.0
    samples = meta.get("samples_per_step")
    tokens = meta.get("tokens_per_step")
    flops = meta.get("model_flops_per_step")
    peak = meta.get("peak_flops_per_device")
    devices = meta.get("num_devices")
    step_s = step / 1000.0
    sps = samples / step_s if samples and step_s > 0 else None
    tps = tokens / step_s if tokens and step_s > 0 else None
    mfu = flops / (step_s * devices * peak) if flops and peak and devices and step_s > 0 else None
    return Headline(step, busy, bubble, sps, tps, mfu)


def mfu_above_peak(meta: TraceMeta, mfu: float | None) -> str | None:
    """Why MFU is above 100 % (None when it is not): the step ran faster than the device's nominal
    peak allows, so that peak, not the step, is wrong for what was measured or given."""
    if mfu is None or mfu <= 1.0:
        return None
    peak = meta.get("peak_flops_per_device") or 0.0
    device, dtype = meta.get("device") or "the device", meta.get("dtype") or ""
    nominal = f"{device}'s nominal {peak / 1e12:,.3g} TFLOP/s {dtype} peak".replace("  ", " ")
    achieved = f"{mfu * peak / 1e12:,.3g} TFLOP/s per device"
    if meta.get("source") == "measured":
        why = f"this run reached {achieved}, above {nominal}"
    elif meta.get("costs_from") == "profile":
        why = f"the profile's measured times imply {achieved}, above {nominal}"
    elif meta.get("costs_from") == "explicit":
        why = f"the scenario's explicit costs imply {achieved}, above {nominal}"
    else:
        why = f"the step implies {achieved}, above {nominal}"
    return f"{why}: that peak is below what this machine does; give its real peak in a device file (hardware.device_file)"


def summarize(trace: Trace, *, waits: bool = True) -> Summary:
    """All headline figures of a trace (each rank's waits only with ``waits``: views that show none,
    such as the TUI, save their cost)."""
    meta = trace.meta
    step_ms = step_time_ms(trace)
    per_rank = rank_metrics(trace, step_ms, waits=waits)
    head = _headline(meta, step_ms, tuple(r.busy_ms for r in per_rank))
    step, bubble = head.step_time_ms, head.bubble_fraction
    sps, tps, mfu = head.throughput_samples_per_s, head.tokens_per_s, head.mfu
    p = len(per_rank)
    capacity = meta.get("device_memory_bytes")
    peaks = [r.peak_memory_bytes for r in per_rank if r.peak_memory_bytes is not None]
    fits = all(p <= capacity for p in peaks) if capacity and len(peaks) == len(per_rank) else None
    return Summary(
        memory_capacity_bytes=capacity,
        fits=fits,
        source=str(meta.get("source", "simulated")),
        schedule=str(meta.get("schedule") or meta.get("trace_format") or "?"),
        num_ranks=p,
        microbatches=int(meta.get("num_microbatches", 0)),
        chunks=int(meta.get("chunks", 1)),
        data_parallel=int(meta.get("data_parallel", 1)),
        step_time_ms=step,
        bubble_fraction=bubble,
        throughput_samples_per_s=sps,
        tokens_per_s=tps,
        mfu=mfu,
        per_rank=tuple(per_rank),
        meta=meta,
        mfu_above_peak=mfu_above_peak(meta, mfu),
        bottleneck=bottleneck(critical_path(trace)) if waits else None,
        ideal_bubble_fraction=ideal_bubble_fraction(trace) if waits else None,
    )
