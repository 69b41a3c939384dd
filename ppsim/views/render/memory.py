"""Memory in the pages: a rank's ``memory_bytes`` counter as a line, and the device's memory drawn
on every memory chart (a dashed line; what goes over it in the limit's colour, marked "does not fit")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ppsim.trace import Trace
from ppsim.trace.metrics import step_bounds
from ppsim.views.palette import LIMIT_COLOR, RANK_COLORS

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

GIB = 2**30
MEMORY_LEGEND = "legend2"  #: memory lines have their own legend, apart from the action kinds
LIMIT_LINE = {"dash": "dash", "color": LIMIT_COLOR, "width": 1.5}
NO_FIT = "does not fit"


def memory_lines(trace: Trace) -> list[go.Scatter]:
    """One step line per rank of its ``memory_bytes`` counter (GiB), held to the end of the step, in
    the memory legend; [] without a counter."""
    import numpy as np
    import plotly.graph_objects as go

    counters = sorted((c for c in trace.counters if c.name == "memory_bytes" and c.points), key=lambda c: c.rank)
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
