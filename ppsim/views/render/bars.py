"""The bars of a timeline, compact enough for thousands of spans: one Plotly bar trace per action kind
and lane, numeric arrays (typed, rounded), hover built by a template from those arrays.

Rows sit on a numeric y axis (top to bottom): per rank its compute row, one unit tall, then a half
unit for each other lane the trace uses (send, recv, collective), so messages do not crowd the
compute. Labels (micro-batches) go on compute bars only, at one fixed size; Plotly hides each that
does not fit its bar at the current zoom, so labels never shrink into each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ppsim.errors import TraceError
from ppsim.plan import Kind
from ppsim.trace import LANES, Span, Trace
from ppsim.trace.critical import CriticalPath
from ppsim.views.labels import bar_text, chunk_of_stage
from ppsim.views.palette import ALLTOALL_COLOR, KIND_COLORS, UNKNOWN_KIND_COLOR, chunk_shade

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

LABEL_SIZE = 10  #: pixels; a label is shown at this size or not at all
LANE_UNITS = {"compute": 1.0}  #: row height in y units; other lanes get OTHER_LANE_UNITS
OTHER_LANE_UNITS = 0.5
BAR_FILL = 0.8  #: the part of its row a bar covers
LANE_TICKS = {"send": "send", "recv": "recv", "collective": "coll."}


@dataclass(frozen=True)
class Rows:
    """Where each (rank, lane) row sits on the y axis, and the tick labels of the rows."""

    position: dict[tuple[int, str], float]  #: centre of each row, in y units from the top
    height: dict[str, float]  #: row height per lane
    extent: float  #: total height in y units

    @property
    def tickvals(self) -> list[float]:
        return list(self.position.values())

    @property
    def ticktext(self) -> list[str]:
        return [f"rank {r}" if lane == "compute" else LANE_TICKS.get(lane, lane) for r, lane in self.position]

    def rank_bands(self) -> list[tuple[float, float]]:
        """(top, bottom) of each rank's block of rows, in rank order."""
        bands: dict[int, list[float]] = {}
        for (rank, lane), y in self.position.items():
            half = self.height[lane] / 2
            band = bands.setdefault(rank, [y - half, y + half])
            band[0], band[1] = min(band[0], y - half), max(band[1], y + half)
        return [(lo, hi) for _, (lo, hi) in sorted(bands.items())]


ALLTOALL = "all-to-all"  #: the legend's name of the experts' dispatch and combine


def alltoall_spans(trace: Trace) -> list[list[list[float]]]:
    """Per rank, [start, end] of each expert-parallel all-to-all the trace records (its metadata)."""
    return trace.meta.get("alltoall_spans") or []


def trace_lanes(trace: Trace) -> list[str]:
    """The lanes the trace uses, compute first, then in :data:`LANES` order, then any others (the
    collective lane also when the trace records all-to-alls)."""
    used = {s.lane for s in trace.spans} | ({"collective"} if any(alltoall_spans(trace)) else set())
    return ["compute"] + [ln for ln in LANES if ln != "compute" and ln in used] + sorted(used - set(LANES))


def rows_of(trace: Trace, lanes: Iterable[str] | None = None) -> Rows:
    """Rows of ``trace`` top to bottom, rank by rank; ``lanes`` limits them (say, to compute)."""
    keep = trace_lanes(trace) if lanes is None else [ln for ln in trace_lanes(trace) if ln in set(lanes)]
    height = {ln: LANE_UNITS.get(ln, OTHER_LANE_UNITS) for ln in keep}
    position: dict[tuple[int, str], float] = {}
    y = 0.0
    for rank in range(trace.num_ranks):
        for lane in keep:
            position[(rank, lane)] = y + height[lane] / 2
            y += height[lane]
    return Rows(position, height, y)


def _action_template(kind: Kind, spans: list[Span]) -> str | None:
    """The hover's action name built from customdata (stage, kind, micro-batch), or None when the
    spans need their own text (overlapped actions, a mix of step-level and per-micro-batch)."""
    if any(len(s.action.parts) > 1 for s in spans):
        return None
    with_mb = {s.action.microbatch is not None for s in spans}
    if with_mb == {True}:
        return f"%{{customdata[1]}}{kind.value}%{{customdata[2]}}"
    if with_mb == {False}:
        return f"%{{customdata[1]}}{kind.value}"
    return None


def _colours(kind: Kind, spans: list[Span], chunk_of: dict[int, int]) -> str | list[str]:
    """The kind's colour, or per bar its chunk's shade of it when ranks hold several chunks."""
    colour = KIND_COLORS.get(kind, UNKNOWN_KIND_COLOR)
    if not chunk_of:
        return colour
    chunks = max(chunk_of.values()) + 1
    return [chunk_shade(colour, chunk_of.get(s.action.stage, 0), chunks) for s in spans]


def _bar_trace(kind: Kind, lane: str, spans: list[Span], rows: Rows, chunk_of: dict[int, int],
               labels: bool, path: CriticalPath | None = None) -> go.Bar:
    import numpy as np
    import plotly.graph_objects as go

    has_bytes = all(s.bytes is not None for s in spans)
    has_peer = all(s.peer is not None for s in spans)
    columns = [[s.rank, s.action.stage, -1 if s.action.microbatch is None else s.action.microbatch, s.duration]
               for s in spans]
    if has_bytes:
        for row, s in zip(columns, spans):
            assert s.bytes is not None  # has_bytes
            row.append(s.bytes / 2**20)
    if has_peer:
        for row, s in zip(columns, spans):
            assert s.peer is not None  # has_peer
            row.append(s.peer)
    action = _action_template(kind, spans)
    extra = ""
    if has_bytes:
        extra += "<br>%{customdata[4]:,.2f} MiB"
    if has_peer:
        extra += f"<br>peer rank %{{customdata[{5 if has_bytes else 4}]}}"
    if path is not None:
        extra += f"<br>slack %{{customdata[{len(columns[0])}]:,.3f}} ms (it could end that much later: the same step)"
        for row, s in zip(columns, spans):
            row.append(path.slack(s))
    hover = (f"<b>{action or '%{hovertext}'}</b><br>rank %{{customdata[0]}} · {lane}"
             "<br>start %{base:.3f} ms<br>end %{x:.3f} ms<br>duration %{customdata[3]:.3f} ms"
             f"{extra}<extra></extra>")
    bar: dict[str, Any] = {
        "name": kind.value, "legendgroup": kind.value, "orientation": "h",
        "base": np.round([s.start for s in spans], 3).tolist(),
        "x": np.array([s.duration for s in spans], dtype=np.float32),
        "y": np.array([rows.position[(s.rank, lane)] for s in spans], dtype=np.float32),
        "width": rows.height[lane] * BAR_FILL,
        "marker": {"color": _colours(kind, spans, chunk_of), "line": {"width": 0}},
        "customdata": np.array(columns, dtype=np.float32),
        "hovertemplate": hover,
    }
    if action is None:
        bar["hovertext"] = [str(s.action) for s in spans]
    if labels and lane == "compute":
        bar.update(text=[bar_text(s, chunk_of) for s in spans], textposition="inside", textangle=0,
                   insidetextanchor="middle", textfont={"size": LABEL_SIZE, "color": "white"})
    return go.Bar(**bar, _validate=False)  # typed arrays of known properties; see .assemble


def bar_traces(trace: Trace, rows: Rows, legend_shown: set[Kind] | None = None, labels: bool = True,
               path: CriticalPath | None = None) -> list[go.Bar]:
    """One bar trace per action kind and lane of the spans on ``rows`` (kinds in plan order); with
    the trace's critical ``path``, each hover gives the span's slack.

    ``legend_shown`` collects the kinds already in the legend across several timelines, so a kind is
    listed once (the bars of one kind share a legend group: clicking it hides them everywhere).
    ``labels`` puts micro-batch labels on compute bars. Raises :class:`~ppsim.errors.TraceError`
    when the trace has no spans.
    """
    if not trace.spans:
        raise TraceError("the trace has no spans: there is nothing to draw")
    chunk_of = chunk_of_stage(trace)
    groups: dict[tuple[Kind, str], list[Span]] = {}
    for s in trace.spans:
        if (s.rank, s.lane) in rows.position:
            groups.setdefault((s.action.kind, s.lane), []).append(s)
    order = {k: i for i, k in enumerate(Kind)}
    shown = set() if legend_shown is None else legend_shown
    out = []
    for kind, lane in sorted(groups, key=lambda g: (order[g[0]], g[1])):
        spans = groups[(kind, lane)]
        if chunk_of:  # chunk 0's first: the legend draws a trace in its first bar's colour, the kind's own
            spans.sort(key=lambda s: chunk_of.get(s.action.stage, 0))
        bar = _bar_trace(kind, lane, spans, rows, chunk_of, labels, path)
        bar.update(showlegend=kind not in shown)
        shown.add(kind)
        out.append(bar)
    return out


def alltoall_bar(trace: Trace, rows: Rows) -> go.Bar | None:
    """The experts' all-to-alls as one bar trace on each rank's collective row (None without any)."""
    import numpy as np
    import plotly.graph_objects as go

    found = [(rank, t0, t1) for rank, spans in enumerate(alltoall_spans(trace)) for t0, t1 in spans
             if (rank, "collective") in rows.position]
    if not found:
        return None
    what = "prediction places it" if trace.meta.get("source") != "measured" else "rank was in all_to_all_single"
    hover = (f"<b>{ALLTOALL}</b> (dispatch or combine)<br>rank %{{customdata[0]}} · collective"
             "<br>start %{base:.3f} ms<br>end %{x:.3f} ms<br>duration %{customdata[1]:.3f} ms"
             f"<br>where the {what}<extra></extra>")
    return go.Bar(name=ALLTOALL, legendgroup=ALLTOALL, orientation="h",
                  base=np.round([t0 for _, t0, _ in found], 3).tolist(),
                  x=np.array([t1 - t0 for _, t0, t1 in found], dtype=np.float32),
                  y=np.array([rows.position[(r, "collective")] for r, _, _ in found], dtype=np.float32),
                  width=rows.height["collective"] * BAR_FILL, marker={"color": ALLTOALL_COLOR, "line": {"width": 0}},
                  customdata=np.array([[r, t1 - t0] for r, t0, t1 in found], dtype=np.float32),
                  hovertemplate=hover, _validate=False)


CRITICAL_PATH = "critical path"
CRITICAL_COLOR = "#111111"
WAITING = "waiting"  #: the legend's name of the hatched part of a message or collective spent waiting


def waiting_bar(trace: Trace, rows: Rows, path: CriticalPath) -> go.Bar | None:
    """Hatching over the part of each receive (or rendezvous send) spent waiting for its peer to
    start, and of each collective waiting for the last rank into it: what is left of the block is
    the transfer or the collective's work (None when nothing waited)."""
    import numpy as np
    import plotly.graph_objects as go

    found = []
    for s in trace.spans:
        if s.lane == "compute" or (s.rank, s.lane) not in rows.position:
            continue
        b = path.binding(s)
        if b.cause in ("peer", "collective") and b.after is not None and b.waited_ms > 0:
            start = b.after.start - b.waited_ms
            waited = min(b.waited_ms, s.end - start)  # inside its block
            if waited > 0:
                found.append((s, start, waited, b.after.rank))
    if not found:
        return None
    what = ["the last rank into the collective" if path.binding(s).cause == "collective" else "its peer"
            for s, _, _, _ in found]
    return go.Bar(name=WAITING, legendgroup=WAITING, orientation="h",
                  base=np.round([t0 for _, t0, _, _ in found], 3).tolist(),
                  x=np.array([w for _, _, w, _ in found], dtype=np.float32),
                  y=np.array([rows.position[(s.rank, s.lane)] for s, _, _, _ in found], dtype=np.float32),
                  width=[rows.height[s.lane] * BAR_FILL for s, _, _, _ in found],
                  marker={"color": "rgba(255,255,255,0.55)", "line": {"width": 0},
                          "pattern": {"shape": "/", "fgcolor": "#555", "size": 5, "solidity": 0.25}},
                  hovertext=[f"<b>{s.action}</b> waiting {w:,.3f} ms for {who}, rank {peer}; the rest of the block "
                             f"is its {'transfer' if 'peer' in who else 'work'}" for (s, _, w, peer), who in zip(found, what)],
                  hovertemplate="%{hovertext}<extra></extra>", _validate=False)


def critical_bar(trace: Trace, rows: Rows, path: CriticalPath | None = None) -> go.Bar | None:
    """The step's critical path (:mod:`ppsim.trace.critical`; ``path`` when worked out already) as
    outlines over its spans, each hover saying what the span waited for (None when no span of it
    is drawn)."""
    import numpy as np
    import plotly.graph_objects as go

    from ppsim.trace.critical import critical_path

    path = path or critical_path(trace)
    spans = [s for s in path.spans if (s.rank, s.lane) in rows.position]
    if not spans:
        return None
    return go.Bar(name=CRITICAL_PATH, legendgroup=CRITICAL_PATH, orientation="h",
                  base=np.round([s.start for s in spans], 3).tolist(),
                  x=np.array([max(s.duration, 1e-6) for s in spans], dtype=np.float32),
                  y=np.array([rows.position[(s.rank, s.lane)] for s in spans], dtype=np.float32),
                  width=[rows.height[s.lane] * BAR_FILL for s in spans],
                  marker={"color": "rgba(0,0,0,0)", "line": {"width": 1.5, "color": CRITICAL_COLOR}},
                  hovertext=[f"<b>{s.action}</b> on the critical path<br>rank {s.rank} · {s.lane}<br>"
                             f"{s.start:,.3f} to {s.end:,.3f} ms<br>{path.waited_for(s)}" for s in spans],
                  hovertemplate="%{hovertext}<extra></extra>", _validate=False)


def rows_axis(rows: Rows, tick_size: int = 11, every: int = 1) -> dict[str, Any]:
    """The y axis of a timeline: rows top to bottom, labelled (only every ``every``-th rank's rows
    where rows are too thin for a label each), no grid."""
    ticks = [(y, text) for ((rank, _), y), text in zip(rows.position.items(), rows.ticktext) if rank % every == 0]
    return {"type": "linear", "range": [rows.extent, 0], "tickvals": [y for y, _ in ticks],
            "ticktext": [text for _, text in ticks], "tickfont": {"size": tick_size}, "showgrid": False,
            "zeroline": False, "ticks": ""}
