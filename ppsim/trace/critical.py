"""The critical path of a step: what each action waited for, and the chain of waits that sets the
step time. From a Trace alone, so a measured run and a prediction are read by the same code.

A rank runs its actions one after the other (as :mod:`ppsim.trace.waits` reads them), so an action
starts when the rank's previous action lets it go, except where it waits on another rank:

- a receive (and, when sends block until received, a send) ends when its message has moved, which
  it cannot before the other end's matching action starts: when that start comes after the
  receive's own, the receive waited on its **peer** (the other rank, from that moment), and the
  rest of it was the message on its **link**;
- gradient clipping's all-reduce waits for the last rank of the pipeline to get there: a
  **collective** (and from there, that rank);
- anything else starts after the rank's previous action (**own** work, or **idle** when a gap
  separates them: framework overhead in a measured run).

Every span has its binding predecessor (:class:`Binding`, worked out when asked); the critical
path follows them back from the step's last action to its start. Its time split by rank and by
kind is what the CLI names as the bottleneck (:func:`bottleneck`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

from ppsim.plan import Action, Kind, matching
from ppsim.plan.action import COMM_KINDS, RECV_KINDS
from ppsim.trace.trace import Span, Trace

Cause = Literal["start", "own", "idle", "peer", "collective"]
#: what a stretch of the critical path was: a rank's compute, another of its actions (a send or
#: receive's own time, a collective's work), a message on its link, or a rank waiting for nothing
PathKind = Literal["compute", "communication", "link", "idle"]

_EPS = 1e-9  #: times closer than this (ms) are the same moment


@dataclass(frozen=True)
class Binding:
    """Why a span started (or, for one that waits on another rank, ended) when it did."""

    cause: Cause
    after: Span | None  #: the span it waited for (its rank's previous one, or the other rank's)
    waited_ms: float  #: how long its rank idled or waited before it could go on


@dataclass(frozen=True)
class Stretch:
    """A stretch of the critical path: ``rank`` busy with ``kind`` from ``start`` to ``end``."""

    rank: int
    kind: PathKind
    start: float
    end: float
    span: Span | None  #: the action it belongs to (None: a gap)

    @property
    def ms(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class CriticalPath:
    """The chain of stretches from the step's start to its end, and every span's binding."""

    stretches: tuple[Stretch, ...]  #: in time order, covering the step
    graph: _Waits

    @property
    def spans(self) -> list[Span]:
        """The actions on the path, in time order."""
        return [s.span for s in self.stretches if s.span is not None and s.kind != "link"]

    def binding(self, span: Span) -> Binding:
        """What ``span`` (one of the trace's) waited for."""
        return self.graph.binding(span)

    def bindings(self) -> dict[Span, Binding]:
        """Every span's binding (all of them: for views that show each span's wait)."""
        return {s: self.graph.binding(s) for spans in self.graph.per_rank for s in spans}

    def ms_by(self) -> dict[tuple[int, PathKind], float]:
        """The path's time per (rank, kind); a link's under its receiving rank."""
        out: dict[tuple[int, PathKind], float] = {}
        for s in self.stretches:
            out[(s.rank, s.kind)] = out.get((s.rank, s.kind), 0.0) + s.ms
        return out


class _Waits:
    """A trace's spans per rank in start order, what let each go on its rank, and the other ends
    of its messages and collectives: each binding worked out when asked (the walk asks for few)."""

    def __init__(self, trace: Trace) -> None:
        self.per_rank: list[list[Span]] = [[] for _ in range(trace.num_ranks)]
        self.peers: dict[tuple[int, Action], Span] = {}  # (rank, action) -> a send or receive: a message's other end
        self.last_clip: Span | None = None
        for s in trace.spans:
            self.per_rank[s.rank].append(s)
            kind = s.action.kind
            if kind in COMM_KINDS:
                self.peers.setdefault((s.rank, s.action), s)
            elif kind is Kind.CLIP and (self.last_clip is None or s.start > self.last_clip.start):
                self.last_clip = s
        self.previous: dict[int, Span | None] = {}  # id(span) -> what let it go on its rank
        for spans in self.per_rank:
            spans.sort(key=lambda s: (s.start, s.end))
            self.previous.update(zip(map(id, spans), _previous(spans), strict=True))
        self.waits_for_peer = COMM_KINDS if trace.meta.get("comm") == "rendezvous" else RECV_KINDS
        self.where = trace.meta.get("stage_to_rank")

    def binding(self, s: Span) -> Binding:
        own = self.previous[id(s)]
        ready = own.end if own is not None else s.start
        kind = s.action.kind
        if kind in self.waits_for_peer and self.where is not None:
            peer_action = matching(s.action)
            if 0 <= peer_action.stage < len(self.where):
                other = self.peers.get((self.where[peer_action.stage], peer_action))
                if other is not None and other.start > max(ready, s.start) + _EPS:
                    return Binding("peer", other, other.start - max(ready, s.start))
        elif kind is Kind.CLIP and self.last_clip is not None and self.last_clip.start > s.start + _EPS:
            return Binding("collective", self.last_clip, self.last_clip.start - s.start)
        if own is None:
            return Binding("start", None, 0.0)
        gap = s.start - own.end
        return Binding("idle" if gap > _EPS else "own", own, max(0.0, gap))


def critical_path(trace: Trace) -> CriticalPath:
    """The critical path of ``trace`` and its spans' bindings (the module docstring)."""
    graph = _Waits(trace)
    return CriticalPath(tuple(_walk(graph)), graph)


def _previous(spans: list[Span]) -> list[Span | None]:
    """For each of a rank's spans (in start order), the action that let it go: the latest to end
    of those that ended by its start (a posted send still moving does not hold its rank)."""
    ended: list[tuple[float, int]] = []  # (end, index) of the spans started so far
    best: Span | None = None
    out: list[Span | None] = []
    for i, s in enumerate(spans):
        while ended and ended[0][0] <= s.start + _EPS:
            end, j = heapq.heappop(ended)
            if best is None or end >= best.end:
                best = spans[j]
        out.append(best)
        heapq.heappush(ended, (s.end, i))
    return out


def _walk(graph: _Waits) -> list[Stretch]:
    """From the span that ends the step back along the bindings to the step's start."""
    per_rank = graph.per_rank
    last = max((s for spans in per_rank for s in spans), key=lambda s: (s.end, -s.start), default=None)
    out: list[Stretch] = []
    s, until = last, last.end if last is not None else 0.0  # the path covers s from its start to ``until``
    while s is not None:
        b = graph.binding(s)
        if b.cause == "peer" and b.after is not None:
            # the message moved from the peer's start on: its link; the peer's own path before that
            moved = max(b.after.start, s.start)
            out.append(Stretch(s.rank, "link", moved, until, s))
            s, until = b.after, b.after.start
            continue
        if b.cause == "collective" and b.after is not None:
            out.append(Stretch(s.rank, "communication", b.after.start, until, s))
            s, until = b.after, b.after.start
            continue
        begin = s.start
        out.append(Stretch(s.rank, "compute" if s.lane == "compute" else "communication", begin, until, s))
        if b.after is not None and b.waited_ms > _EPS:
            out.append(Stretch(s.rank, "idle", b.after.end, begin, None))
        s, until = b.after, (b.after.end if b.after is not None else 0.0)
    out.reverse()
    first = min((spans[0].start for spans in per_rank if spans), default=0.0)
    if out and out[0].start > first + _EPS:  # the path's rank started after the step did (a measured run)
        out.insert(0, Stretch(out[0].rank, "idle", first, out[0].start, None))
    return [x for x in out if x.end - x.start > _EPS or x.kind == "compute"]  # a send posted in no time: not a stretch


@dataclass(frozen=True)
class Bottleneck:
    """What sets the step time, from the critical path: the rank whose compute fills most of it."""

    rank: int
    compute_ms: float  #: that rank's compute on the path
    step_ms: float
    link_ms: float  #: messages on their links, on the path
    communication_ms: float  #: sends', receives' and collectives' own time on the path
    idle_ms: float
    others_ms: float  #: the other ranks' compute on the path

    def to_json_dict(self) -> dict[str, float | int]:
        """What ``ppsim run --json`` gives of it."""
        return {"bottleneck_rank": self.rank, "bottleneck_compute_ms": self.compute_ms,
                "other_compute_ms": self.others_ms, "link_ms": self.link_ms,
                "communication_ms": self.communication_ms, "idle_ms": self.idle_ms}

    def line(self) -> str:
        """One line for the CLI: the bottleneck and what else the path holds."""
        def share(ms: float) -> str:
            return f"{100 * ms / self.step_ms:.0f} %" if self.step_ms > 0 else "0 %"

        rest = [f"{what} {share(ms)}" for what, ms in (
            ("other ranks' compute", self.others_ms), ("messages on links", self.link_ms),
            ("collectives and transfers", self.communication_ms), ("idle", self.idle_ms)) if ms >= 0.005 * self.step_ms]
        return f"rank {self.rank}'s own compute: {share(self.compute_ms)} of the step" + (
            "; then " + ", ".join(rest) if rest else "")


def bottleneck(path: CriticalPath) -> Bottleneck | None:
    """The rank with the most compute on ``path`` and how the rest of the path splits (None for an
    empty trace)."""
    if not path.stretches:
        return None
    by = path.ms_by()
    compute = {r: ms for (r, k), ms in by.items() if k == "compute"}
    step = path.stretches[-1].end - path.stretches[0].start
    if not compute:
        return None
    rank = max(compute, key=lambda r: (compute[r], -r))
    total = {k: sum(ms for (_, kind), ms in by.items() if kind == k) for k in ("link", "communication", "idle")}
    return Bottleneck(rank, compute[rank], step, total["link"], total["communication"], total["idle"],
                      sum(compute.values()) - compute[rank])


__all__ = ["Binding", "Bottleneck", "CriticalPath", "Stretch", "bottleneck", "critical_path"]
