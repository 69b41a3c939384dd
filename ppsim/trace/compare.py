"""Compare a predicted Trace with a measured one: step time, bubbles per rank, errors per action.

Spans are matched one to one by (rank, action text), e.g. ``(1, "1B3")``. Each trace's times are
taken from its own first span (:func:`ppsim.metrics.step_bounds`), so both steps start at 0.
The compute actions (F, B, I, W) must be the same on both sides, else the traces come from
different plans and :class:`~ppsim.errors.TraceError` says what differs; communication and
end-of-step actions (REDUCE_GRAD, CLIP, OPT) are matched where both sides have them and counted
where only one side has them (a torch profiler trace has no CLIP, and REDUCE_GRAD even without replicas).

Signs: ``step_time_error`` and relative errors are (predicted - measured) / measured, so a
positive value means the prediction is too high; a bubble error is predicted - measured in
percentage points. Per action, ``start_delta_ms`` / ``duration_delta_ms`` are measured minus
predicted (positive: the measured action starts later / lasts longer). The per-kind and overall
start and duration errors are absolute values of these deltas.

What to look at first: ``causes`` sums, per action kind and stage, how much longer the measured
compute actions ran than predicted (the differences that add up to the step-time error, where
``worst`` is dominated by the drift every later action inherits), and ``hints`` says when the
prediction used datasheet costs (trace meta ``costs_from: model``) and how to calibrate it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ppsim.errors import TraceError
from ppsim.plan import COMPUTE_KINDS, Kind
from ppsim.trace.metrics import step_bounds, summarize
from ppsim.trace.trace import Span, Trace

Key = tuple[int, str]  #: (rank, action text): how spans are matched

#: metadata that names the plan, with how an error message calls it
_PLAN_META = (
    ("scenario", "scenario"),
    ("schedule", "schedule"),
    ("num_ranks", "rank count"),
    ("num_microbatches", "micro-batch count"),
    ("chunks", "chunk count"),
    ("data_parallel", "data-parallel degree"),
)
_SHOWN = 4  # actions named in an error or note before "(+N more)"
_ON_TIME_MS = 0.005  # deltas below this read as "on time" / "as long as predicted"


@dataclass(frozen=True)
class RankComparison:
    """One rank: busy time and bubble fraction on both sides."""

    rank: int
    predicted_busy_ms: float
    measured_busy_ms: float
    predicted_bubble_fraction: float
    measured_bubble_fraction: float
    bubble_error_pp: float  #: 100 x (predicted - measured bubble fraction)


@dataclass(frozen=True)
class KindErrors:
    """Errors of the matched actions of one kind; ms figures are absolute values."""

    kind: str
    count: int
    start_error_ms_median: float
    start_error_ms_p90: float
    duration_error_ms_median: float
    duration_error_ms_p90: float
    relative_duration_error_median: float | None  #: signed (pred - meas) / meas; None if no measured duration > 0


@dataclass(frozen=True)
class Disagreement:
    """One matched action where prediction and measurement differ; times from each trace's start."""

    rank: int
    action: str
    kind: str
    predicted_start_ms: float
    predicted_end_ms: float
    measured_start_ms: float
    measured_end_ms: float
    start_delta_ms: float  #: measured start - predicted start
    duration_delta_ms: float  #: measured duration - predicted duration
    description: str


@dataclass(frozen=True)
class Cause:
    """One action kind on one stage, over its micro-batches: measured against predicted duration."""

    kind: str
    stage: int
    rank: int
    count: int  #: matched actions of this kind on this stage
    predicted_ms: float  #: their predicted durations, summed
    measured_ms: float  #: their measured durations, summed
    delta_ms: float  #: measured - predicted, summed (positive: they ran longer than predicted)
    relative_error: float | None  #: (predicted - measured) / measured; None if nothing was measured
    description: str


@dataclass(frozen=True)
class Comparison:
    """Everything ``ppsim compare`` reports (see the module docstring for signs)."""

    scenario: str | None
    predicted_schedule: str
    measured_schedule: str
    predicted_step_time_ms: float
    measured_step_time_ms: float
    step_time_error: float  #: (predicted - measured) / measured
    predicted_bubble_fraction: float  #: over all ranks (metrics.summarize)
    measured_bubble_fraction: float
    ranks: tuple[RankComparison, ...]
    max_abs_bubble_error_pp: float
    matched: int  #: actions found on both sides
    by_kind: dict[str, KindErrors]
    start_error_ms_median: float
    start_error_ms_p90: float
    duration_error_ms_median: float
    duration_error_ms_p90: float
    worst: tuple[Disagreement, ...]  #: largest |start delta| + |duration delta| first
    unmatched: tuple[str, ...]  #: communication actions on one side only
    meta_differences: tuple[str, ...]  #: plan metadata that differs although the actions match
    #: per compute kind and stage, the largest |measured - predicted| summed durations first
    causes: tuple[Cause, ...] = ()
    costs_from: str | None = None  #: the prediction's costs: model (datasheet), profile or explicit
    hints: tuple[str, ...] = ()  #: what to do about the disagreement (calibrate datasheet costs)

    def to_json_dict(self) -> dict[str, Any]:
        """The document ``ppsim compare --json`` prints."""
        doc = asdict(self)
        doc["ranks"] = [asdict(r) for r in self.ranks]
        doc["by_kind"] = {k: asdict(v) for k, v in self.by_kind.items()}
        doc["worst"] = [asdict(d) for d in self.worst]
        doc["unmatched"] = list(self.unmatched)
        doc["meta_differences"] = list(self.meta_differences)
        doc["causes"] = [asdict(c) for c in self.causes]
        doc["hints"] = list(self.hints)
        return doc


# ----- loading and matching ----------------------------------------------------------------------


def aligned(trace: Trace) -> list[Span]:
    """The trace's spans with times from its own first span (the step starts at 0)."""
    lo, _ = step_bounds(trace)
    return [s._replace(start=s.start - lo, end=s.end - lo) for s in trace.spans]


def _index(trace: Trace, side: str) -> dict[Key, Span]:
    """Aligned spans by (rank, action text); refuses an empty trace, bad ranks and repeated actions."""
    if not trace.spans:
        raise TraceError(f"the {side} trace has no spans: there is nothing to compare")
    out: dict[Key, Span] = {}
    for s in aligned(trace):
        if not 0 <= s.rank < trace.num_ranks:
            raise TraceError(f"the {side} trace has a span on rank {s.rank} but only {trace.num_ranks} ranks")
        if s.end < s.start:
            raise TraceError(f"the {side} trace has a span that ends before it starts: rank {s.rank} {s.action}")
        key = (s.rank, str(s.action))
        if key in out:
            raise TraceError(f"the {side} trace has action {key[1]} twice on rank {key[0]}; it holds more than one step")
        out[key] = s
    return out


def _names(keys: list[Key], spans: dict[Key, Span]) -> str:
    """``rank 0 0F4, rank 1 1F4, ... (+3 more)``, in time order per rank."""
    ordered = sorted(keys, key=lambda k: (k[0], spans[k].start, k[1]))
    text = ", ".join(f"rank {r} {a}" for r, a in ordered[:_SHOWN])
    return text + (f" (+{len(ordered) - _SHOWN} more)" if len(ordered) > _SHOWN else "")


def _meta_differences(pred: Trace, meas: Trace) -> list[str]:
    out = []
    for key, label in _PLAN_META:
        a, b = pred.meta.get(key), meas.meta.get(key)
        if a is not None and b is not None and a != b:
            out.append(f"{label} differs (predicted {a!r}, measured {b!r})")
    return out


def _check_comparable(pred: Trace, meas: Trace, p_idx: dict[Key, Span], m_idx: dict[Key, Span]) -> None:
    if pred.num_ranks != meas.num_ranks:
        raise TraceError(
            f"the traces have different numbers of ranks: predicted {pred.num_ranks}, measured {meas.num_ranks}; "
            "compare a prediction and a run of the same scenario with the same stage count"
        )
    p_comp = {k for k, s in p_idx.items() if s.action.kind in COMPUTE_KINDS}
    m_comp = {k for k, s in m_idx.items() if s.action.kind in COMPUTE_KINDS}
    if p_comp == m_comp:
        return
    parts = [f"the traces run different compute actions: predicted has {len(p_comp)}, measured has {len(m_comp)}"]
    if p_comp - m_comp:
        parts.append(f"only in predicted: {_names(list(p_comp - m_comp), p_idx)}")
    if m_comp - p_comp:
        parts.append(f"only in measured: {_names(list(m_comp - p_comp), m_idx)}")
    diffs = _meta_differences(pred, meas)
    if diffs:
        parts.append("likely cause: " + ", ".join(diffs))
    else:
        parts.append("likely cause: they come from different scenarios, schedules, micro-batch counts or stage counts")
    raise TraceError("; ".join(parts) + "; predict the scenario with the same overrides the run used")


# ----- statistics --------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), interpolating linearly between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _median(values: list[float]) -> float:
    return percentile(values, 50)


def describe(rank: int, action: str, start_delta_ms: float, duration_delta_ms: float) -> str:
    """``rank 1 1B3 starts 2.10 ms late and lasts 0.40 ms longer than predicted``."""
    if abs(start_delta_ms) < _ON_TIME_MS:
        start = "starts on time"
    else:
        start = f"starts {abs(start_delta_ms):.2f} ms {'late' if start_delta_ms > 0 else 'early'}"
    if abs(duration_delta_ms) < _ON_TIME_MS:
        lasts = "lasts as long as predicted"
    else:
        lasts = f"lasts {abs(duration_delta_ms):.2f} ms {'longer' if duration_delta_ms > 0 else 'shorter'} than predicted"
    return f"rank {rank} {action} {start} and {lasts}"


def _disagreement(p: Span, m: Span) -> Disagreement:
    start_delta = m.start - p.start
    duration_delta = m.duration - p.duration
    action = str(m.action)
    return Disagreement(
        rank=m.rank,
        action=action,
        kind=m.action.kind.value,
        predicted_start_ms=p.start,
        predicted_end_ms=p.end,
        measured_start_ms=m.start,
        measured_end_ms=m.end,
        start_delta_ms=start_delta,
        duration_delta_ms=duration_delta,
        description=describe(m.rank, action, start_delta, duration_delta),
    )


def _kind_errors(kind: str, ds: list[Disagreement], pairs: list[tuple[Span, Span]]) -> KindErrors:
    starts = [abs(d.start_delta_ms) for d in ds]
    durations = [abs(d.duration_delta_ms) for d in ds]
    rel = [(p.duration - m.duration) / m.duration for p, m in pairs if m.duration > 0]
    return KindErrors(
        kind=kind,
        count=len(ds),
        start_error_ms_median=_median(starts),
        start_error_ms_p90=percentile(starts, 90),
        duration_error_ms_median=_median(durations),
        duration_error_ms_p90=percentile(durations, 90),
        relative_duration_error_median=_median(rel) if rel else None,
    )


def _unmatched_notes(p_idx: dict[Key, Span], m_idx: dict[Key, Span]) -> list[str]:
    notes = []
    for side, mine, other in (("predicted", p_idx, m_idx), ("measured", m_idx, p_idx)):
        only = [k for k in mine if k not in other]
        if only:
            n = len(only)
            notes.append(f"{n} communication or end-of-step action{'s' if n != 1 else ''} only in the {side} trace: "
                         f"{_names(only, mine)}")
    return notes


def _causes(pairs: list[tuple[Span, Span]], top: int) -> tuple[Cause, ...]:
    """Per (kind, stage) of the compute lane, summed durations on both sides, the largest
    difference first. Sends, receives and collectives are left out: their time includes waiting
    for a peer, the consequence of a disagreement elsewhere rather than its cause."""
    groups: dict[tuple[str, int], list[tuple[Span, Span]]] = {}
    for p, m in pairs:
        if m.lane == "compute":
            groups.setdefault((m.action.kind.value, m.action.stage), []).append((p, m))
    out = []
    for (kind, stage), sel in groups.items():
        pred, meas = sum(p.duration for p, _ in sel), sum(m.duration for _, m in sel)
        delta, n, rank = meas - pred, len(sel), sel[0][1].rank
        rel = (pred - meas) / meas if meas > 0 else None
        how = "as long as predicted" if abs(delta) < _ON_TIME_MS else (
            f"{abs(delta):.2f} ms {'longer' if delta > 0 else 'shorter'} than predicted in all")
        each = f" ({abs(delta) / n:.2f} ms each)" if n > 1 and abs(delta) >= _ON_TIME_MS else ""
        rel_text = f"; predicted {100 * rel:+.1f} %" if rel is not None else ""
        out.append(Cause(kind, stage, rank, n, pred, meas, delta, rel,
                         f"{kind} on stage {stage} (rank {rank}), {n} action{'s' if n != 1 else ''}: measured "
                         f"{meas:.2f} ms, predicted {pred:.2f} ms: {how}{each}{rel_text}"))
    out.sort(key=lambda c: (-abs(c.delta_ms), c.stage, c.kind))
    return tuple(out[: max(0, top)])


#: the measured all-to-all time over the predicted above which compare says so
ALLTOALL_HINT_RATIO = 1.5


def calibration_hints(predicted: Trace) -> tuple[str, ...]:
    """What to do when the prediction priced its actions from the datasheet (``costs_from: model``)."""
    if predicted.meta.get("costs_from") != "model":
        return ()
    return ("the prediction used datasheet costs (costs_from: model: the device's peak FLOP/s and bandwidths from "
            "the catalogue), not this machine's measured ones, so a large error is expected; to calibrate, measure "
            "this machine with `ppexec profile SCENARIO --out profile.yaml`, predict again with `ppsim run SCENARIO "
            "--profile profile.yaml --save-trace predicted.json` and compare that, or run `ppexec validate SCENARIO "
            "--out DIR`, which does all of it",)


def alltoall_hints(predicted: Trace, measured: Trace) -> tuple[str, ...]:
    """Where both traces record their ranks' expert-parallel all-to-alls (``meta.alltoall_ms``) and
    the run spent more than half again the predicted time in them: how much, the run's routing skew
    beside the prediction's, and what prices it."""
    pred, meas = predicted.meta.get("alltoall_ms"), measured.meta.get("alltoall_ms")
    if not pred or not meas or max(meas) <= ALLTOALL_HINT_RATIO * max(pred):
        return ()
    skew_p, skew_m = predicted.meta.get("routing_skew"), measured.meta.get("routing_skew")
    skews = (f"; the run's routing skew {skew_m:.2f} (meta.routing_skew), the prediction's {skew_p:.2f}: set "
             f"model.moe.skew: {skew_m:.2f} to price the busiest rank's share"
             if skew_m is not None and skew_p is not None and skew_m > skew_p + 0.01 else "")
    return (f"the all-to-alls took {max(meas):.1f} ms a step on the busiest rank, predicted {max(pred):.1f} ms "
            f"(meta.alltoall_ms){skews}; a rank's time in them also holds its wait for the later rank, which "
            "the prediction leaves to the routing's skew (docs/moe.md)",)


# ----- the comparison ----------------------------------------------------------------------------


def compare_traces(predicted: Trace, measured: Trace, top: int = 10) -> Comparison:
    """Compare two traces of the same plan; the ``top`` largest disagreements are kept in ``worst``,
    the ``top`` largest differences per kind and stage in ``causes``.

    Raises :class:`~ppsim.errors.TraceError` for an empty trace, different rank counts or
    different compute actions (the message says what differs and the likely cause).
    """
    p_idx = _index(predicted, "predicted")
    m_idx = _index(measured, "measured")
    _check_comparable(predicted, measured, p_idx, m_idx)
    p_sum, m_sum = summarize(predicted), summarize(measured)
    if m_sum.step_time_ms <= 0:
        raise TraceError("the measured trace has a step time of 0 ms: its spans are all empty")

    keys = sorted((k for k in m_idx if k in p_idx), key=lambda k: (k[0], m_idx[k].start, k[1]))
    pairs = [(p_idx[k], m_idx[k]) for k in keys]
    ds = [_disagreement(p, m) for p, m in pairs]
    by_kind: dict[str, KindErrors] = {}
    for kind in Kind:
        sel = [i for i, d in enumerate(ds) if d.kind == kind.value]
        if sel:
            by_kind[kind.value] = _kind_errors(kind.value, [ds[i] for i in sel], [pairs[i] for i in sel])

    ranks = tuple(
        RankComparison(
            rank=p.rank,
            predicted_busy_ms=p.busy_ms,
            measured_busy_ms=m.busy_ms,
            predicted_bubble_fraction=p.bubble_fraction,
            measured_bubble_fraction=m.bubble_fraction,
            bubble_error_pp=100.0 * (p.bubble_fraction - m.bubble_fraction),
        )
        for p, m in zip(p_sum.per_rank, m_sum.per_rank)
    )
    starts = [abs(d.start_delta_ms) for d in ds]
    durations = [abs(d.duration_delta_ms) for d in ds]
    order = sorted(ds, key=lambda d: (-(abs(d.start_delta_ms) + abs(d.duration_delta_ms)), d.rank, d.measured_start_ms))
    diffs = _meta_differences(predicted, measured)
    return Comparison(
        scenario=predicted.meta.get("scenario") or measured.meta.get("scenario"),
        predicted_schedule=p_sum.schedule,
        measured_schedule=m_sum.schedule,
        predicted_step_time_ms=p_sum.step_time_ms,
        measured_step_time_ms=m_sum.step_time_ms,
        step_time_error=(p_sum.step_time_ms - m_sum.step_time_ms) / m_sum.step_time_ms,
        predicted_bubble_fraction=p_sum.bubble_fraction,
        measured_bubble_fraction=m_sum.bubble_fraction,
        ranks=ranks,
        max_abs_bubble_error_pp=max(abs(r.bubble_error_pp) for r in ranks),
        matched=len(ds),
        by_kind=by_kind,
        start_error_ms_median=_median(starts),
        start_error_ms_p90=percentile(starts, 90),
        duration_error_ms_median=_median(durations),
        duration_error_ms_p90=percentile(durations, 90),
        worst=tuple(order[: max(0, top)]),
        unmatched=tuple(_unmatched_notes(p_idx, m_idx)),
        meta_differences=tuple(diffs),
        causes=_causes(pairs, top),
        costs_from=predicted.meta.get("costs_from"),
        hints=calibration_hints(predicted) + alltoall_hints(predicted, measured),
    )
