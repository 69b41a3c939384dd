"""Throughput and bubble against a swept value (micro-batches or stages), one line per value of the
other, as a Plotly figure / offline HTML page. Plotly is imported on first use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.errors import PpsimError
from ppsim.views.palette import series_color
from ppsim.views.render.gantt import write_figure
from ppsim.views.render.labelled import LabelledPrediction

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

AXIS_TITLES = {"microbatches": "micro-batches per step", "stages": "pipeline stages"}


def sweep_figure(variants: list[LabelledPrediction], x_key: str, line_key: str | None, scenario: str) -> go.Figure:
    """Throughput (samples/s) over bubble (%) against ``x_key``; one line per value of ``line_key``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ran = [v for v in variants if v.ok]
    if not ran:
        raise PpsimError("no point of the sweep could run: there is nothing to draw")
    groups: dict[object, list[LabelledPrediction]] = {}
    for v in ran:
        groups.setdefault(v.overrides.get(line_key) if line_key else None, []).append(v)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("throughput (samples/s)", "bubble (%)"))
    for i, (key, items) in enumerate(groups.items()):
        items = sorted(items, key=lambda v: v.overrides[x_key])
        xs = [v.overrides[x_key] for v in items]
        name = f"{line_key} {key}" if line_key else scenario
        style = {"color": series_color(i)}
        throughput = [v.summary.throughput_samples_per_s for v in items]  # type: ignore[union-attr]
        bubble = [100 * v.summary.bubble_fraction for v in items]  # type: ignore[union-attr]
        fig.add_trace(go.Scatter(x=xs, y=throughput, mode="lines+markers", name=name, legendgroup=name, line=style,
                                 hovertemplate=f"{name}<br>{x_key} %{{x}}<br>%{{y:,.2f}} samples/s<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=bubble, mode="lines+markers", name=name, legendgroup=name, line=style,
                                 showlegend=False,
                                 hovertemplate=f"{name}<br>{x_key} %{{x}}<br>bubble %{{y:.1f}} %<extra></extra>"),
                      row=2, col=1)
    xs_all = sorted({v.overrides[x_key] for v in ran})
    fig.update_xaxes(type="log", tickvals=xs_all, ticktext=[str(x) for x in xs_all], showgrid=True)
    fig.update_xaxes(title={"text": AXIS_TITLES.get(x_key, x_key)}, row=2, col=1)
    fig.update_yaxes(rangemode="tozero", showgrid=True, gridcolor="#ddd")
    failed = [v for v in variants if not v.ok]
    subtitle = " · ".join(f"{v.label} cannot run: {v.error}" for v in failed)
    fig.update_layout(
        title={"text": f"{scenario} · sweep over {AXIS_TITLES.get(x_key, x_key)}"
               + (f"<br><sup>{subtitle}</sup>" if subtitle else ""), "x": 0.01},
        height=640, margin={"l": 80, "r": 20, "t": 100, "b": 60}, plot_bgcolor="white",
    )
    return fig


def write_sweep_html(variants: list[LabelledPrediction], x_key: str, line_key: str | None, scenario: str,
                     path: str | Path) -> Path:
    """Write :func:`sweep_figure` as one offline HTML page; returns the path."""
    return write_figure(sweep_figure(variants, x_key, line_key, scenario), path)
