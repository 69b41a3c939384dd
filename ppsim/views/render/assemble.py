"""Assembling big figures fast: the layout comes from ``make_subplots`` (validated, small), the traces
(tens of thousands of bars in typed arrays) are placed on their subplots by name and not validated
again, which would take most of a page's write time. Their builders set only known properties; the
tests validate the whole figure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go


def on_subplot(grid: go.Figure, row: int, col: int) -> dict[str, str]:
    """The ``xaxis`` / ``yaxis`` a trace takes to sit on the subplot at ``row``, ``col`` of ``grid``."""
    sub = grid.get_subplot(row, col)
    return {"xaxis": sub.xaxis.plotly_name.replace("axis", ""), "yaxis": sub.yaxis.plotly_name.replace("axis", "")}


def assemble(grid: go.Figure, placed: Iterable[tuple[Any, int, int]]) -> go.Figure:
    """The figure of ``grid``'s layout with the traces ``placed`` as (trace, row, col), in that order."""
    import plotly.graph_objects as go

    data = []
    for trace, row, col in placed:
        trace.update(on_subplot(grid, row, col))
        data.append(trace)
    return go.Figure(data=data, layout=grid.layout, _validate=False)
