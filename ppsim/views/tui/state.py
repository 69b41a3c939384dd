"""What the TUI shows and how its keys change it: a scenario with plan overrides and its prediction,
or saved traces; the time window; the selected block. No Textual here.

The state is handed the function that predicts a scenario (``ppsim.predict``'s, from the CLI), so
the views never drive the simulator themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ppsim.errors import PpsimError, TraceError
from ppsim.inputs.scenario import Scenario
from ppsim.plan.schedules import NAMES, describe
from ppsim.trace import Span, Trace
from ppsim.trace.critical import CriticalPath, critical_path
from ppsim.trace.metrics import Summary, summarize
from ppsim.views.tui.index import TraceIndex

Predictor = Callable[[Scenario], Trace]  #: the predicted trace of a scenario

MIN_WINDOW_MS = 1e-6
PAN_FRACTION = 0.25  #: an arrow key moves the window by this share of its width
ZOOM_FACTOR = 2.0


@dataclass
class Shown:
    """One timeline on screen: its trace and figures (``label`` names it in a comparison)."""

    label: str
    trace: Trace
    summary: Summary

    @cached_property
    def index(self) -> TraceIndex:
        """The trace's rows, sorted once: what drawing and selection read."""
        return TraceIndex(self.trace)

    @cached_property
    def path(self) -> CriticalPath:
        """The step's critical path (what the timeline underlines and the detail line explains)."""
        return critical_path(self.trace)


@dataclass
class Window:
    """The time window [start, end) in ms, inside the bounds [lo, hi] of what is shown."""

    lo: float
    hi: float
    start: float = 0.0
    end: float = 0.0

    def __post_init__(self) -> None:
        if self.end <= self.start:
            self.start, self.end = self.lo, self.hi

    @property
    def width(self) -> float:
        return self.end - self.start

    def place(self, start: float, width: float) -> None:
        """Show ``width`` ms from ``start``, kept inside the bounds."""
        width = min(max(width, MIN_WINDOW_MS), max(self.hi - self.lo, MIN_WINDOW_MS))
        start = min(max(start, self.lo), self.hi - width)
        self.start, self.end = start, start + width

    def zoom(self, factor: float) -> None:
        """Zoom around the centre: ``factor`` > 1 shows less time (in), < 1 more (out)."""
        centre = (self.start + self.end) / 2
        width = self.width / factor
        self.place(centre - width / 2, width)

    def pan(self, fraction: float) -> None:
        self.place(self.start + fraction * self.width, self.width)

    def to_start(self) -> None:
        self.place(self.lo, self.width)

    def to_end(self) -> None:
        self.place(self.hi - self.width, self.width)

    def fit(self) -> None:
        self.place(self.lo, self.hi - self.lo)

    def rebound(self, lo: float, hi: float) -> None:
        """New bounds (a rerun changed the step): keep the zoom when it still fits, else show all."""
        was_all = self.start <= self.lo and self.end >= self.hi
        self.lo, self.hi = lo, hi
        if was_all or self.width >= hi - lo:
            self.fit()
        else:
            self.place(self.start, self.width)


_STAGE_TRIES = 64  #: stage counts ``p`` / ``P`` tries past those that cannot run


@dataclass
class TuiState:
    """Everything on screen. Built by :meth:`from_scenario` (plan keys active) or :meth:`from_traces`."""

    shown: list[Shown]
    window: Window
    scenario: Scenario | None = None
    message: str = ""  #: the last key's result (an error, a note), shown in the status line
    rerun_ms: float | None = None  #: how long the last simulation took
    selected: tuple[int, Span] | None = None  #: (timeline, span)
    lanes: bool = False  #: show the send / recv / collective rows too
    lanes_chosen: bool = False  #: ``l`` was pressed: the lanes stay as chosen, whatever the room
    memory: bool = False  #: show memory per rank over the window under each timeline (when there is room)
    critical: bool = True  #: underline the critical path
    predictor: Predictor | None = None  #: reruns the prediction after a plan key (None: saved traces)
    schedules: list[str] = field(default_factory=list)  #: what ``s`` cycles through

    # ----- building ----------------------------------------------------------------------------
    @classmethod
    def from_scenario(cls, s: Scenario, predictor: Predictor) -> TuiState:
        shown, ms = _predict(s, predictor)
        return cls(shown=[shown], window=Window(*_bounds([shown])), scenario=s, rerun_ms=ms, predictor=predictor,
                   schedules=list(NAMES))

    @classmethod
    def from_traces(cls, traces: list[tuple[str, Trace]]) -> TuiState:
        shown = []
        for label, trace in traces:
            if not trace.spans:
                raise TraceError(f"{label}: the trace has no spans; there is nothing to show")
            shown.append(Shown(label, trace, summarize(trace, waits=False)))  # the TUI shows no waits
        return cls(shown=shown, window=Window(*_bounds(shown)))

    # ----- plan keys ---------------------------------------------------------------------------
    @property
    def editable(self) -> bool:
        return self.scenario is not None

    def cycle_schedule(self) -> None:
        s = self._need_scenario()
        names = self.schedules
        i = names.index(s.pipeline.schedule) if s.pipeline.schedule in names else -1
        for step in range(1, len(names)):
            name = names[(i + step) % len(names)]
            if self._apply({"schedule": name}, quiet=True):  # on the chunks it takes (apply_overrides)
                self.message = f"schedule {s.pipeline.schedule} -> {name}" + _chunks_change(s, self.scenario)
                if step > 1:
                    self.message += f" ({step - 1} cannot run this plan)"
                return
        self.message = "no other schedule can run this plan"

    def scale_microbatches(self, factor: float) -> None:
        s = self._need_scenario()
        m = max(1, round(s.microbatches * factor))
        if m == s.microbatches:
            self.message = f"micro-batches stay at {m}"
            return
        if self._apply({"microbatches": m}):
            new = self._need_scenario()
            b, d = new.training.micro_batch, new.data_parallel
            self.message = (f"micro-batches {s.microbatches} -> {m}: global batch {s.global_batch} -> {new.global_batch}"
                            f" ({b} x {m} micro-batches x {d} replicas); the micro-batch size and the replicas stay")

    def change_stages(self, delta: int) -> None:
        """The next stage count in ``delta``'s direction that runs (a uniform partition or a
        schedule's rules may skip some: the message says which and why); none: the plan stays."""
        s = self._need_scenario()
        now = s.pipeline.stages
        if now + delta < 1:
            self.message = "one stage is the least"
            return
        before = s.devices
        limit = s.model.layers if s.model is not None else now + _STAGE_TRIES
        skipped: list[tuple[int, str]] = []
        p = now + delta
        while 1 <= p <= max(limit, now + 1) and len(skipped) < _STAGE_TRIES:
            if self._apply({"stages": p}):
                break
            skipped.append((p, self.message))  # why it cannot run
            p += delta
        else:  # none runs: why, each kind of reason (the key it names) once, at the first count it stops
            reasons: dict[str, tuple[int, str]] = {}
            for q, why in skipped:
                reasons.setdefault(why.split(":", 1)[0], (q, why))
            self.message = (f"stages stay at {now}: no count {'above' if delta > 0 else 'below'} it runs; "
                            + "; ".join(f"{q}: {why}" for q, why in list(reasons.values())[:2]))
            return
        d, t, cp = s.data_parallel, s.tensor_parallel, s.context_parallel
        self.message = (f"stages {now} -> {p}: GPUs {before} -> {p * d * t * cp} ({p} stages x {d} replicas"
                        + (f" x {t} tensor-parallel" if t > 1 else "")
                        + (f" x {cp} context-parallel" if cp > 1 else "") + "): data parallelism and "
                        "micro-batches stay, so the GPU count follows the stages")
        if skipped:
            first, last = skipped[0][0], skipped[-1][0]
            which = str(first) if first == last else f"{min(first, last)} to {max(first, last)}"
            self.message += f"; {which} cannot run ({skipped[0][1]})"

    def cycle_chunks(self) -> None:
        s = self._need_scenario()
        chunks = describe(s.pipeline.schedule).chunks
        if chunks.fixed:
            self.message = f"{s.pipeline.schedule} runs {chunks.words()} per rank; press s for another schedule"
            return
        for v in (c for c in _next_chunks(s.pipeline.chunks) if chunks.allows(c)):
            if self._apply({"chunks": v}, quiet=True):
                self.message = f"chunks {s.pipeline.chunks} -> {v} per rank"
                return
        self.message = "no other chunk count runs this plan"

    def _need_scenario(self) -> Scenario:
        return self._editable()[0]

    def _editable(self) -> tuple[Scenario, Predictor]:
        if self.scenario is None or self.predictor is None:
            raise PpsimError("a saved trace is shown: its plan cannot change (open a scenario to edit the plan)")
        return self.scenario, self.predictor

    def _apply(self, changes: dict[str, Any], quiet: bool = False) -> bool:
        """Rerun with ``changes``; on an error keep what is shown and say why. True when it ran."""
        s, predictor = self._editable()
        try:
            new = s.with_overrides(**changes)  # the command line's rules: chunks, partition, global batch
            shown, ms = _predict(new, predictor)
        except PpsimError as exc:
            if not quiet:
                self.message = str(exc)
            return False
        self.scenario, self.shown, self.rerun_ms = new, [shown], ms
        self.message = ""
        self.selected = None
        self.window.rebound(*_bounds([shown]))
        return True

    # ----- selection ---------------------------------------------------------------------------
    def select(self, timeline: int, span: Span) -> None:
        self.selected = (timeline, span)

    def selected_span(self) -> Span | None:
        return self.selected[1] if self.selected else None

    def step_selection(self, delta: int) -> None:
        """Select the next (previous) block of the selected block's row, or rank 0's first (last)."""
        if self.selected is None:
            row = self.shown[0].index.row(0, "compute").spans
            if row:
                self.selected = (0, row[0] if delta > 0 else row[-1])
        else:
            t, span = self.selected
            row = self.shown[t].index.row(span.rank, span.lane).spans
            i = row.index(span) if span in row else 0
            self.selected = (t, row[min(max(i + delta, 0), len(row) - 1)])
        self._show_selected()

    def move_rank(self, delta: int) -> None:
        """Select the compute block of the next (previous) rank nearest in time to the selected one."""
        if self.selected is None:
            self.step_selection(1)
            return
        t, span = self.selected
        rows = [(k, r) for k, sh in enumerate(self.shown) for r in range(sh.trace.num_ranks)]
        k = min(max(rows.index((t, span.rank)) + delta, 0), len(rows) - 1)
        nt, nr = rows[k]
        row = self.shown[nt].index.row(nr, "compute").spans
        if row:
            at = (span.start + span.end) / 2
            self.selected = (nt, min(row, key=lambda s: abs((s.start + s.end) / 2 - at)))
            self._show_selected()

    def _show_selected(self) -> None:
        """Pan so the selected block is in the window."""
        if self.selected is None:
            return
        timeline, span = self.selected
        w, (lo, _) = self.window, self.origin(timeline)
        start, end = span.start - lo, span.end - lo
        if start < w.start or end > w.end:
            w.place((start + end) / 2 - w.width / 2, w.width)

    def origin(self, timeline: int) -> tuple[float, float]:
        """Bounds of a timeline's step on its own clock; the window's 0 is its start."""
        return self.shown[timeline].index.bounds


def _predict(s: Scenario, predictor: Predictor) -> tuple[Shown, float]:
    t0 = time.perf_counter()
    trace = predictor(s)
    summary = summarize(trace, waits=False)  # the TUI shows no waits: a key costs less without them
    ms = (time.perf_counter() - t0) * 1e3
    return Shown(s.name or "scenario", trace, summary), ms  # (a scenario file need not name itself)


def _next_chunks(v: int) -> list[int]:
    """Chunk counts to try after ``v``: the next larger ones of 1, 2, 3, 4, 6, 8, then back to 1."""
    order = [1, 2, 3, 4, 6, 8]
    return [c for c in order if c > v] + [c for c in order if c < v]


def _bounds(shown: list[Shown]) -> tuple[float, float]:
    """One time axis for all timelines: each starts at its own first span."""
    width = max(sh.index.bounds[1] - sh.index.bounds[0] for sh in shown)
    return 0.0, width


def _chunks_change(before: Scenario, after: Scenario | None) -> str:
    """``, chunks 1 -> 2`` when a schedule change took another chunk count, else nothing."""
    if after is None or after.pipeline.chunks == before.pipeline.chunks:
        return ""
    return f", chunks {before.pipeline.chunks} -> {after.pipeline.chunks} (the count it takes)"
