"""Throughput, bubble and peak memory against a swept value (micro-batches or stages), one line per
value of the other, as a Plotly figure / offline HTML page. The memory plot draws the device's
memory; a point that does not fit is an open marker on every plot and says so on hover. Plotly is
imported on first use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.errors import PpsimError
from ppsim.views.palette import series_color
from ppsim.views.render.labelled import LabelledPrediction
from ppsim.views.render.memory import GIB, NO_FIT, add_limit
from ppsim.views.render.page import write_figure
from ppsim.views.render.schedules_html import fits

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

AXIS_TITLES = {"microbatches": "micro-batches per step", "stages": "pipeline stages",
               "skew": "routing skew (busiest expert rank's tokens over the mean)"}
#: (subplot title, value of a point, hover of the value)
PLOTS = (
    ("throughput (samples/s)", lambda v: v.summary.throughput_samples_per_s, "%{y:,.2f} samples/s"),
    ("bubble (%)", lambda v: 100 * v.summary.bubble_fraction, "bubble %{y:.1f} %"),
    ("peak memory per device (GiB)", lambda v: (v.peak_memory_bytes() or 0.0) / GIB, "peak %{y:,.1f} GiB"),
)


def sweep_figure(variants: Sequence[LabelledPrediction], x_key: str, line_key: str | None, scenario: str) -> go.Figure:
    """Throughput (samples/s), bubble (%) and peak memory (GiB) against ``x_key``; one line per value
    of ``line_key``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ran = [v for v in variants if v.ok]
    if not ran:
        raise PpsimError("no point of the sweep could run: there is nothing to draw")
    groups: dict[object, list[LabelledPrediction]] = {}
    for v in ran:
        groups.setdefault(v.overrides.get(line_key) if line_key else None, []).append(v)
    fig = make_subplots(rows=len(PLOTS), cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[title for title, _, _ in PLOTS])
    for i, (key, items) in enumerate(groups.items()):
        items = sorted(items, key=lambda v: v.overrides[x_key])
        xs = [v.overrides[x_key] for v in items]
        name = f"{line_key} {key}" if line_key else scenario
        over = [fits(v) is False for v in items]
        marker = {"symbol": ["circle-open" if o else "circle" for o in over], "size": 9, "line": {"width": 2}}
        for row, (_, value, hover) in enumerate(PLOTS, start=1):
            fig.add_trace(go.Scatter(x=xs, y=[value(v) for v in items], mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=row == 1, line={"color": series_color(i)},
                                     marker=marker, customdata=[NO_FIT if o else "" for o in over],
                                     hovertemplate=f"{name}<br>{x_key} %{{x}}<br>{hover}<br>%{{customdata}}<extra></extra>"),
                          row=row, col=1)
    capacities = {v.summary.memory_capacity_bytes for v in ran if v.summary and v.summary.memory_capacity_bytes}
    memory = [PLOTS[2][1](v) for v in ran] + [c / GIB for c in capacities]
    log = min(memory) > 0 and max(memory) / min(memory) > 8  # peaks from tens to hundreds of GiB
    for cap in capacities:
        add_limit(fig, cap, max(memory), row=len(PLOTS), col=1, log_from=min(memory) if log else None)
    xs_all = sorted({v.overrides[x_key] for v in ran})
    fig.update_xaxes(type="log", tickvals=xs_all, ticktext=[str(x) for x in xs_all], showgrid=True)
    fig.update_xaxes(title={"text": AXIS_TITLES.get(x_key, x_key)}, row=len(PLOTS), col=1)
    fig.update_yaxes(showgrid=True, gridcolor="#ddd")
    fig.update_yaxes(rangemode="tozero", row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)
    note = "open markers: the plan does not fit the device's memory" if any(fits(v) is False for v in ran) else ""
    failed = [v for v in variants if not v.ok]
    subtitle = " · ".join([note] * bool(note) + [f"{v.label} cannot run: {v.error}" for v in failed])
    fig.update_layout(
        title={"text": f"{scenario} · sweep over {AXIS_TITLES.get(x_key, x_key)}"
               + (f"<br><sup>{subtitle}</sup>" if subtitle else ""), "x": 0.01},
        height=860, margin={"l": 80, "r": 20, "t": 100, "b": 60}, plot_bgcolor="white",
    )
    return fig


def write_sweep_html(variants: Sequence[LabelledPrediction], x_key: str, line_key: str | None, scenario: str,
                     path: str | Path) -> Path:
    """Write :func:`sweep_figure` as one offline HTML page; returns the path."""
    return write_figure(sweep_figure(variants, x_key, line_key, scenario), path)
