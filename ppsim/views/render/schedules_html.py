"""Several schedules of one scenario on one page: their timelines stacked on one time axis, then bar
charts of step time, bubble fraction and peak memory per schedule. Plotly is imported on first use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.errors import PpsimError
from ppsim.plan import Kind
from ppsim.views.palette import series_color
from ppsim.views.render.gantt import row_labels, timeline_bars, timeline_layout, write_figure
from ppsim.views.render.labelled import LabelledPrediction

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SUMMARY_HEIGHT = 320  #: pixels of the bar-chart row
#: the bar charts under the timelines: (title, trace name, value of a variant)
SUMMARY_BARS = (
    ("step time (ms)", "step time", lambda v: v.summary.step_time_ms),
    ("bubble (%)", "bubble", lambda v: 100 * v.summary.bubble_fraction),
    ("peak memory (GiB)", "peak memory", lambda v: (v.peak_memory_bytes() or 0.0) / 2**30),
)


def subplot_title(v: LabelledPrediction) -> str:
    s = v.summary
    if s is None:
        return f"<b>{v.label}</b> · cannot run"
    return f"<b>{v.label}</b> · step {s.step_time_ms:,.2f} ms · bubble {s.bubble_fraction:.1%}"


def schedules_figure(variants: list[LabelledPrediction], scenario: str) -> go.Figure:
    """Timelines of the variants that ran, stacked with one shared time axis, and the summary bars."""
    from plotly.subplots import make_subplots

    ran = [v for v in variants if v.ok]
    if not ran:
        raise PpsimError("no schedule could run the scenario: there is nothing to draw")
    rows = [row_labels(v.trace) for v in ran]  # type: ignore[arg-type]
    heights = [timeline_layout(r, "")["height"] - 100 for r in rows] + [SUMMARY_HEIGHT]
    total = sum(heights) + 90 * len(heights) + 120
    n = len(ran)
    fig = make_subplots(
        rows=n + 1, cols=3, row_heights=heights, vertical_spacing=90 / total, horizontal_spacing=0.08,
        specs=[[{"colspan": 3}, None, None]] * n + [[{}, {}, {}]],
        subplot_titles=[subplot_title(v) for v in ran] + [title for title, _, _ in SUMMARY_BARS],
    )
    shown: set[Kind] = set()
    for i, (v, labels) in enumerate(zip(ran, rows), start=1):
        for bar in timeline_bars(v.trace, shown):  # type: ignore[arg-type]
            fig.add_trace(bar, row=i, col=1)
        fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels, autorange="reversed",
                         row=i, col=1)
        fig.update_xaxes(showgrid=True, showticklabels=True, row=i, col=1, **({"matches": "x"} if i > 1 else {}))
    fig.update_xaxes(title={"text": "time (ms)"}, row=n, col=1)
    import plotly.graph_objects as go

    names = [v.label for v in ran]
    for col, (_, name, value) in enumerate(SUMMARY_BARS, start=1):
        values = [value(v) for v in ran]
        fig.add_trace(go.Bar(x=names, y=values, name=name, showlegend=False, marker={"color": series_color(0)}, width=0.6,
                             text=[f"{y:,.1f}" for y in values], textposition="outside", cliponaxis=False,
                             hovertemplate=f"%{{x}}<br>{name} %{{y:,.2f}}<extra></extra>"), row=n + 1, col=col)
    failed = [v for v in variants if not v.ok]
    subtitle = " · ".join(f"{v.label} cannot run: {v.error}" for v in failed)
    fig.update_layout(
        title={"text": f"{scenario} · {len(ran)} schedules" + (f"<br><sup>{subtitle}</sup>" if subtitle else ""),
               "x": 0.01},
        barmode="overlay", bargap=0.0, uniformtext={"mode": "hide", "minsize": 8}, height=total,
        legend={"title": {"text": "kind"}}, margin={"l": 110, "r": 20, "t": 100, "b": 50}, plot_bgcolor="white",
    )
    return fig


def write_schedules_html(variants: list[LabelledPrediction], scenario: str, path: str | Path) -> Path:
    """Write :func:`schedules_figure` as one offline HTML page; returns the path."""
    return write_figure(schedules_figure(variants, scenario), path)
