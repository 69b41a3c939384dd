"""The overview strip of a timeline: how idle each rank's compute is, time bin by time bin, so the
bubble's size and shape (warm-up, cool-down, stalls) read at a glance at any number of micro-batches.

The idle fraction of a bin is 1 - (compute busy time in the bin) / (bin length); averaged over the
step it is the rank's bubble (:attr:`~ppsim.trace.metrics.RankMetrics.bubble_fraction`).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from ppsim.trace import Trace
from ppsim.trace.metrics import step_bounds

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import plotly.graph_objects as go

MIN_BINS, MAX_BINS = 40, 400
#: idle fraction 0 (busy) to 1 (idle): the bubble stands out
IDLE_SCALE = [[0.0, "#e9eef5"], [0.5, "#f2b8a2"], [1.0, "#c0392b"]]


def bin_count(trace: Trace) -> int:
    """Bins of about one and a half typical compute actions, within [MIN_BINS, MAX_BINS]."""
    start, end = step_bounds(trace)
    durations = [s.duration for s in trace.spans if s.lane == "compute" and s.duration > 0]
    if not durations or end <= start:
        return MIN_BINS
    return max(MIN_BINS, min(MAX_BINS, round((end - start) / (1.5 * statistics.median(durations)))))


def busy_until(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Busy time in [-inf, t) for each t of ``times``, of the union of the intervals [starts, ends)."""
    import numpy as np

    if len(starts) == 0:
        return np.zeros_like(times)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    s = np.maximum(s, np.concatenate(([-np.inf], e[:-1])))  # clip each interval to after the ones before
    length = np.maximum(e - s, 0.0)
    before = np.concatenate(([0.0], np.cumsum(length)))
    k = np.searchsorted(s, times, side="right") - 1
    inside = np.clip(times - s[np.maximum(k, 0)], 0.0, length[np.maximum(k, 0)])
    return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)


def idle_fractions(trace: Trace, bins: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bin edges (ms, ``bins`` + 1 of them over the step) and the idle fraction of every rank's compute
    in every bin (ranks x bins)."""
    import numpy as np

    n = bins or bin_count(trace)
    start, end = step_bounds(trace)
    edges = np.linspace(start, end, n + 1)
    idle = np.ones((trace.num_ranks, n))
    width = np.diff(edges)
    for rank in range(trace.num_ranks):
        spans = [s for s in trace.spans if s.rank == rank and s.lane == "compute"]
        if not spans or end <= start:
            continue
        busy = busy_until(np.array([s.start for s in spans]), np.array([s.end for s in spans]), edges)
        idle[rank] = 1.0 - np.diff(busy) / width
    return edges, np.clip(idle, 0.0, 1.0)


def overview_heatmap(trace: Trace) -> go.Heatmap:
    """The strip: a rank per row, a time bin per column, coloured by the idle fraction."""
    import numpy as np
    import plotly.graph_objects as go

    edges, idle = idle_fractions(trace)
    return go.Heatmap(
        x=np.round((edges[:-1] + edges[1:]) / 2, 3), y=np.arange(trace.num_ranks, dtype=np.int32),
        z=np.round(idle, 2).astype(np.float32), zmin=0.0, zmax=1.0, colorscale=IDLE_SCALE, name="idle",
        hovertemplate="rank %{y}<br>%{x:,.0f} ms<br>idle %{z:.0%}<extra></extra>", showlegend=False,
        colorbar={"title": {"text": "idle", "side": "right"}, "thickness": 10, "tickformat": ".0%",
                  "tickvals": [0, 0.5, 1]},
    )
