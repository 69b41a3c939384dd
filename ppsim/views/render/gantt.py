"""Timeline page of a Trace: the Gantt, memory per rank under it, as a Plotly figure / offline HTML.

The time axis is numeric (milliseconds on the trace's clock): bars are ``go.Bar(orientation="h")``
with ``base`` = start and ``x`` = duration, never ``px.timeline`` (which turns numbers into dates).
One Plotly trace per action kind keeps the figure light for tens of thousands of spans. Rows run
top to bottom by rank: ``rank R`` (compute), then thinner ``rank R send`` / ``recv`` /
``collective`` rows for the lanes the trace uses. Plotly is imported here only, on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppsim.errors import TraceError
from ppsim.formats import HTML_MARKER
from ppsim.plan import Kind
from ppsim.trace import LANES, Span, Trace
from ppsim.trace.metrics import step_bounds, summarize
from ppsim.views.labels import bar_text, chunk_of_stage
from ppsim.views.palette import KIND_COLORS, LIMIT_COLOR, RANK_COLORS

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

_COMPUTE_WIDTH = 0.8  # bar thickness on a compute row, in row units
_COMM_WIDTH = 0.4  # thinner bars on the communication rows

#: hover text of a bar; its customdata row is :func:`hover_row`
HOVER = (
    "<b>%{customdata[0]}</b><br>rank %{customdata[1]} · %{customdata[2]}"
    "<br>start %{customdata[3]:.3f} ms<br>end %{customdata[4]:.3f} ms"
    "<br>duration %{customdata[5]:.3f} ms%{customdata[6]}<extra></extra>"
)


def row_label(rank: int, lane: str) -> str:
    """The y-axis row of a span: ``rank R`` for compute, ``rank R <lane>`` otherwise."""
    return f"rank {rank}" if lane == "compute" else f"rank {rank} {lane}"


def row_labels(trace: Trace) -> list[str]:
    """All rows, top to bottom: per rank its compute row, then each other lane the trace uses."""
    used = {s.lane for s in trace.spans}
    lanes = ["compute"] + [ln for ln in LANES if ln != "compute" and ln in used]
    lanes += sorted(used - set(LANES))
    return [row_label(r, ln) for r in range(trace.num_ranks) for ln in lanes]


def bar_width(lane: str) -> float:
    """Bar thickness in row units: full on a compute row, thinner for communication."""
    return _COMPUTE_WIDTH if lane == "compute" else _COMM_WIDTH


def _extra_hover(span: Span) -> str:
    out = ""
    if span.bytes is not None:
        out += f"<br>bytes {span.bytes:,} ({span.bytes / 2**20:.2f} MiB)"
    if span.peer is not None:
        out += f"<br>peer rank {span.peer}"
    return out


def hover_row(span: Span, label: str | None = None, extra: str = "") -> list[Any]:
    """The customdata row :data:`HOVER` shows: ``label`` replaces the lane, ``extra`` is appended (HTML)."""
    return [str(span.action), span.rank, label or span.lane, span.start, span.end, span.end - span.start,
            _extra_hover(span) + extra]


def timeline_layout(rows: list[str], title: str) -> dict[str, Any]:
    """Layout of a timeline figure: numeric ms axis, ``rows`` top to bottom, overlaid bars."""
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
              opacity: list[float] | None = None) -> go.Bar:
    """One Plotly bar trace for the spans of one kind: numeric base and length, the kind's colour."""
    import plotly.graph_objects as go

    marker: dict[str, Any] = {"color": KIND_COLORS[kind], "line": {"width": 0}}
    if opacity is not None:
        marker["opacity"] = opacity
    return go.Bar(
        name=kind.value,
        orientation="h",
        base=[s.start for s in spans],
        x=[s.end - s.start for s in spans],
        y=rows,
        width=[bar_width(s.lane) for s in spans],
        marker=marker,
        text=texts,
        textposition="inside",
        textangle=0,
        insidetextanchor="middle",
        customdata=customdata,
        hovertemplate=HOVER,
    )


def figure_title(trace: Trace) -> str:
    """Header: scenario, schedule, sizes, source; step time, bubble, throughput, MFU, peak memory per rank."""
    s = summarize(trace)
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
    if all(x is not None for x in peaks) and peaks:
        memory = f"peak memory per rank {', '.join(f'{x / 2**30:.1f}' for x in peaks)} GiB"  # type: ignore[operator]
        if s.memory_capacity_bytes:
            memory += f" of {s.memory_capacity_bytes / 2**30:.0f} GiB: {'fits' if s.fits else 'DOES NOT FIT'}"
        figures.append(memory)
    return (
        f"{name} · {s.schedule} · {s.num_ranks} ranks × {s.chunks} chunk{'s' if s.chunks != 1 else ''}"
        f" · {s.microbatches} micro-batches · {s.source}"
        f"<br><sup>{' · '.join(figures)}</sup>"
    )


def timeline_bars(trace: Trace, legend_shown: set[Kind] | None = None) -> list[go.Bar]:
    """The bar traces of ``trace``'s Gantt, one per action kind present.

    ``legend_shown`` collects the kinds already in the legend across several timelines, so a kind is
    listed once (the bars of one kind share a legend group, so clicking it hides them everywhere).
    Raises :class:`~ppsim.errors.TraceError` when the trace has no spans.
    """
    if not trace.spans:
        raise TraceError("the trace has no spans: there is nothing to draw")
    chunk_of = chunk_of_stage(trace)
    by_kind: dict[Kind, list[Span]] = {}
    for s in trace.spans:
        by_kind.setdefault(s.action.kind, []).append(s)
    shown = set() if legend_shown is None else legend_shown
    bars = []
    for kind in [k for k in Kind if k in by_kind]:
        spans = by_kind[kind]
        bar = kind_bars(kind, spans, [row_label(s.rank, s.lane) for s in spans],
                        [bar_text(s, chunk_of) for s in spans], [hover_row(s) for s in spans])
        bar.update(legendgroup=kind.value, showlegend=kind not in shown)
        shown.add(kind)
        bars.append(bar)
    return bars


def memory_lines(trace: Trace) -> list[go.Scatter]:
    """One step line per rank of its ``memory_bytes`` counter (GiB), held to the end of the step; [] without one."""
    import plotly.graph_objects as go

    counters = sorted((c for c in trace.counters if c.name == "memory_bytes" and c.points), key=lambda c: c.rank)
    if not counters:
        return []
    _, end = step_bounds(trace)
    lines = []
    for c in counters:
        times = [t for t, _ in c.points]
        gib = [v / 2**30 for _, v in c.points]
        if times[-1] < end:
            times.append(end)
            gib.append(gib[-1])
        lines.append(go.Scatter(
            x=times, y=gib, mode="lines", name=f"rank {c.rank} memory",
            line={"shape": "hv", "width": 1.5, "color": RANK_COLORS[c.rank % len(RANK_COLORS)]},
            legendgroup="memory", hovertemplate=f"rank {c.rank}<br>%{{x:.3f}} ms<br>%{{y:.2f}} GiB<extra></extra>",
        ))
    return lines


def gantt_figure(trace: Trace, title: str | None = None) -> go.Figure:
    """The timeline page of ``trace``: the Gantt on top, memory per rank over time under it.

    Both plots share the time axis (zooming or panning one moves the other); a trace without a
    ``memory_bytes`` counter gets the Gantt alone. A measured trace's counter is what ppexec read
    after each action: the device allocator's bytes, or on CPUs the process's resident memory. ``title`` replaces the first
    header line (the figures line is kept). Raises :class:`~ppsim.errors.TraceError` when the
    trace has no spans.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    bars = timeline_bars(trace)
    memory = memory_lines(trace)
    rows = row_labels(trace)
    header = figure_title(trace)
    if title:
        header = title + "<br>" + header.split("<br>", 1)[1]
    layout = timeline_layout(rows, header)
    if not memory:
        fig = go.Figure(data=bars)
        fig.update_layout(**layout)
        return fig
    gantt_height = layout["height"]
    memory_height = 260
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[gantt_height, memory_height])
    for bar in bars:
        fig.add_trace(bar, row=1, col=1)
    for line in memory:
        fig.add_trace(line, row=2, col=1)
    fig.update_layout(**{k: v for k, v in layout.items() if k not in ("xaxis", "yaxis")})
    fig.update_layout(height=gantt_height + memory_height + 60)
    fig.update_yaxes(**layout["yaxis"], row=1, col=1)
    fig.update_xaxes(showgrid=True, row=1, col=1)
    fig.update_xaxes(**layout["xaxis"], row=2, col=1)
    what = "process memory, RSS (GiB)" if trace.meta.get("memory_measured") == "rss" else "memory (GiB)"
    fig.update_yaxes(title={"text": what}, rangemode="tozero", showgrid=True, gridcolor="#ddd", row=2, col=1)
    capacity = trace.meta.get("device_memory_bytes")
    peak = max(max(line.y) for line in memory)
    if capacity and peak * 2**30 >= capacity / 2:  # a far-off capacity line would flatten the curves
        fig.add_hline(y=capacity / 2**30, line={"dash": "dash", "color": LIMIT_COLOR, "width": 1}, row=2, col=1,
                      annotation_text=f"device {capacity / 2**30:.0f} GiB", annotation_position="top left")
    return fig


def write_html(trace: Trace, path: str | Path, title: str | None = None) -> Path:
    """Write the Gantt as one self-contained HTML file (plotly.js inlined, works offline); returns the path."""
    return write_figure(gantt_figure(trace, title), path)


def write_figure(fig: go.Figure, path: str | Path) -> Path:
    """Write ``fig`` as one self-contained HTML page that starts with :data:`HTML_MARKER`; returns the path."""
    p = Path(path)
    html = fig.to_html(include_plotlyjs=True, full_html=True)
    # the marker lets ppsim recognise its own pages, which it may overwrite without --force
    p.write_text(HTML_MARKER + "\n" + html, encoding="utf-8")
    return p
