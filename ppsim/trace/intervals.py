"""Time intervals [start, end) in milliseconds: their union and what of them lies outside others."""

from __future__ import annotations

Interval = tuple[float, float]


def merged(intervals: list[Interval]) -> list[Interval]:
    """``intervals`` sorted by start (as given), the overlapping ones joined."""
    out: list[Interval] = []
    for s, e in intervals:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def union_length(intervals: list[Interval]) -> float:
    """Total length covered by intervals in any order, overlaps counted once."""
    return sum(e - s for s, e in merged(sorted(intervals)))


def outside(intervals: list[Interval], covered: list[Interval]) -> float:
    """Total length of ``intervals`` (sorted, disjoint) outside ``covered`` (sorted, disjoint)."""
    total, j = 0.0, 0
    for s, e in intervals:
        total += e - s
        while j < len(covered) and covered[j][1] <= s:
            j += 1
        k = j
        while k < len(covered) and covered[k][0] < e:
            total -= min(e, covered[k][1]) - max(s, covered[k][0])
            k += 1
    return total
