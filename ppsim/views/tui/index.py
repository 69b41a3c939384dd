"""A trace's spans grouped by row (rank, lane) and sorted by start, built once per trace: drawing a
window and stepping a selection read only the spans they need, never the whole trace again."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import itemgetter, sub

from ppsim.plan import Kind
from ppsim.trace import LANES, Span, Trace
from ppsim.views.labels import chunk_of_stage


@dataclass(frozen=True)
class RowSpans:
    """One row's spans in start order, with their starts for bisection."""

    spans: list[Span] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    longest: float = 0.0  #: the longest span: how far back a span starting before a window may reach into it

    @classmethod
    def of(cls, spans: list[Span]) -> RowSpans:
        ordered = sorted(spans, key=itemgetter(3))  # by start; a tie keeps the trace's order
        starts = list(map(itemgetter(3), ordered))
        return cls(ordered, starts, max(map(sub, map(itemgetter(4), ordered), starts), default=0.0))

    def in_window(self, start: float, end: float) -> list[Span]:
        """The spans that may overlap [start, end), in start order (those ending at ``start`` aside)."""
        lo = bisect_left(self.starts, start - self.longest)
        inside = bisect_left(self.starts, start, lo)
        hi = bisect_left(self.starts, end, inside)
        return [s for s in self.spans[lo:inside] if s.end > start] + self.spans[inside:hi]


class TraceIndex:
    """A trace's rows (each sorted when first read), its step bounds, the chunk of each stage and
    the kinds on each lane."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.chunk_of = chunk_of_stage(trace)
        spans = trace.spans
        self.bounds = (min(map(itemgetter(3), spans), default=0.0), max(map(itemgetter(4), spans), default=0.0))
        grouped: dict[tuple[int, str], list[Span]] = {}
        for s in spans:
            key = (s.rank, s.lane)
            row = grouped.get(key)
            if row is None:
                row = grouped[key] = []
            row.append(s)
        self._grouped = grouped
        self._rows: dict[tuple[int, str], RowSpans] = {}
        self._kinds: dict[str, set[Kind]] = {}

    @property
    def num_ranks(self) -> int:
        return self.trace.num_ranks

    def row(self, rank: int, lane: str) -> RowSpans:
        key = (rank, lane)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = RowSpans.of(self._grouped.get(key, []))
        return row

    def lanes(self, with_comm: bool) -> list[str]:
        """The lanes drawn per rank: compute, and with ``with_comm`` the communication lanes used."""
        used = {lane for _, lane in self._grouped}
        return ["compute"] + ([ln for ln in LANES if ln != "compute" and ln in used] if with_comm else [])

    def kinds(self, with_comm: bool) -> set[Kind]:
        """The kinds drawn on the shown lanes."""
        return set().union(*(self._lane_kinds(ln) for ln in self.lanes(with_comm)))

    def _lane_kinds(self, lane: str) -> set[Kind]:
        kinds = self._kinds.get(lane)
        if kinds is None:
            kinds = self._kinds[lane] = {s.action.kind for (_, ln), row in self._grouped.items() if ln == lane
                                         for s in row}
        return kinds
