"""Memory in the pages: each rank's ``memory_bytes`` counter over the step (a line per rank up to
:data:`RANK_LINES` ranks, a heat map of ranks by time beyond, the highest peak marked), each rank's
peak broken down into what it holds (stacked bars), and the device's memory drawn on every memory
chart (a dashed line; what goes over it in the limit's colour, marked "does not fit")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ppsim.trace import Counter, Trace
from ppsim.trace.metrics import RankMetrics, step_bounds
from ppsim.views.palette import LIMIT_COLOR, MEMORY_PART_COLORS, RANK_COLORS

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import plotly.graph_objects as go

GIB = 2**30
MEMORY_LEGEND = "legend2"  #: memory lines have their own legend, apart from the action kinds
PARTS_LEGEND = "legend3"  #: and so do the parts of each rank's peak
LIMIT_LINE = {"dash": "dash", "color": LIMIT_COLOR, "width": 1.5}
NO_FIT = "does not fit"
RANK_LINES = len(RANK_COLORS)  #: up to this many ranks memory is a line per rank, beyond a heat map
PART_WIDTH = 0.8  #: of a rank's bar in the breakdown of the peaks
HEAT_BINS = 400  #: time bins of the heat map (each the highest value in it, so no peak is lost)


def _counters(trace: Trace) -> list[Counter]:
    return sorted((c for c in trace.counters if c.name == "memory_bytes" and c.points), key=lambda c: c.rank)


def memory_lines(trace: Trace) -> list[go.Scatter]:
    """One step line per rank of its ``memory_bytes`` counter (GiB), held to the end of the step, in
    the memory legend; [] without a counter."""
    import numpy as np
    import plotly.graph_objects as go

    counters = _counters(trace)
    _, end = step_bounds(trace)
    lines = []
    for c in counters:
        times = [t for t, _ in c.points]
        gib = [v / GIB for _, v in c.points]
        if times[-1] < end:
            times.append(end)
            gib.append(gib[-1])
        lines.append(go.Scatter(
            x=np.round(times, 3), y=np.round(gib, 4), mode="lines", name=f"rank {c.rank}",
            line={"shape": "hv", "width": 1.5, "color": RANK_COLORS[c.rank % len(RANK_COLORS)]},
            legend=MEMORY_LEGEND, legendgroup=f"memory {c.rank}",
            hovertemplate=f"rank {c.rank}<br>%{{x:,.3f}} ms<br>%{{y:.2f}} GiB<extra></extra>",
        ))
    return lines


def limit_label(capacity_bytes: float) -> str:
    """The device line's label; what lies beyond it is drawn in its colour."""
    return f"device {capacity_bytes / GIB:,.0f} GiB (beyond: {NO_FIT})"


def add_limit(fig: go.Figure, capacity_bytes: float, top_gib: float, row: int, col: int,
              vertical: bool = False, log_from: float | None = None) -> None:
    """Draw the device memory as a dashed line on the subplot at ``row``, ``col`` (a vertical one when
    memory is on the x axis), labelled with its size; the memory axis runs from 0 past both the
    line and ``top_gib``, the highest value drawn, or on a log scale from ``log_from`` (GiB)."""
    gib = capacity_bytes / GIB
    sub = fig.get_subplot(row, col)
    x, y = sub.xaxis.plotly_name.replace("axis", ""), sub.yaxis.plotly_name.replace("axis", "")
    at = math.log10(gib) if log_from else gib  # annotations on a log axis take the exponent
    axis: dict[str, object] = {"range": [0, 1.1 * max(gib, top_gib)]}
    if log_from:
        axis = {"type": "log", "range": [math.log10(min(log_from, gib) / 1.3), math.log10(max(gib, top_gib) * 1.3)],
                "tickvals": [m * 10**e for e in range(-1, 6) for m in (1, 2, 5)]}
    if vertical:
        line = {"xref": x, "x0": gib, "x1": gib, "yref": f"{y} domain", "y0": 0, "y1": 1}
        note = {"xref": x, "x": at, "xanchor": "right", "yref": f"{y} domain", "y": 0, "yanchor": "bottom",
                "textangle": -90}
        fig.update_xaxes(axis, row=row, col=col)
    else:
        line = {"xref": f"{x} domain", "x0": 0, "x1": 1, "yref": y, "y0": gib, "y1": gib}
        note = {"xref": f"{x} domain", "x": 1, "xanchor": "right", "yref": y, "y": at, "yanchor": "bottom"}
        fig.update_yaxes(axis, row=row, col=col)
    fig.add_shape(type="line", line=LIMIT_LINE, name="device memory", **line)
    fig.add_annotation(text=limit_label(capacity_bytes), showarrow=False, font={"color": LIMIT_COLOR, "size": 11},
                       bgcolor="rgba(255,255,255,0.85)", **note)


def binned_peaks(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The highest value a step counter (``values`` from ``times`` on, held until the next point)
    takes in each bin between ``edges``; before its first point it is 0."""
    import numpy as np

    held = np.searchsorted(times, edges[:-1], side="right") - 1  # the point in force at each bin's start
    peaks = np.where(held >= 0, values[np.maximum(held, 0)], 0.0)
    inside = np.searchsorted(edges, times, side="right") - 1  # the bin each point falls in
    inside[times == edges[-1]] = len(edges) - 2  # the last bin closes on the step's end
    keep = (inside >= 0) & (inside < len(edges) - 1)
    np.maximum.at(peaks, inside[keep], values[keep])
    return peaks


def memory_heatmap(trace: Trace, capacity_bytes: float | None) -> list[go.Heatmap | go.Scatter]:
    """Ranks by time, each cell the rank's highest memory in that time bin (GiB), on a scale that
    turns red beyond the device's memory; and a marker on the highest peak of the step. [] without
    a counter."""
    import numpy as np
    import plotly.graph_objects as go

    counters = _counters(trace)
    if not counters:
        return []
    start, end = step_bounds(trace)
    edges = np.linspace(start, end, HEAT_BINS + 1)
    ranks = trace.num_ranks
    z = np.zeros((ranks, HEAT_BINS))
    for c in counters:
        points = sorted(c.points)
        z[c.rank] = binned_peaks(np.array([t for t, _ in points]), np.array([v for _, v in points]), edges) / GIB
    top = float(z.max())
    cap = capacity_bytes / GIB if capacity_bytes else None
    zmax = max(top, cap or 0.0) or 1.0
    k = min(1.0, cap / zmax) if cap else 1.0  # the device's memory: blues below, the limit's colour beyond
    if k > 1.0 - 1e-5:  # over by a hair: nothing to tell apart on the scale
        k = 1.0
    scale: list[list[object]] = [[0.0, "#f4f7fb"], [0.5 * k, "#6baed6"], [k, "#08306b"]]
    if k < 1.0:
        scale += [[k + 1e-6, "#f4a582"], [1.0, LIMIT_COLOR]]
    rank, col = np.unravel_index(int(z.argmax()), z.shape)
    centres = np.round((edges[:-1] + edges[1:]) / 2, 3)
    title = "GiB" + (f"<br>(device {cap:,.0f})" if cap else "")
    heat = go.Heatmap(
        x=centres, y=np.arange(ranks, dtype=np.int32), z=np.round(z, 2).astype(np.float32), zmin=0.0, zmax=zmax,
        colorscale=scale, name="memory", showlegend=False,
        colorbar={"title": {"text": title, "side": "right"}, "thickness": 10},
        hovertemplate="rank %{y}<br>%{x:,.0f} ms<br>up to %{z:.2f} GiB<extra></extra>")
    peak = go.Scatter(
        x=[centres[col]], y=[int(rank)], mode="markers", name="highest peak", legend=MEMORY_LEGEND,
        marker={"symbol": "triangle-left", "size": 12, "color": "#000", "line": {"color": "#fff", "width": 1}},
        text=[f"rank {rank}: {top:,.1f} GiB"],  # the page writes it beside the marker
        hovertemplate=f"the highest peak: rank {rank}, {top:,.2f} GiB<extra></extra>")
    return [heat, peak]


def peak_part_bars(per_rank: Sequence[RankMetrics]) -> list[go.Scatter]:
    """A stacked bar per rank of what it holds at its peak (:meth:`RankMetrics.peak_parts`, GiB): one
    filled trace per part, in their own legend, and markers on each bar's top whose hover lists its
    parts; [] when a rank's parts are unknown (measured traces).

    Drawn as filled shapes, not Plotly bars: a bar trace on another subplot stops Plotly hiding the
    timeline's labels that do not fit their blocks (``uniformtext``)."""
    import numpy as np
    import plotly.graph_objects as go

    parts = [r.peak_parts() for r in per_rank]
    known = [p for p in parts if p is not None]
    if not known or len(known) != len(parts):
        return []
    ranks = np.array([r.rank for r in per_rank], dtype=float)
    base = np.zeros(len(ranks))
    shapes: list[go.Scatter] = []
    for name in known[0]:
        top = base + np.array([p[name] for p in known]) / GIB
        xs: list[float | None] = []
        ys: list[float | None] = []
        for r, lo, hi in zip(ranks, base, top):
            xs += [r - PART_WIDTH / 2, r - PART_WIDTH / 2, r + PART_WIDTH / 2, r + PART_WIDTH / 2, r - PART_WIDTH / 2, None]
            ys += [round(lo, 3), round(hi, 3), round(hi, 3), round(lo, 3), round(lo, 3), None]
        shapes.append(go.Scatter(x=xs, y=ys, mode="lines", fill="toself", name=name, legend=PARTS_LEGEND,
                                 legendgroup=f"part {name}", fillcolor=MEMORY_PART_COLORS[name],
                                 line={"width": 0, "color": MEMORY_PART_COLORS[name]}, hoverinfo="skip"))
        base = top
    hover = ["<br>".join([f"rank {r.rank} at its peak ({r.peak_memory_at})"]
                         + [f"{name} {b / GIB:,.2f} GiB" for name, b in p.items()]
                         + [f"<b>total {sum(p.values()) / GIB:,.2f} GiB</b>"]) for r, p in zip(per_rank, known)]
    shapes.append(go.Scatter(x=ranks, y=np.round(base, 3), mode="markers", name="peak", showlegend=False,
                             marker={"size": 8, "color": "rgba(0,0,0,0)"}, hovertext=hover,
                             hovertemplate="%{hovertext}<extra></extra>"))
    return shapes
