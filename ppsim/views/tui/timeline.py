"""A trace drawn as character cells: a row per rank (and per communication lane when asked), a
column per slice of the time window.

Pure: the same trace, window and width give the same cells. A cell inside a block takes the block's
colour; a cell holding several pieces is a bar as high as its busy share (``cells``), so the bubble
shows at any zoom. A block carries its label (its micro-batch, as on the HTML page) only where the
label fits with a blank on each side, so two labels never touch; two blocks of one colour that
meet are parted by a thin line. Idle cells are a dim dot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.text import Text

from ppsim.trace import Span, Trace
from ppsim.views.labels import bar_text
from ppsim.views.palette import KIND_COLORS, UNKNOWN_KIND_COLOR, chunk_shade
from ppsim.views.tui.cells import EIGHTHS, Cells, measure
from ppsim.views.tui.index import TraceIndex
from ppsim.views.tui.legend import IDLE, IDLE_STYLE, text_colour

LABEL_WIDTH = 9  #: the row name column ("rank 12 ", " send")
SELECTED_STYLE = "bold reverse"
CRITICAL_STYLE = "underline"  #: the cells of a span on the step's critical path
EDGE = "▏"  #: where two blocks of one colour meet


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


def rows_of(index: TraceIndex, lanes: bool) -> list[Row]:
    """Compute rows, one per rank; with ``lanes`` each rank's communication rows under it."""
    kinds = index.lanes(lanes)
    return [Row(r, ln) for r in range(index.num_ranks) for ln in kinds]


def _colour(cells: Cells, c: int, chunk_of: Mapping[int, int], chunks: int) -> str:
    """The cell's kind colour, in its block's chunk's shade when ranks hold several (``chunks``)."""
    kind = cells.kinds[c]
    colour = UNKNOWN_KIND_COLOR if kind is None else KIND_COLORS.get(kind, UNKNOWN_KIND_COLOR)
    span = cells.top[c]
    if chunks < 2 or span is None or span.action.kind is not kind:
        return colour
    return chunk_shade(colour, chunk_of.get(span.action.stage, 0), chunks)


def _blocks(cells: Cells) -> list[tuple[int, int]]:
    """Runs [i, j) of whole cells inside one span: the blocks that may carry a label."""
    runs, i, n = [], 0, len(cells.top)
    while i < n:
        j = i + 1
        if cells.solid[i]:
            while j < n and cells.solid[j] and cells.top[j] is cells.top[i]:
                j += 1
            runs.append((i, j))
        i = j
    return runs


def _marked(cells: Cells, selected: Span | None, start: float, end: float) -> set[int]:
    """The cells showing the selected span: those it covers most, or the one at its middle."""
    if selected is None:
        return set()
    marked = {c for c, s in enumerate(cells.top) if s is selected or s == selected}
    width = len(cells.top)
    if not marked and width and end > start and start <= (selected.start + selected.end) / 2 < end:
        marked.add(int(((selected.start + selected.end) / 2 - start) / (end - start) * width))
    return marked


def draw_row(cells: Cells, chunk_of: Mapping[int, int], selected: Span | None = None,
             window: tuple[float, float] = (0.0, 0.0), on_path: frozenset[int] = frozenset()) -> Text:
    """One row's cells as styled text (``window``: the cells' [start, end), to find a selected
    span too short to own a cell); the cells whose span is on the critical path (``on_path``: the
    spans' ids) underlined."""
    n = len(cells.top)
    chunks = max(chunk_of.values(), default=0) + 1  # a rank's chunks, once per row
    chars = [IDLE] * n
    styles = [IDLE_STYLE] * n
    for c in range(n):
        e = cells.eighths(c)
        if e == 0:
            continue
        colour = _colour(cells, c, chunk_of, chunks)
        chars[c], styles[c] = (" ", f"{text_colour(colour)} on {colour}") if e == 8 else (EIGHTHS[e], colour)
    for c in range(1, n):
        starting = cells.starts[c]
        if starting is not None and starting is cells.kinds[c] and chars[c] == " " and chars[c - 1] in (" ", EDGE) \
                and styles[c - 1] == styles[c]:  # a block of the colour drawn before starts here
            chars[c] = EDGE
    for i, j in _blocks(cells):
        span = cells.top[i]
        assert span is not None
        label = bar_text(span, chunk_of)
        if len(label) + 2 <= j - i:
            at = i + (j - i - len(label)) // 2
            chars[at:at + len(label)] = list(label)
    if on_path:
        for c, span in enumerate(cells.top):
            if span is not None and id(span) in on_path and cells.eighths(c):
                styles[c] += " " + CRITICAL_STYLE
    for c in _marked(cells, selected, *window):
        styles[c] += " " + SELECTED_STYLE
    text = Text(no_wrap=True, overflow="crop")
    i = 0
    while i < n:  # one segment per run of one style
        j = i + 1
        while j < n and styles[j] == styles[i]:
            j += 1
        text.append("".join(chars[i:j]), style=styles[i])
        i = j
    return text


@dataclass(frozen=True)
class Measured:
    """A trace's rows measured over a window: what a new selection redraws without measuring again."""

    rows: list[Row]
    cells: list[Cells]
    start: float  #: the window on the trace's clock
    end: float


def measure_rows(index: TraceIndex, window_start: float, window_end: float, width: int, lanes: bool) -> Measured:
    """Every shown row's cells over the window (ms from the trace's first span)."""
    origin, _ = index.bounds
    start, end = origin + window_start, origin + window_end
    rows = rows_of(index, lanes)
    return Measured(rows, [measure(index.row(r.rank, r.lane).in_window(start, end), start, end, width) for r in rows],
                    start, end)


def render_rows(index: TraceIndex, measured: Measured, selected: Span | None = None,
                on_path: frozenset[int] = frozenset()) -> Drawn:
    """The measured rows as lines of text, the selected span marked, the critical path's spans
    (``on_path``: their ids) underlined."""
    lines = []
    for row, cells in zip(measured.rows, measured.cells):
        on_row = selected if selected is not None and (selected.rank, selected.lane) == (row.rank, row.lane) else None
        line = Text(no_wrap=True, overflow="crop")
        line.append(f"{row.label:<{LABEL_WIDTH}}", style="bold" if row.lane == "compute" else "dim")
        line.append_text(draw_row(cells, index.chunk_of, on_row, (measured.start, measured.end), on_path))
        lines.append(line)
    return Drawn(measured.rows, lines, [c.top for c in measured.cells])


def draw(source: Trace | TraceIndex, window_start: float, window_end: float, width: int, lanes: bool = False,
         selected: Span | None = None, on_path: frozenset[int] = frozenset()) -> Drawn:
    """The trace's rows over the window (ms from the trace's first span) in ``width`` columns."""
    index = source if isinstance(source, TraceIndex) else TraceIndex(source)
    return render_rows(index, measure_rows(index, window_start, window_end, width, lanes), selected, on_path)


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


MEMORY_OK, MEMORY_OVER = "green3", "red1"  #: a memory cell within / beyond the device's memory


def memory_peaks(points: list[tuple[float, float]], start: float, end: float, width: int) -> list[float | None]:
    """A step counter (``points``: time, value; held until the next, in time order) as the most it
    holds in each of ``width`` cells of [start, end) (the page's rule,
    :func:`~ppsim.views.render.memory.binned_peaks`): None before its first point."""
    import numpy as np

    from ppsim.views.render.memory import binned_peaks

    if width <= 0 or end <= start or not points:
        return [None] * width
    times, values = np.array([t for t, _ in points]), np.array([v for _, v in points], dtype=float)
    edges = start + np.arange(width + 1) * (end - start) / width
    peaks = binned_peaks(times, values, edges)
    return [float(v) if times[0] < hi else None for v, hi in zip(peaks, edges[1:])]


def memory_rows(trace: Trace, window_start: float, window_end: float, width: int) -> list[Text]:
    """A row per rank of its memory over the window (ms from the trace's first span): each cell a
    bar as high as the most it holds there over the device's memory (or the highest value), green
    within the device, red beyond; [] without a ``memory_bytes`` counter."""
    counters = {c.rank: sorted(c.points) for c in trace.counters if c.name == "memory_bytes" and c.points}
    if not counters:
        return []
    origin = min(s.start for s in trace.spans)
    start, end = origin + window_start, origin + window_end
    capacity = trace.meta.get("device_memory_bytes") if trace.meta.get("memory_measured") != "rss" else None
    top = max(max(v for _, v in pts) for pts in counters.values())
    scale = max(top, capacity or 0.0) or 1.0
    what = "memory (RSS)" if trace.meta.get("memory_measured") == "rss" else "memory"
    full = (f"the device's {capacity / 2**30:,.0f} GiB" if capacity and capacity >= top
            else f"the highest, {top / 2**30:,.1f} GiB"
            + (f" (red: beyond the device's {capacity / 2**30:,.0f} GiB)" if capacity else ""))
    lines = [Text(f"{what} per rank: a cell's height is the most it holds there, a full cell {full}", style="dim",
                  no_wrap=True)]
    for rank in range(trace.num_ranks):
        line = Text(f"{'mem ' + str(rank):<{LABEL_WIDTH}}", style="dim", no_wrap=True, overflow="crop")
        for value in memory_peaks(counters.get(rank, []), start, end, width):
            if value is None:
                line.append(" ")
                continue
            level = max(1, min(8, round(8 * value / scale)))
            line.append(EIGHTHS[level], style=MEMORY_OVER if capacity and value > capacity else MEMORY_OK)
        lines.append(line)
    return lines
