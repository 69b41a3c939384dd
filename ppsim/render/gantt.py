"""Gantt chart of a Trace as a Plotly figure / self-contained HTML page.

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
from ppsim.metrics import summarize
from ppsim.plan import Kind
from ppsim.trace import LANES, Span, Trace

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

#: fixed colour of each action kind (all distinct)
KIND_COLORS: dict[Kind, str] = {
    Kind.F: "#4C78A8",
    Kind.B: "#F58518",
    Kind.I: "#E45756",
    Kind.W: "#72B7B2",
    Kind.OPT: "#54A24B",
    Kind.SEND_F: "#B279A2",
    Kind.SEND_B: "#FF9DA6",
    Kind.RECV_F: "#9D755D",
    Kind.RECV_B: "#BAB0AC",
    Kind.REDUCE_GRAD: "#EECA3B",
    Kind.CLIP: "#79706E",
}

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


def bar_text(span: Span, chunks: int, num_ranks: int) -> str:
    """Label inside a bar: the micro-batch, prefixed by the chunk when chunks > 1 (``c1:5``); else the kind."""
    a = span.action
    if a.microbatch is None:
        return a.kind.value
    if chunks > 1 and num_ranks > 0:
        return f"c{a.stage // num_ranks}:{a.microbatch}"
    return str(a.microbatch)


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
        insidetextanchor="middle",
        customdata=customdata,
        hovertemplate=HOVER,
    )


def figure_title(trace: Trace) -> str:
    """Header: scenario, schedule, sizes, source, step time and bubble fraction."""
    s = summarize(trace)
    name = trace.meta.get("scenario") or "trace"
    memory = ""
    peaks = [st.peak_memory_bytes for st in s.per_stage]
    if s.memory_capacity_bytes and all(x is not None for x in peaks):
        verdict = "fits" if s.fits else "DOES NOT FIT"
        memory = (f" · peak memory per stage {', '.join(f'{x / 2**30:.1f}' for x in peaks)} GiB"  # type: ignore[operator]
                  f" of {s.memory_capacity_bytes / 2**30:.0f} GiB: {verdict}")
    return (
        f"{name} · {s.schedule} · {s.stages} stages × {s.microbatches} micro-batches"
        f" × {s.chunks} chunk{'s' if s.chunks != 1 else ''} · {s.source}"
        f"<br><sup>step time {s.step_time_ms:.2f} ms · bubble {s.bubble_fraction:.1%}{memory}</sup>"
    )


def gantt_figure(trace: Trace, title: str | None = None) -> go.Figure:
    """A Gantt figure of ``trace``: numeric ms x axis, one bar trace per action kind.

    ``title`` replaces the first header line (the step time / bubble line is kept).
    Raises :class:`~ppsim.errors.TraceError` when the trace has no spans.
    """
    import plotly.graph_objects as go

    if not trace.spans:
        raise TraceError("the trace has no spans: there is nothing to draw")
    chunks = int(trace.meta.get("chunks", 1) or 1)
    ranks = trace.num_ranks
    by_kind: dict[Kind, list[Span]] = {}
    for s in trace.spans:
        by_kind.setdefault(s.action.kind, []).append(s)

    fig = go.Figure()
    for kind in [k for k in Kind if k in by_kind]:
        spans = by_kind[kind]
        fig.add_trace(kind_bars(kind, spans, [row_label(s.rank, s.lane) for s in spans],
                                [bar_text(s, chunks, ranks) for s in spans], [hover_row(s) for s in spans]))

    rows = row_labels(trace)
    header = figure_title(trace)
    if title:
        header = title + "<br>" + header.split("<br>", 1)[1]
    fig.update_layout(**timeline_layout(rows, header))
    return fig


HTML_MARKER = "<!-- ppsim -->"


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
