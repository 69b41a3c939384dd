"""The predicted and the measured timeline on one numeric time axis, as a self-contained HTML page.

Rows run rank by rank: ``rank R predicted`` then ``rank R measured``. Compute spans are full bars,
communication spans thinner bars on the same row; predicted bars are paler. Each trace's times
start at its own first span. One Plotly bar trace per action kind, colours from the Gantt's
:data:`~ppsim.views.palette.KIND_COLORS`. Plotly is imported here only, on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.plan import Kind
from ppsim.trace import Span, Trace
from ppsim.trace.compare import Comparison, aligned, describe
from ppsim.views.labels import bar_text, chunk_of_stage
from ppsim.views.render.gantt import hover_row, kind_bars, timeline_layout, write_figure

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

SIDES = ("predicted", "measured")
_OPACITY = {"predicted": 0.55, "measured": 1.0}


def row_label(rank: int, side: str) -> str:
    return f"rank {rank} {side}"


def _error_hover(m: Span, p: Span | None) -> str:
    if p is None:
        return "<br>not in the prediction"
    text = describe(m.rank, str(m.action), m.start - p.start, m.duration - p.duration).split(" ", 3)[3]
    return f"<br>vs predicted: {text}"


def compare_title(c: Comparison) -> str:
    schedules = c.predicted_schedule if c.predicted_schedule == c.measured_schedule else (
        f"{c.predicted_schedule} vs {c.measured_schedule}")
    return (
        f"{c.scenario or 'trace'} · {schedules} · predicted vs measured"
        f"<br><sup>step time predicted {c.predicted_step_time_ms:.2f} ms · measured {c.measured_step_time_ms:.2f} ms"
        f" · error {c.step_time_error:+.1%} · largest bubble error {c.max_abs_bubble_error_pp:.1f} pp</sup>"
    )


def compare_figure(predicted: Trace, measured: Trace, comparison: Comparison) -> go.Figure:
    """Both timelines, every span of both traces drawn once, on one ms axis."""
    import plotly.graph_objects as go

    spans = {"predicted": aligned(predicted), "measured": aligned(measured)}
    by_key = {(s.rank, str(s.action)): s for s in spans["predicted"]}
    chunk_of = {side: chunk_of_stage(t) for side, t in zip(SIDES, (predicted, measured))}
    ranks = max(predicted.num_ranks, measured.num_ranks)
    by_kind: dict[Kind, list[tuple[str, Span]]] = {}
    for side in SIDES:
        for s in spans[side]:
            by_kind.setdefault(s.action.kind, []).append((side, s))

    fig = go.Figure()
    for kind in [k for k in Kind if k in by_kind]:
        items = by_kind[kind]
        fig.add_trace(kind_bars(
            kind,
            [s for _, s in items],
            [row_label(s.rank, side) for side, s in items],
            [bar_text(s, chunk_of[side]) for side, s in items],
            [hover_row(s, f"{side} · {s.lane}",
                       _error_hover(s, by_key.get((s.rank, str(s.action)))) if side == "measured" else "")
             for side, s in items],
            opacity=[_OPACITY[side] for side, _ in items],
        ))
    rows = [row_label(r, side) for r in range(ranks) for side in SIDES]
    fig.update_layout(**timeline_layout(rows, compare_title(comparison)))
    return fig


def write_compare_html(predicted: Trace, measured: Trace, comparison: Comparison, path: str | Path) -> Path:
    """Write :func:`compare_figure` as one offline HTML page (marked as ppsim's); returns the path."""
    return write_figure(compare_figure(predicted, measured, comparison), path)
