"""A trace drawn as character cells: a row per rank (and per communication lane when asked), a
column per slice of the time window, each cell coloured by the action that covers most of it.

Pure: the same trace, window and width give the same cells. A block's label (its micro-batch, as
on the HTML page) is written into it where it fits; idle time (the bubble) is a dim dot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rich.text import Text

from ppsim.trace import LANES, Span, Trace
from ppsim.trace.metrics import step_bounds
from ppsim.views.labels import bar_text, chunk_of_stage
from ppsim.views.palette import KIND_COLORS, UNKNOWN_KIND_COLOR

LABEL_WIDTH = 9  #: the row name column ("rank 12 ", " send")
IDLE = "·"
IDLE_STYLE = "grey37"
SELECTED_STYLE = "bold reverse"


@dataclass(frozen=True)
class Row:
    rank: int
    lane: str

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.lane == "compute" else f" {self.lane[:LABEL_WIDTH - 2]}"


@dataclass(frozen=True)
class Drawn:
    """What :func:`draw` made: a line per row and which span each cell shows (None: idle)."""

    rows: list[Row]
    lines: list[Text]
    cells: list[list[Span | None]]

    def span_at(self, row: int, column: int) -> Span | None:
        """The span under a cell of the time area (``column`` counts from the left of the time area)."""
        if 0 <= row < len(self.cells) and 0 <= column < len(self.cells[row]):
            return self.cells[row][column]
        return None


def rows_of(trace: Trace, lanes: bool) -> list[Row]:
    """Compute rows, one per rank; with ``lanes`` each rank's communication rows under it."""
    used = {s.lane for s in trace.spans}
    kinds = ["compute"] + ([ln for ln in LANES if ln != "compute" and ln in used] if lanes else [])
    return [Row(r, ln) for r in range(trace.num_ranks) for ln in kinds]


def cover(spans: list[Span], start: float, end: float, width: int) -> list[Span | None]:
    """For each of ``width`` columns over [start, end), the span overlapping it most (None: idle).
    A span shorter than a column still shows when nothing longer shares its column."""
    cells: list[Span | None] = [None] * width
    best = [0.0] * width
    if width <= 0 or end <= start:
        return cells
    dt = (end - start) / width
    for s in spans:
        if s.end <= start or s.start >= end:
            continue
        c0 = max(0, int((s.start - start) / dt))
        c1 = min(width - 1, max(c0, math.ceil((s.end - start) / dt) - 1))
        for c in range(c0, c1 + 1):
            lo, hi = start + c * dt, start + (c + 1) * dt
            overlap = min(s.end, hi) - max(s.start, lo)
            amount = overlap if overlap > 0 else 1e-12  # zero-length spans still mark their column
            if amount > best[c]:
                best[c], cells[c] = amount, s
    return cells


def _text_colour(background: str) -> str:
    """Black or white, whichever reads on ``background`` (#rrggbb)."""
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"


def draw_row(cells: list[Span | None], chunk_of: Mapping[int, int], selected: Span | None) -> Text:
    """One row's cells as styled text: runs of one span are a block with its label where it fits."""
    text = Text(no_wrap=True, overflow="crop")
    i, n = 0, len(cells)
    while i < n:
        span = cells[i]
        j = i
        while j < n and cells[j] is span:
            j += 1
        run = j - i
        if span is None:
            text.append(IDLE * run, style=IDLE_STYLE)
        else:
            colour = KIND_COLORS.get(span.action.kind, UNKNOWN_KIND_COLOR)
            style = f"{_text_colour(colour)} on {colour}"
            if selected is not None and span == selected:
                style += " " + SELECTED_STYLE
            label = bar_text(span, chunk_of)
            body = label.center(run) if len(label) <= run else " " * run
            text.append(body, style=style)
        i = j
    return text


def draw(trace: Trace, window_start: float, window_end: float, width: int, lanes: bool = False,
         selected: Span | None = None) -> Drawn:
    """The trace's rows over the window (ms from the trace's first span) in ``width`` columns."""
    origin, _ = step_bounds(trace)
    start, end = origin + window_start, origin + window_end
    rows = rows_of(trace, lanes)
    by_row: dict[tuple[int, str], list[Span]] = {}
    for s in trace.spans:
        by_row.setdefault((s.rank, s.lane), []).append(s)
    chunk_of = chunk_of_stage(trace)
    lines, cells = [], []
    for row in rows:
        row_cells = cover(sorted(by_row.get((row.rank, row.lane), []), key=lambda s: s.start), start, end, width)
        line = Text(no_wrap=True, overflow="crop")
        line.append(f"{row.label:<{LABEL_WIDTH}}", style="bold" if row.lane == "compute" else "dim")
        line.append_text(draw_row(row_cells, chunk_of, selected))
        lines.append(line)
        cells.append(row_cells)
    return Drawn(rows, lines, cells)


def axis(window_start: float, window_end: float, width: int) -> Text:
    """A time axis under the rows: tick labels in ms at about every 20 columns."""
    line = [" "] * width
    if width <= 0:
        return Text(" " * LABEL_WIDTH)
    span = window_end - window_start
    step = max(1, width // max(1, width // 20))
    for c in range(0, width, step):
        t = window_start + span * c / width
        label = f"|{_fmt_ms(t)}"
        if c + len(label) <= width:
            line[c:c + len(label)] = list(label)
    return Text(f"{'ms':<{LABEL_WIDTH}}" + "".join(line), style="dim", no_wrap=True)


def _fmt_ms(t: float) -> str:
    if abs(t) >= 100:
        return f"{t:,.0f}"
    if abs(t) >= 1:
        return f"{t:.1f}"
    return f"{t:.3g}"
