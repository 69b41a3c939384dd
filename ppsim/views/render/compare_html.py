"""The predicted and the measured timeline on one numeric time axis, as a self-contained HTML page.

Rows run rank by rank: ``rank R predicted`` then ``rank R measured``, each followed by a thinner
row of its sends, receives and collectives (``... · comm``) when the trace has any. Predicted bars
are paler. Each trace's times start at its own first span. One Plotly bar trace per action kind,
colours from the Gantt's :data:`~ppsim.views.palette.KIND_COLORS`. Under the timelines, memory per
rank over the step when a trace records it (beyond 8 ranks, the rank of the highest peak): predicted
dashed, measured solid, on one axis when the measured is the device allocator's, on an axis of its
own when it is the process's resident memory (which holds the interpreter and libraries too).
Plotly is imported here only, on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppsim.plan import Kind
from ppsim.trace import Span, Trace
from ppsim.trace.compare import Comparison, aligned, describe
from ppsim.views.labels import bar_text, chunk_of_stage
from ppsim.views.palette import KIND_COLORS
from ppsim.views.render.memory import MEMORY_LEGEND
from ppsim.views.render.page import write_figure

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SIDES = ("predicted", "measured")
_OPACITY = {"predicted": 0.55, "measured": 1.0}

#: hover text of a bar; its customdata row is :func:`hover_row`
HOVER = (
    "<b>%{customdata[0]}</b><br>rank %{customdata[1]} · %{customdata[2]}"
    "<br>start %{customdata[3]:.3f} ms<br>end %{customdata[4]:.3f} ms"
    "<br>duration %{customdata[5]:.3f} ms%{customdata[6]}<extra></extra>"
)


def _extra_hover(span: Span) -> str:
    out = ""
    if span.bytes is not None:
        out += f"<br>bytes {span.bytes:,} ({span.bytes / 2**20:.2f} MiB)"
    if span.peer is not None:
        out += f"<br>peer rank {span.peer}"
    return out


def hover_row(span: Span, label: str, extra: str = "") -> list[Any]:
    """The customdata row :data:`HOVER` shows: ``label`` in place of the lane, ``extra`` appended (HTML)."""
    return [str(span.action), span.rank, label, span.start, span.end, span.end - span.start,
            _extra_hover(span) + extra]


def timeline_layout(rows: list[str], title: str) -> dict[str, Any]:
    """Layout of the page: numeric ms axis, ``rows`` top to bottom, overlaid bars."""
    return {
        "title": {"text": title, "x": 0.01},
        "barmode": "overlay",
        "bargap": 0.0,
        "uniformtext": {"mode": "hide", "minsize": 8},
        "xaxis": {"type": "linear", "title": {"text": "time (ms)"}, "showgrid": True},
        "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": rows, "autorange": "reversed"},
        "legend": {"title": {"text": "kind"}, "traceorder": "normal"},
        "height": max(320, 120 + 22 * len(rows)),
        "margin": {"l": 110, "r": 20, "t": 80, "b": 50},
        "plot_bgcolor": "white",
    }


def kind_bars(kind: Kind, spans: list[Span], rows: list[str], texts: list[str], customdata: list[list[Any]],
              opacity: list[float]) -> go.Bar:
    """One bar trace for the spans of one kind: numeric base and length, compute bars full, messages thinner."""
    import plotly.graph_objects as go

    return go.Bar(
        name=kind.value, orientation="h", base=[s.start for s in spans], x=[s.end - s.start for s in spans], y=rows,
        width=[0.8 if s.lane == "compute" else 0.4 for s in spans],
        marker={"color": KIND_COLORS[kind], "line": {"width": 0}, "opacity": opacity},
        text=texts, textposition="inside", textangle=0, insidetextanchor="middle",
        customdata=customdata, hovertemplate=HOVER,
    )


def row_label(rank: int, side: str, lane: str = "compute") -> str:
    """The timeline row of a span: its rank and side, and ``· comm`` for anything but compute."""
    return f"rank {rank} {side}" + ("" if lane == "compute" else COMM_ROW)


COMM_ROW = " · comm"
MEMORY_PX = 240
GAP_PX = 90  #: between the timelines and a memory panel: the time axis title, the panel title


def _error_hover(m: Span, p: Span | None) -> str:
    if p is None:
        return "<br>not in the prediction"
    text = describe(m.rank, str(m.action), m.start - p.start, m.duration - p.duration).split(" ", 3)[3]
    return f"<br>vs predicted: {text}"


def compare_title(c: Comparison) -> str:
    schedules = c.predicted_schedule if c.predicted_schedule == c.measured_schedule else (
        f"{c.predicted_schedule} vs {c.measured_schedule}")
    return (
        f"{c.scenario or 'trace'} · {schedules} · predicted vs measured"
        f"<br><sup>step time predicted {c.predicted_step_time_ms:.2f} ms · measured {c.measured_step_time_ms:.2f} ms"
        f" · error {c.step_time_error:+.1%} · largest bubble error {c.max_abs_bubble_error_pp:.1f} pp</sup>"
    )


def compare_figure(predicted: Trace, measured: Trace, comparison: Comparison) -> go.Figure:
    """Both timelines, every span of both traces drawn once, on one ms axis; memory under them."""
    from plotly.subplots import make_subplots

    spans = {"predicted": aligned(predicted), "measured": aligned(measured)}
    by_key = {(s.rank, str(s.action)): s for s in spans["predicted"]}
    chunk_of = {side: chunk_of_stage(t) for side, t in zip(SIDES, (predicted, measured))}
    ranks = max(predicted.num_ranks, measured.num_ranks)
    by_kind: dict[Kind, list[tuple[str, Span]]] = {}
    for side in SIDES:
        for s in spans[side]:
            by_kind.setdefault(s.action.kind, []).append((side, s))
    comm = {side: any(s.lane != "compute" for s in spans[side]) for side in SIDES}
    rows = [label for r in range(ranks) for side in SIDES
            for label in [row_label(r, side)] + ([row_label(r, side, "comm")] if comm[side] else [])]
    memory = {side: _memory(t) for side, t in zip(SIDES, (predicted, measured))}
    rss = measured.meta.get("memory_measured") == "rss"
    panels = [side for side in SIDES if memory[side]] if rss else (["both"] if any(memory.values()) else [])
    layout = timeline_layout(rows, compare_title(comparison))
    timeline_px = layout["height"] - 130
    heights = [timeline_px] + [MEMORY_PX] * len(panels)
    total = sum(heights) + GAP_PX * len(panels)
    titles = ["timelines"] + [_MEMORY_TITLES[p] for p in panels]
    grid = make_subplots(rows=len(heights), cols=1, row_heights=heights, vertical_spacing=GAP_PX / total if panels else 0.0,
                         subplot_titles=titles if panels else None, shared_xaxes=False)
    for kind in [k for k in Kind if k in by_kind]:
        items = by_kind[kind]
        grid.add_trace(kind_bars(
            kind,
            [s for _, s in items],
            [row_label(s.rank, side, s.lane) for side, s in items],
            [bar_text(s, chunk_of[side]) for side, s in items],
            [hover_row(s, f"{side} · {s.lane}",
                       _error_hover(s, by_key.get((s.rank, str(s.action)))) if side == "measured" else "")
             for side, s in items],
            opacity=[_OPACITY[side] for side, _ in items],
        ), row=1, col=1)
    for i, panel in enumerate(panels, start=2):
        for side in SIDES if panel == "both" else (panel,):
            for line in memory[side]:
                grid.add_trace(line, row=i, col=1)
        grid.update_xaxes(matches="x", title={"text": "time (ms)"}, showgrid=True, gridcolor="#e4e4e4", row=i, col=1)
        grid.update_yaxes(title={"text": "RSS (GiB)" if panel == "measured" and rss else "GiB"}, rangemode="tozero",
                          showgrid=True, gridcolor="#ddd", row=i, col=1)
        capacity = predicted.meta.get("device_memory_bytes")
        if capacity and panel != "measured":
            from ppsim.views.render.memory import add_limit

            add_limit(grid, capacity, max(max(ln.y) for side in SIDES for ln in memory[side]
                                          if panel == "both" or side == panel), row=i, col=1)
    layout["height"] = total + 130
    if panels:
        layout[MEMORY_LEGEND] = {"title": {"text": "memory"}, "x": 1.01, "xanchor": "left",
                                 "y": grid.layout.yaxis2.domain[1], "yanchor": "top"}
    layout["yaxis"] = {**layout["yaxis"], "tickfont": {"size": 10}}
    for k in ("xaxis",):  # the timeline's axis keeps the page's numeric time axis
        layout[k] = {**layout[k], "title": {"text": "time (ms)"}}
    grid.update_layout(**layout)
    return grid


#: the title of each memory panel: both sides on one axis, or each on its own (a measured RSS)
_MEMORY_TITLES = {"both": "memory per rank: predicted dashed, measured solid",
                  "predicted": "predicted memory per rank",
                  "measured": "measured process memory per rank (RSS: the interpreter and libraries too)"}


def _memory(trace: Trace) -> list[go.Scatter]:
    """The trace's memory lines (:func:`~ppsim.views.render.memory.memory_lines`) from its own first
    span, named by side: predicted dashed, measured solid; beyond :data:`RANK_LINES` ranks only the
    rank of the highest peak (the lines would overlap, their colours repeat)."""
    import numpy as np

    from ppsim.trace.metrics import step_bounds
    from ppsim.views.render.memory import RANK_LINES, memory_lines

    side = "measured" if trace.meta.get("source") == "measured" else "predicted"
    lo, _ = step_bounds(trace)
    lines = memory_lines(trace)
    if len(lines) > RANK_LINES:
        lines = [max(lines, key=lambda ln: float(max(ln.y)))]
    for line in lines:
        rank = line.name.split()[-1]
        line.update(x=np.round(np.asarray(line.x) - lo, 3), name=f"rank {rank} {side}", legend=MEMORY_LEGEND,
                    legendgroup=f"memory {rank} {side}",
                    line={"dash": "dash" if side == "predicted" else "solid", "width": 1.5 if side == "measured" else 1.2},
                    hovertemplate=f"rank {rank} {side}<br>%{{x:,.3f}} ms<br>%{{y:.2f}} GiB<extra></extra>")
    return lines


def write_compare_html(predicted: Trace, measured: Trace, comparison: Comparison, path: str | Path) -> Path:
    """Write :func:`compare_figure` as one offline HTML page (marked as ppsim's); returns the path."""
    return write_figure(compare_figure(predicted, measured, comparison), path)
