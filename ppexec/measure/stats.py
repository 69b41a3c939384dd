"""Pure statistics of what the ranks measured, shared by the workers (a microbenchmark's quartiles)
and the launcher's profile (fits over runs and ranks): no torch, no processes, nothing of ppexec.
"""

from __future__ import annotations

import statistics

#: the statistic of each set of repetitions a set of timings takes: ``median`` (the profile's own
#: timings), ``low`` and ``high`` (the lower and upper quartile: the profile's spread)
STATISTICS = ("low", "median", "high")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """Lower quartile, median and upper quartile of ``xs`` (linear interpolation between the
    ordered samples, numpy's default; all three equal for one sample, zero for none)."""
    if len(xs) < 2:
        return (xs[0],) * 3 if xs else (0.0, 0.0, 0.0)
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def statistic(xs: list[float], which: str) -> float:
    """One of :data:`STATISTICS` of ``xs``."""
    return quartiles(xs)[STATISTICS.index(which)]


def fit_link(samples: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares latency (ms) and bandwidth (bytes per ms) of one-way times over sizes."""
    n = len(samples)
    xs = [float(b) for b, _ in samples]
    ys = [t for _, t in samples]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    latency = max(0.0, my - slope * mx)
    if slope <= 0:  # no measurable cost per byte at these sizes
        return min(ys), 1e12
    return latency, 1.0 / slope


def fit_blocks(points: dict[int, list[tuple[int, float]]], fallback: float) -> tuple[float, dict[int, float]]:
    """Time per block and a constant per stage from (blocks, time) points of each stage: a common
    slope with one intercept per stage (least squares). Without two block counts on some stage,
    the slope is ``fallback``."""
    num = den = 0.0
    for pts in points.values():
        nbar = sum(n for n, _ in pts) / len(pts)
        ybar = sum(y for _, y in pts) / len(pts)
        num += sum((n - nbar) * (y - ybar) for n, y in pts)
        den += sum((n - nbar) ** 2 for n, _ in pts)
    slope = num / den if den > 0 else fallback
    consts = {k: sum(y - slope * n for n, y in pts) / len(pts) for k, pts in points.items()}
    return slope, consts


def median_samples(measured: list[list[list[float]]], column: int) -> list[tuple[int, float]]:
    """Per size, the median over every rank's measurement of one column: (bytes, ms). Each rank
    measured the same sizes, one row per size: bytes, then the timed columns."""
    return [(int(rows[0][0]), statistics.median(float(r[column]) for r in rows)) for rows in zip(*measured)]
