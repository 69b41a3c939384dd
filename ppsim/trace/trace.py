"""Trace: one format for predicted and measured timelines.

A Trace holds spans (rank, lane, action, start, end in milliseconds, bytes and peer rank for
communication), counters (a named value per rank over time, e.g. activation memory) and metadata
(source = simulated | measured, clock, schedule sizes, workload figures used by the metrics).
Everything downstream (metrics, exports, the TUI, compare) reads only this.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, get_args

from ppsim.errors import PlanError, TraceError
from ppsim.formats import TRACE_FORMAT
from ppsim.plan import Action, Lane
from ppsim.trace.meta import TraceMeta, read_meta

TRACE_VERSION = 1
LANES: tuple[Lane, ...] = get_args(Lane)  #: in the order views draw them


class Span(NamedTuple):
    """One action on one rank: [start, end) in milliseconds on the trace's clock."""

    rank: int
    lane: Lane
    action: Action
    start: float
    end: float
    bytes: int | None = None  #: payload of a send / receive / collective
    peer: int | None = None  #: the rank at the other end of a send / receive

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_row(self) -> list[Any]:
        return [self.rank, self.lane, str(self.action), self.start, self.end, self.bytes, self.peer]

    @classmethod
    def from_row(cls, row: list[Any]) -> Span:
        rank, lane, action, start, end, nbytes, peer = row
        return cls(int(rank), lane_of(lane), Action.parse(action), float(start), float(end), nbytes, peer)


def lane_of(text: object) -> Lane:
    """``text`` as a lane, or a TraceError saying which lanes there are (readers of trace files)."""
    if text not in LANES:
        raise TraceError(f"{text!r} is not a lane: a span's lane is one of {', '.join(LANES)}")
    return text


@dataclass(frozen=True, slots=True)
class Counter:
    """A value on one rank over time: ``points`` are (time ms, value) pairs, the value holding until the next."""

    rank: int
    name: str
    unit: str
    points: tuple[tuple[float, float], ...]


@dataclass
class Trace:
    """Spans + counters + metadata. ``meta`` keys used by the metrics are documented in docs/internals/trace.md."""

    spans: list[Span]
    meta: TraceMeta = field(default_factory=lambda: TraceMeta())
    counters: list[Counter] = field(default_factory=list)

    # ----- convenience -------------------------------------------------------------------------
    @property
    def num_ranks(self) -> int:
        n = self.meta.get("num_ranks")
        if n is not None:
            return int(n)
        return 1 + max((s.rank for s in self.spans), default=-1)

    def actions_by_rank(self) -> list[list[Action]]:
        """Actions per rank in start order (the executed order)."""
        out: list[list[tuple[float, int, Action]]] = [[] for _ in range(self.num_ranks)]
        for i, s in enumerate(self.spans):
            out[s.rank].append((s.start, i, s.action))
        return [[a for _, _, a in sorted(r)] for r in out]

    # ----- I/O ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "meta": self.meta,
            "span_fields": ["rank", "lane", "action", "start_ms", "end_ms", "bytes", "peer"],
            "spans": [s.to_row() for s in self.spans],
            "counters": [
                {"rank": c.rank, "name": c.name, "unit": c.unit, "points": [list(p) for p in c.points]}
                for c in self.counters
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
            raise TraceError(f"not a ppsim trace: the 'format' field must be {TRACE_FORMAT!r}")
        if data.get("version") != TRACE_VERSION:
            raise TraceError(f"trace version {data.get('version')!r} is not supported (this ppsim reads {TRACE_VERSION})")
        try:
            spans = [Span.from_row(r) for r in data["spans"]]
            counters = [
                Counter(
                    int(c["rank"]), str(c["name"]), str(c.get("unit", "")), tuple((float(t), float(v)) for t, v in c["points"])
                )
                for c in data.get("counters", [])
            ]
        except (KeyError, ValueError, TypeError, PlanError) as exc:
            raise TraceError(f"trace has a malformed span or counter: {exc}") from None
        return cls(spans=spans, meta=read_meta(data.get("meta", {})), counters=counters)

    def check(self) -> None:
        """A TraceError naming the first value no real step can have: a time that is NaN or infinite,
        a span that ends before it starts, a rank outside 0 to ``num_ranks - 1``, or a rank count that
        is not a whole number from 1 to the number of spans."""
        n = self.meta.get("num_ranks")
        if n is not None and (type(n) is not int or not 1 <= n <= max(len(self.spans), 1)):
            raise TraceError(f"meta.num_ranks is {n!r}; it must be a whole number from 1 to the number of spans "
                             f"({len(self.spans):,})")
        ranks = self.num_ranks
        for i, s in enumerate(self.spans):
            what = f"span {i} (rank {s.rank}, {s.action})"
            for name, t in (("start", s.start), ("end", s.end)):
                if not math.isfinite(t):
                    raise TraceError(f"{what} has {name} time {t} ms; every time in a trace must be a finite number")
            if s.end < s.start:
                raise TraceError(f"{what} ends ({s.end} ms) before it starts ({s.start} ms)")
            if not 0 <= s.rank < ranks:
                raise TraceError(f"{what} is on rank {s.rank}, outside 0 to {ranks - 1}")
        for c in self.counters:
            if any(not (math.isfinite(t) and math.isfinite(v)) for t, v in c.points):
                raise TraceError(f"counter {c.name!r} of rank {c.rank} has a NaN or infinite point; every value in a "
                                 "trace must be a finite number")

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """A Trace JSON file, a ppexec run folder or a Chrome trace ppsim wrote (see :mod:`ppsim.trace.load`)."""
        from ppsim.trace.load import load_trace

        return load_trace(path)
