"""Timeline page of a Trace, as a Plotly figure / offline HTML: an overview strip of idle time per
rank over the whole step, the Gantt under it, memory per rank under that.

The time axis is numeric (milliseconds on the trace's clock): bars are ``go.Bar(orientation="h")``
with ``base`` = start and ``x`` = duration, never ``px.timeline`` (which turns numbers into dates).
The Gantt and the memory plot share their time axis and each shows it; the overview keeps the
whole step, and dragging on it zooms the two below (the page's script, :mod:`.page`). Action kinds
and memory lines have separate legends. Plotly is imported here only, on first use.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppsim.errors import TraceError
from ppsim.trace import Trace
from ppsim.trace.critical import critical_path
from ppsim.trace.metrics import Summary, step_bounds, summarize
from ppsim.views.labels import chunk_of_stage
from ppsim.views.render.assemble import assemble
from ppsim.views.render.bars import (
    LABEL_SIZE,
    Rows,
    alltoall_bar,
    bar_traces,
    critical_bar,
    rows_axis,
    rows_of,
    waiting_bar,
)
from ppsim.views.render.memory import (
    GIB,
    MEMORY_LEGEND,
    PARTS_LEGEND,
    RANK_LINES,
    add_limit,
    memory_heatmap,
    memory_lines,
    peak_part_bars,
)
from ppsim.views.render.overview import overview_heatmap
from ppsim.views.render.page import overview_meta, write_figure

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

__all__ = ["figure_title", "gantt_figure", "write_figure", "write_html"]

ROW_PX = 22  #: pixels per compute row, while the Gantt fits GANTT_MAX_PX
GANTT_MAX_PX, MIN_ROW_PX = 900, 6
MEMORY_PX = 240
HEAT_PX = (240, 5, 480)  #: the memory heat map: at least, per rank, at most
PARTS_PX = 200
GAP_PX = 70  #: between plots: tick labels, the next plot's title
FRAME = {"color": "#333", "width": 1.5}  #: the overview's frame around the window the timeline shows
BAND_COLOR = "#f3f5f8"  #: every other rank's rows


def figure_title(trace: Trace, summary: Summary | None = None) -> str:
    """Header: scenario, schedule, sizes, source; step time, bubble, throughput, MFU, peak memory per
    rank (from ``summary`` when given: the trace's summary without waits)."""
    s = summary or summarize(trace, waits=False)  # the headline figures only
    name = trace.meta.get("scenario") or "trace"
    figures = [f"step time {s.step_time_ms:.2f} ms", f"bubble {s.bubble_fraction:.1%}"]
    if s.throughput_samples_per_s is not None:
        rate = f"throughput {s.throughput_samples_per_s:,.1f} samples/s"
        if s.tokens_per_s is not None:
            rate += f" ({s.tokens_per_s:,.0f} tokens/s)"
        figures.append(rate)
    if s.mfu is not None:
        figures.append(f"MFU {s.mfu:.1%}")
    peaks = [r.peak_memory_bytes for r in s.per_rank]
    known = [x for x in peaks if x is not None]
    if known and len(known) == len(peaks):  # every rank's peak is known
        if len(known) <= RANK_LINES:
            memory = f"peak memory per rank {', '.join(f'{x / GIB:.1f}' for x in known)} GiB"
        else:
            top = max(range(len(known)), key=known.__getitem__)
            memory = (f"peak memory per rank {min(known) / GIB:.1f} to {known[top] / GIB:.1f} GiB"
                      f" (rank {s.per_rank[top].rank})")
        if s.memory_capacity_bytes:
            memory += f" of {s.memory_capacity_bytes / GIB:.0f} GiB: {'fits' if s.fits else 'DOES NOT FIT'}"
        figures.append(memory)
    return (
        f"{name} · {s.schedule} · {s.num_ranks} ranks × {s.chunks} chunk{'s' if s.chunks != 1 else ''}"
        f" · {s.microbatches} micro-batches · {s.source}"
        f"<br><sup>{' · '.join(figures)}</sup>"
    )


def rank_ticks(ranks: int, px: float) -> dict[str, Any]:
    """A rank axis of ``px`` pixels: every rank named while they stand 10 px apart, else every n-th."""
    every = max(1, math.ceil(10 * ranks / px))
    return {"tickvals": list(range(0, ranks, every)), "ticktext": [f"rank {r}" for r in range(0, ranks, every)],
            "tickfont": {"size": 10}}


def gantt_height(rows: Rows) -> int:
    """Pixels of the Gantt: :data:`ROW_PX` per compute row, less when that would pass :data:`GANTT_MAX_PX`."""
    return round(rows.extent * max(MIN_ROW_PX, min(ROW_PX, GANTT_MAX_PX / rows.extent)))


def overview_height(ranks: int) -> int:
    return max(48, min(140, 12 * ranks))


def rank_bands(rows: Rows, xref: str, yref: str) -> list[dict[str, Any]]:
    """Shading behind every other rank's rows, so a rank's compute and message rows read as one."""
    return [{"type": "rect", "xref": f"{xref} domain", "yref": yref, "x0": 0, "x1": 1, "y0": lo, "y1": hi,
             "fillcolor": BAND_COLOR, "line": {"width": 0}, "layer": "below"}
            for i, (lo, hi) in enumerate(rows.rank_bands()) if i % 2]


def gantt_figure(trace: Trace, title: str | None = None) -> go.Figure:
    """The timeline page of ``trace``: overview strip, Gantt, memory per rank (when the trace has a
    ``memory_bytes`` counter) with the device's memory.

    A measured trace's counter is what ppexec read after each action: the device allocator's bytes,
    or on CPUs the process's resident memory (then no device line). ``title`` replaces the first
    header line (the figures line is kept). Raises :class:`~ppsim.errors.TraceError` when the
    trace has no spans.
    """
    from plotly.subplots import make_subplots

    if not trace.spans:
        raise TraceError("the trace has no spans: there is nothing to draw")
    rows = rows_of(trace)
    critical = critical_path(trace)
    bars = bar_traces(trace, rows, path=critical)
    exchanges = alltoall_bar(trace, rows)
    if exchanges is not None:
        bars.append(exchanges)
    waits = waiting_bar(trace, rows, critical)
    if waits is not None:  # over the blocks it hatches
        bars.append(waits)
    outline = critical_bar(trace, rows, critical)
    if outline is not None:  # drawn last: over the bars it outlines, its hover theirs
        bars.append(outline)
    summary = summarize(trace, waits=False)
    capacity = trace.meta.get("device_memory_bytes") if trace.meta.get("memory_measured") != "rss" else None
    heat = trace.num_ranks > RANK_LINES
    memory = memory_heatmap(trace, capacity) if heat else memory_lines(trace)
    parts = peak_part_bars(summary.per_rank)
    header = figure_title(trace, summary)
    if title:
        header = title + "<br>" + header.split("<br>", 1)[1]
    memory_px = max(HEAT_PX[0], min(HEAT_PX[2], HEAT_PX[1] * trace.num_ranks)) if heat else MEMORY_PX
    heights = ([overview_height(trace.num_ranks), gantt_height(rows)] + ([memory_px] if memory else [])
               + ([PARTS_PX] if parts else []))
    total = sum(heights) + GAP_PX * (len(heights) - 1)
    memory_title = "memory per rank over the step" + (": the most in each time bin" if heat else "")
    titles = ["idle compute per rank over the step: drag here to zoom the timeline, double-click for all",
              "timeline"] + ([memory_title] if memory else []) + (["each rank's memory at its peak"] if parts else [])
    grid = make_subplots(rows=len(heights), cols=1, row_heights=heights, vertical_spacing=GAP_PX / total,
                         subplot_titles=titles)
    start, end = step_bounds(trace)
    grid.add_shape(type="rect", xref="x", yref="y domain", x0=start, x1=end, y0=0, y1=1, line=FRAME)
    for band in rank_bands(rows, "x2", "y2"):
        grid.add_shape(band)
    grid.update_xaxes(range=[start, end], showgrid=False, tickfont={"size": 10}, row=1, col=1)
    grid.update_yaxes(autorange="reversed", fixedrange=True, showgrid=False, row=1, col=1,
                      **rank_ticks(trace.num_ranks, heights[0]))
    grid.update_xaxes(type="linear", range=[start, end], title={"text": "time (ms)", "standoff": 4}, showgrid=True,
                      gridcolor="#e4e4e4", row=2, col=1)
    grid.update_yaxes(**rows_axis(rows), row=2, col=1)
    overview_domain = grid.layout.yaxis.domain
    gantt_domain = grid.layout.yaxis2.domain
    overview = overview_heatmap(trace)
    overview.colorbar.update(y=sum(overview_domain) / 2, len=overview_domain[1] - overview_domain[0], x=1.01,
                             xanchor="left")
    layout: dict[str, Any] = {
        "title": {"text": header, "x": 0.01},
        "barmode": "overlay",
        "uniformtext": {"mode": "hide", "minsize": LABEL_SIZE},
        "legend": {"title": {"text": "action kind" + ("<br><sup>darker: later chunks</sup>" if chunk_of_stage(trace) else "")},
                   "x": 1.01, "xanchor": "left", "y": gantt_domain[1],
                   "yanchor": "top", "tracegroupgap": 2},
        "height": total + 160,
        "margin": {"l": 80, "r": 150, "t": 110, "b": 50},
        "plot_bgcolor": "white",
        "meta": overview_meta("xaxis", "xaxis2", (start, end), 0),
    }
    placed: list[tuple[Any, int, int]] = [(overview, 1, 1), *((b, 2, 1) for b in bars)]
    if memory:
        grid.update_xaxes(matches="x2", type="linear", title={"text": "time (ms)", "standoff": 4}, showgrid=True,
                          gridcolor="#e4e4e4", row=3, col=1)
        what = "process memory, RSS (GiB)" if trace.meta.get("memory_measured") == "rss" else "memory (GiB)"
        layout[MEMORY_LEGEND] = {"title": {"text": "memory"}, "x": 1.01, "xanchor": "left",
                                 "y": grid.layout.yaxis3.domain[1], "yanchor": "top"}
        if heat:
            grid.update_yaxes(autorange="reversed", showgrid=False, row=3, col=1,
                              **rank_ticks(trace.num_ranks, memory_px))
            domain = grid.layout.yaxis3.domain
            memory[0].colorbar.update(y=domain[1], yanchor="top", len=0.6 * (domain[1] - domain[0]), x=1.01,
                                      xanchor="left")
            peak = memory[1]
            grid.add_annotation(x=peak.x[0], y=peak.y[0], text=peak.text[0], showarrow=False, xanchor="left",
                                xshift=10, font={"size": 11}, bgcolor="rgba(255,255,255,0.85)", row=3, col=1)
            layout[MEMORY_LEGEND].update(y=domain[0], yanchor="bottom")  # the colour bar above it
        else:
            grid.update_yaxes(title={"text": what}, rangemode="tozero", showgrid=True, gridcolor="#ddd", row=3, col=1)
            if capacity:
                add_limit(grid, capacity, max(float(max(line.y)) for line in memory), row=3, col=1)
        placed += [(m, 3, 1) for m in memory]
    if parts:
        row = 3 + bool(memory)
        grid.update_xaxes(title={"text": "rank", "standoff": 4}, type="linear", dtick=1 if trace.num_ranks <= 32 else None,
                          range=[-0.6, trace.num_ranks - 0.4], row=row, col=1)
        grid.update_yaxes(title={"text": "GiB"}, showgrid=True, gridcolor="#ddd", row=row, col=1)
        tops = [float(y) for y in parts[-1].y]  # the markers on each bar's top
        if capacity:
            add_limit(grid, capacity, max(tops), row=row, col=1)
        else:
            grid.update_yaxes(rangemode="tozero", row=row, col=1)
        top = max(range(len(tops)), key=tops.__getitem__)
        grid.add_annotation(x=top, y=tops[top], text=f"rank {top}: {tops[top]:,.1f} GiB", showarrow=False,
                            yanchor="bottom", font={"size": 11}, bgcolor="rgba(255,255,255,0.8)", row=row, col=1)
        axis = grid.layout[f"yaxis{row}"]
        layout[PARTS_LEGEND] = {"title": {"text": "at the peak"}, "x": 1.01, "xanchor": "left",
                                "y": axis.domain[1], "yanchor": "top"}
        placed += [(b, row, 1) for b in parts]
    grid.update_layout(**layout)
    return assemble(grid, placed)


def write_html(trace: Trace, path: str | Path, title: str | None = None) -> Path:
    """Write the timeline page as one self-contained HTML file (plotly.js inlined, works offline); returns the path."""
    return write_figure(gantt_figure(trace, title), path)
