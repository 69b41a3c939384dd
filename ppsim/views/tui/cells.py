"""What each character cell of a timeline row holds: the span covering most of it (what a click
selects and a label names), how much of it is busy, and the kind it is drawn in.

A cell inside one block is that block. A cell holding several pieces (zoomed out) is drawn as a bar
as high as its busy share (``EIGHTHS``), so idle time spread over many cells still shows, in the
colour of one of its kinds, chosen along the row by error diffusion: each kind is drawn about as
often as it runs, so forwards are not hidden under the longer backwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ppsim.plan import Kind
from ppsim.trace import Span

EIGHTHS = " ▁▂▃▄▅▆▇█"  #: a cell's busy share in eighths, as the height of a bar
SOLID = 1 - 1e-9  #: a cell this much covered by one span is inside it
EPS = 1e-9  #: in cells: rounding, not time


@dataclass(frozen=True)
class Cells:
    """One row over a window, cell by cell."""

    top: list[Span | None]  #: the span overlapping the cell most (None: nothing in it)
    busy: list[float]  #: share of the cell covered by spans, 0 to 1
    kinds: list[Kind | None]  #: the kind the cell is drawn in
    solid: list[bool]  #: the cell lies inside its top span
    starts: list[Kind | None]  #: the kind of a span at least two cells long that starts in the cell

    def eighths(self, c: int) -> int:
        """The cell's busy share in eighths: 0 when nothing is in it, else 1 (a short span) to 8."""
        if self.top[c] is None:
            return 0
        return max(1, min(8, round(self.busy[c] * 8)))


def measure(spans: list[Span], start: float, end: float, width: int) -> Cells:
    """The ``width`` cells of [start, end) over ``spans`` (one row's, in start order). A span
    shorter than a cell, even of no length, still marks its cell when nothing longer shares it."""
    top: list[Span | None] = [None] * width
    best = [0.0] * width
    busy = [0.0] * width
    starts: list[Kind | None] = [None] * width
    shares: dict[Kind, list[float]] = {}  #: per kind, its time in each cell (in cells)
    if width > 0 and end > start:
        scale, last = width / (end - start), width - 1
        for s in spans:
            _, _, action, s0, s1, _, _ = s
            if s1 <= start or s0 >= end:
                continue
            a = (s0 - start) * scale if s0 > start else 0.0  # in cells
            b = (s1 - start) * scale if s1 < end else float(width)
            c0 = int(a + EPS)  # a span ending (starting) on a cell's edge, give or take rounding, stays out of it
            if c0 > last:
                c0 = last
            c1 = math.ceil(b - EPS) - 1
            if c1 > last:
                c1 = last
            if c1 < c0:
                c1 = c0
            share = shares.get(action.kind)
            if share is None:
                share = shares[action.kind] = [0.0] * width
            if s0 >= start and b - a >= 2:
                starts[c0] = action.kind
            if c0 == c1:  # zoomed out, most spans lie in one cell
                overlap = b - a
                busy[c0] += overlap
                share[c0] += overlap
                if (overlap or 1e-12) > best[c0]:  # zero-length spans still mark their cell
                    best[c0], top[c0] = overlap or 1e-12, s
                continue
            lo = a
            for c in range(c0, c1 + 1):
                hi = c + 1.0 if c < c1 else b
                overlap, lo = hi - lo, hi
                busy[c] += overlap
                share[c] += overlap
                if (overlap or 1e-12) > best[c]:
                    best[c], top[c] = overlap or 1e-12, s
    busy = [min(1.0, x) for x in busy]
    return Cells(top, busy, _diffuse(shares, top, busy), [b >= SOLID for b in best], starts)


def _diffuse(shares: dict[Kind, list[float]], top: list[Span | None], busy: list[float]) -> list[Kind | None]:
    """Each cell's kind among those in it: the one the row owes most drawing to so far."""
    owed = dict.fromkeys(shares, 0.0)
    out: list[Kind | None] = [None] * len(top)
    for c, span in enumerate(top):
        if span is None:
            continue
        present = [k for k, share in shares.items() if share[c] > 0] if len(shares) > 1 else []
        if len(present) < 2:  # one kind (or a span of no length): nothing to share
            out[c] = present[0] if present else span.action.kind
            continue
        for k in present:
            owed[k] += shares[k][c]
        kind = max(present, key=owed.__getitem__)
        owed[kind] -= busy[c]
        out[c] = kind
    return out
