"""Several schedules of one scenario on one screen: a small timeline per schedule (compute rows only)
on one shared time axis, so a shorter step is a shorter row, then dot plots of step time (on an
axis that spans the values, each labelled with its excess over the fastest), bubble and peak memory
per schedule, each schedule in its own colour and marker; the device's memory is drawn on the last
(a log axis when the peaks span more than :data:`LOG_SPAN`) and what does not fit is marked.
Plotly is imported on first use."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppsim.errors import PpsimError
from ppsim.plan import Kind
from ppsim.trace.metrics import Summary
from ppsim.views.palette import LIMIT_COLOR, schedule_color, schedule_style
from ppsim.views.render.assemble import assemble
from ppsim.views.render.bars import bar_traces, rows_axis, rows_of
from ppsim.views.render.labelled import LabelledPrediction, trace_of
from ppsim.views.render.memory import GIB, NO_FIT, add_limit
from ppsim.views.render.page import write_figure

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SUMMARY_PX = (260, 26)  #: pixels of the summary row: at least the first, the second per schedule
TIMELINES_PX = 1400  #: pixels the small timelines share, while each rank gets RANK_PX
RANK_PX = (4, 14)  #: the least and the most pixels per rank in a small timeline
LABEL_PX = 10  #: the least pixels between two rank labels of a small timeline
GAP_PX = 46  #: above each plot: its title, the time ticks of the one before
LOG_SPAN = 8  #: a memory axis whose peaks span more than this factor is logarithmic


@dataclass(frozen=True)
class Dots:
    """One of the dot plots under the timelines: a value per schedule."""

    title: str
    name: str
    value: Callable[[LabelledPrediction], float]
    text: Callable[[float, float], str]  #: the label of a value, given the least of all
    from_zero: bool  #: the axis starts at 0 (else it spans the values, so a few per cent read)


def _over_least(y: float, least: float) -> str:
    return f"{y:,.1f}" + (f" (+{y / least - 1:.1%})" if least > 0 and y > least * 1.0005 else " (least)")


def _summary(v: LabelledPrediction) -> Summary:
    assert v.summary is not None, f"{v.label} ran but has no summary"
    return v.summary


#: the plots under the timelines
SUMMARY_DOTS = (
    Dots("step time (ms): against the fastest", "step time", lambda v: _summary(v).step_time_ms, _over_least, False),
    Dots("bubble (%)", "bubble", lambda v: 100 * _summary(v).bubble_fraction, lambda y, _: f"{y:.1f} %", True),
    Dots("peak memory per device (GiB)", "peak memory", lambda v: (v.peak_memory_bytes() or 0.0) / GIB,
         lambda y, _: f"{y:,.1f}", True),
)


def schedule_of(v: LabelledPrediction) -> str:
    """The schedule a variant ran (its label when it changed none)."""
    return str(v.overrides.get("schedule") or v.label)


def fits(v: LabelledPrediction) -> bool | None:
    """Whether the variant's peak memory is within its device's (None: no capacity known)."""
    cap = v.summary.memory_capacity_bytes if v.summary else None
    peak = v.peak_memory_bytes()
    return None if not cap or peak is None else peak <= cap


def swatch(schedule: str) -> str:
    """A square in the schedule's colour, for titles."""
    return f"<span style='color:{schedule_color(schedule)}'>&#9632;</span>"


def subplot_title(v: LabelledPrediction) -> str:
    s = v.summary
    if s is None:
        return f"<b>{v.label}</b> · cannot run"
    text = f"{swatch(schedule_of(v))} <b>{v.label}</b> · step {s.step_time_ms:,.2f} ms · bubble {s.bubble_fraction:.1%}"
    peak = v.peak_memory_bytes()
    if peak is not None:
        text += f" · peak {peak / GIB:,.1f} GiB"
    if fits(v) is False:
        text += f" <b><span style='color:{LIMIT_COLOR}'>{NO_FIT.upper()}</span></b>"
    return text


def rank_px(ranks: list[int]) -> float:
    """Pixels per rank: the small timelines share :data:`TIMELINES_PX`, within :data:`RANK_PX`."""
    return max(RANK_PX[0], min(RANK_PX[1], TIMELINES_PX / max(1, sum(ranks))))


def label_every(px: float) -> int:
    """Label every n-th rank, so that labels stand :data:`LABEL_PX` apart."""
    return max(1, math.ceil(LABEL_PX / px))


def _dots(dots: Dots, ran: Sequence[LabelledPrediction], over: list[bool]) -> go.Scatter:
    import plotly.graph_objects as go

    values = [dots.value(v) for v in ran]
    memory = dots.name == "peak memory"
    least = min(values)
    styles = [schedule_style(schedule_of(v)) for v in ran]
    red = [memory and o for o in over]
    return go.Scatter(
        x=values, y=[v.label for v in ran], mode="markers+text", name=dots.name, showlegend=False,
        marker={"color": [c for c, _ in styles], "symbol": [m for _, m in styles], "size": 11,
                "line": {"width": [2 if r else 0 for r in red], "color": LIMIT_COLOR}},
        text=[dots.text(y, least) + (f" {NO_FIT.upper()}" if r else "") for y, r in zip(values, red)],
        textposition="middle right", cliponaxis=False,
        textfont={"size": 10, "color": [LIMIT_COLOR if r else "#333" for r in red]},
        customdata=[NO_FIT if r else "" for r in red],
        hovertemplate=f"%{{y}}<br>{dots.name} %{{x:,.2f}}<br>%{{customdata}}<extra></extra>")


def schedules_figure(variants: Sequence[LabelledPrediction], scenario: str) -> go.Figure:
    """Small timelines of the variants that ran on one shared time axis, and the summary plots."""
    from plotly.subplots import make_subplots

    ran = [v for v in variants if v.ok]
    if not ran:
        raise PpsimError("no schedule could run the scenario: there is nothing to draw")
    traces = [trace_of(v) for v in ran]
    rows = [rows_of(t, ["compute"]) for t in traces]
    px = rank_px([t.num_ranks for t in traces])
    n = len(ran)
    heights = [max(40.0, r.extent * px) for r in rows] + [max(SUMMARY_PX[0], SUMMARY_PX[1] * n)]
    total = sum(heights) + GAP_PX * len(heights)
    grid = make_subplots(
        rows=n + 1, cols=3, row_heights=heights, vertical_spacing=GAP_PX / total, horizontal_spacing=0.12,
        specs=[[{"colspan": 3}, None, None]] * n + [[{}, {}, {}]],
        subplot_titles=[subplot_title(v) for v in ran] + [d.title for d in SUMMARY_DOTS],
    )
    shown: set[Kind] = set()
    placed: list[tuple[Any, int, int]] = []
    end = max(max(s.end for s in t.spans) for t in traces)
    for i, (t, r) in enumerate(zip(traces, rows), start=1):
        placed += [(bar, i, 1) for bar in bar_traces(t, r, shown, labels=False)]
        grid.update_yaxes(**rows_axis(r, tick_size=9 if px < 12 else 10, every=label_every(px)), row=i, col=1)
        grid.update_xaxes(showgrid=True, gridcolor="#e4e4e4", showticklabels=True, tickfont={"size": 9},
                          row=i, col=1, **({"matches": "x"} if i > 1 else {"range": [0, end]}))
    grid.update_xaxes(title={"text": "time (ms)", "standoff": 2}, row=n, col=1)
    over = [fits(v) is False for v in ran]
    for col, dots in enumerate(SUMMARY_DOTS, start=1):
        trace = _dots(dots, ran, over)
        placed.append((trace, n + 1, col))
        values = list(trace.x)
        top = max(values)
        # room on the right for the labels beside the dots
        if dots.from_zero:
            grid.update_xaxes(range=[0, top * 1.45 or 1.0], row=n + 1, col=col)
        else:
            low, high = min(values), top
            pad = max(high - low, 0.02 * high)
            grid.update_xaxes(range=[low - 0.15 * pad, high + 0.9 * pad], row=n + 1, col=col)
        grid.update_yaxes(autorange="reversed", tickfont={"size": 10}, showgrid=True, gridcolor="#eee",
                          row=n + 1, col=col)
        if dots.name == "peak memory":
            capacities = {v.summary.memory_capacity_bytes for v in ran if v.summary and v.summary.memory_capacity_bytes}
            low = min(values + [c / GIB for c in capacities])
            log = low > 0 and max(values + [c / GIB for c in capacities]) / low > LOG_SPAN
            for cap in capacities:
                add_limit(grid, cap, top * (4 if log else 1.35), row=n + 1, col=col, vertical=True,
                          log_from=low if log else None)
    failed = [v for v in variants if not v.ok]
    subtitle = " · ".join(f"{v.label} cannot run: {v.error}" for v in failed)
    grid.update_layout(
        title={"text": f"{scenario} · {len(ran)} schedules on one time axis"
               + (f"<br><sup>{subtitle}</sup>" if subtitle else ""), "x": 0.01},
        barmode="overlay", height=round(total) + 150, legend={"title": {"text": "action kind"}},
        margin={"l": 110, "r": 20, "t": 100, "b": 50}, plot_bgcolor="white",
    )
    grid.update_annotations(font={"size": 12})
    return assemble(grid, placed)


def write_schedules_html(variants: Sequence[LabelledPrediction], scenario: str, path: str | Path) -> Path:
    """Write :func:`schedules_figure` as one offline HTML page; returns the path."""
    return write_figure(schedules_figure(variants, scenario), path)
