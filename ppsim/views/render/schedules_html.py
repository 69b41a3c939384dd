"""Several schedules of one scenario on one screen: a small timeline per schedule (compute rows only)
on one shared time axis, so a shorter step is a shorter row, then bar charts of step time, bubble
and peak memory per schedule, the device's memory drawn on the last and what does not fit marked.
Plotly is imported on first use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppsim.errors import PpsimError
from ppsim.plan import Kind
from ppsim.views.palette import LIMIT_COLOR, series_color
from ppsim.views.render.assemble import assemble
from ppsim.views.render.bars import bar_traces, rows_axis, rows_of
from ppsim.views.render.labelled import LabelledPrediction, trace_of
from ppsim.views.render.memory import GIB, NO_FIT, add_limit
from ppsim.views.render.page import write_figure

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SUMMARY_HEIGHT = 260  #: pixels of the bar-chart row
TIMELINES_PX = 560  #: pixels the small timelines share, while each rank gets RANK_PX
RANK_PX = (4, 14)  #: the least and the most pixels per rank in a small timeline
GAP_PX = 46  #: above each plot: its title, the time ticks of the one before
#: the bar charts under the timelines: (title, trace name, value of a variant)
SUMMARY_BARS = (
    ("step time (ms)", "step time", lambda v: v.summary.step_time_ms),
    ("bubble (%)", "bubble", lambda v: 100 * v.summary.bubble_fraction),
    ("peak memory per device (GiB)", "peak memory", lambda v: (v.peak_memory_bytes() or 0.0) / GIB),
)


def fits(v: LabelledPrediction) -> bool | None:
    """Whether the variant's peak memory is within its device's (None: no capacity known)."""
    cap = v.summary.memory_capacity_bytes if v.summary else None
    peak = v.peak_memory_bytes()
    return None if not cap or peak is None else peak <= cap


def subplot_title(v: LabelledPrediction) -> str:
    s = v.summary
    if s is None:
        return f"<b>{v.label}</b> · cannot run"
    text = f"<b>{v.label}</b> · step {s.step_time_ms:,.2f} ms · bubble {s.bubble_fraction:.1%}"
    peak = v.peak_memory_bytes()
    if peak is not None:
        text += f" · peak {peak / GIB:,.1f} GiB"
    if fits(v) is False:
        text += f" <b><span style='color:{LIMIT_COLOR}'>{NO_FIT.upper()}</span></b>"
    return text


def rank_px(ranks: list[int]) -> float:
    """Pixels per rank: the small timelines share :data:`TIMELINES_PX`, within :data:`RANK_PX`."""
    return max(RANK_PX[0], min(RANK_PX[1], TIMELINES_PX / max(1, sum(ranks))))


def schedules_figure(variants: Sequence[LabelledPrediction], scenario: str) -> go.Figure:
    """Small timelines of the variants that ran on one shared time axis, and the summary bars."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ran = [v for v in variants if v.ok]
    if not ran:
        raise PpsimError("no schedule could run the scenario: there is nothing to draw")
    traces = [trace_of(v) for v in ran]
    rows = [rows_of(t, ["compute"]) for t in traces]
    px = rank_px([t.num_ranks for t in traces])
    heights = [max(40.0, r.extent * px) for r in rows] + [SUMMARY_HEIGHT]
    total = sum(heights) + GAP_PX * len(heights)
    n = len(ran)
    grid = make_subplots(
        rows=n + 1, cols=3, row_heights=heights, vertical_spacing=GAP_PX / total, horizontal_spacing=0.08,
        specs=[[{"colspan": 3}, None, None]] * n + [[{}, {}, {}]],
        subplot_titles=[subplot_title(v) for v in ran] + [title for title, _, _ in SUMMARY_BARS],
    )
    shown: set[Kind] = set()
    placed: list[tuple[Any, int, int]] = []
    end = max(max(s.end for s in t.spans) for t in traces)
    for i, (t, r) in enumerate(zip(traces, rows), start=1):
        placed += [(bar, i, 1) for bar in bar_traces(t, r, shown, labels=False)]
        grid.update_yaxes(**rows_axis(r, tick_size=9 if px < 10 else 10),
                         **({"showticklabels": False} if px < 8 else {}), row=i, col=1)
        grid.update_xaxes(showgrid=True, gridcolor="#e4e4e4", showticklabels=True, tickfont={"size": 9},
                          row=i, col=1, **({"matches": "x"} if i > 1 else {"range": [0, end]}))
    grid.update_xaxes(title={"text": "time (ms)", "standoff": 2}, row=n, col=1)
    names = [v.label for v in ran]
    over = [fits(v) is False for v in ran]
    for col, (_, name, value) in enumerate(SUMMARY_BARS, start=1):
        values = [value(v) for v in ran]
        memory = name == "peak memory"
        text = [f"{y:,.1f}" for y in values]
        colours = [LIMIT_COLOR if memory and o else series_color(0) for o in over]
        placed.append((go.Bar(x=names, y=values, name=name, showlegend=False, marker={"color": colours}, width=0.6,
                             text=text, textposition="outside", cliponaxis=False,
                             customdata=[NO_FIT if memory and o else "" for o in over],
                             hovertemplate=f"%{{x}}<br>{name} %{{y:,.2f}}<br>%{{customdata}}<extra></extra>"),
                       n + 1, col))
        if memory:
            capacities = {v.summary.memory_capacity_bytes for v in ran if v.summary and v.summary.memory_capacity_bytes}
            for cap in capacities:
                add_limit(grid, cap, max(values), row=n + 1, col=col)
    failed = [v for v in variants if not v.ok]
    subtitle = " · ".join(f"{v.label} cannot run: {v.error}" for v in failed)
    grid.update_layout(
        title={"text": f"{scenario} · {len(ran)} schedules on one time axis"
               + (f"<br><sup>{subtitle}</sup>" if subtitle else ""), "x": 0.01},
        barmode="overlay", height=round(total) + 150, legend={"title": {"text": "action kind"}},
        margin={"l": 80, "r": 20, "t": 100, "b": 50}, plot_bgcolor="white",
    )
    grid.update_annotations(font={"size": 12})
    return assemble(grid, placed)


def write_schedules_html(variants: Sequence[LabelledPrediction], scenario: str, path: str | Path) -> Path:
    """Write :func:`schedules_figure` as one offline HTML page; returns the path."""
    return write_figure(schedules_figure(variants, scenario), path)
