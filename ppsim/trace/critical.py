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

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Literal

from ppsim.plan import Action, Kind, matching
from ppsim.plan.action import COMM_KINDS, RECV_KINDS
from ppsim.trace.trace import Span, Trace

Cause = Literal["start", "own", "idle", "peer", "collective"]
#: what a stretch of the critical path was: a rank's compute, another of its actions (a send or
#: receive's own time, a collective's work), a message on its link, or a rank waiting for nothing
PathKind = Literal["compute", "communication", "link", "idle"]

_EPS = 1e-9  #: times closer than this (ms) are the same moment
_BACKWARD_WORK = frozenset({Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B})  #: what makes a rank's gradients


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
    _slack: dict[int, float] | None = field(default=None, repr=False, compare=False)

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

    def on_path(self) -> frozenset[int]:
        """The ``id`` of every span on the path (what views mark)."""
        return frozenset(id(s) for s in self.spans)

    def waited_for(self, span: Span) -> str:
        """What ``span`` waited for, in words (through the receive or collective right before it,
        when that is what held it)."""
        b = self.binding(span)
        other = b.after
        if other is not None and b.cause in ("own", "idle") and other.lane != "compute":
            held = self.binding(other)  # the receive, send or collective just before it: what held that
            if held.cause in ("peer", "collective") and held.after is not None:
                b, other = held, held.after
        if b.cause == "start" or other is None:
            return "started the step"
        if b.cause == "peer":
            return f"waited {b.waited_ms:,.3f} ms for rank {other.rank} ({other.action}), then for the link"
        if b.cause == "collective":
            return f"waited {b.waited_ms:,.3f} ms for rank {other.rank}, the last into the collective"
        if b.cause == "idle":
            return f"idle {b.waited_ms:,.3f} ms after {other.action}"
        return f"right after {other.action} on its rank"

    def slack(self, span: Span) -> float:
        """How much later ``span`` (one of the trace's) could end without a longer step (ms): 0 on
        the critical path. Worked out for every span on the first call (:func:`_slacks`)."""
        if self._slack is None:
            object.__setattr__(self, "_slack", _slacks(self.graph))
        assert self._slack is not None
        return self._slack[id(span)]

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
        self._backward_ends: list[list[tuple[float, int]]] | None = None  # per rank, (end, index) of its backward work
        self.where = trace.meta.get("stage_to_rank")

    def last_backward(self, s: Span) -> Span | None:
        """The last backward work (B, I, W or an overlapped pair) of ``s``'s rank to end by ``s``'s
        start: what made the gradients a reduction sends."""
        if self._backward_ends is None:
            self._backward_ends = [sorted(((x.end, i) for i, x in enumerate(spans)
                                           if x.lane == "compute" and x.action.kind in _BACKWARD_WORK))
                                   for spans in self.per_rank]
        ends = self._backward_ends[s.rank]
        k = bisect.bisect_right(ends, (s.start + _EPS, len(self.per_rank[s.rank]))) - 1
        return self.per_rank[s.rank][ends[k][1]] if k >= 0 else None

    def peer_of(self, s: Span) -> Span | None:
        """The other end of ``s``'s message when ``s`` waits on it (a receive; a send too under
        rendezvous), None otherwise or when the trace does not hold it."""
        if s.action.kind not in self.waits_for_peer or self.where is None:
            return None
        peer_action = matching(s.action)
        if not 0 <= peer_action.stage < len(self.where):
            return None
        return self.peers.get((self.where[peer_action.stage], peer_action))

    def binding(self, s: Span) -> Binding:
        own = self.previous[id(s)]
        ready = own.end if own is not None else s.start
        kind = s.action.kind
        if kind in self.waits_for_peer:
            other = self.peer_of(s)
            # a peer that started after this span ended did not hold it (a measured run's clocks)
            if other is not None and max(ready, s.start) + _EPS < other.start < s.end + _EPS:
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


def _slacks(graph: _Waits) -> dict[int, float]:
    """Every span's slack (by ``id``): the latest end that keeps the step's end, less its end.

    Each span is three moments: posted (its start, once its rank's previous action let it go),
    released (posted, and for a receive, or a rendezvous send, its other end posted; for gradient
    clipping, every rank's clipping posted) and ended (released plus what it then took, which a
    wait cannot shrink). Those moments and their order form a graph without loops (both ends of a
    rendezvous wait on each other's *post*, not end); the latest time of each moment is settled
    from the step's end back in reverse topological order."""
    spans = [s for rank in graph.per_rank for s in rank]
    index = {id(s): i for i, s in enumerate(spans)}
    n = len(spans)
    step_end = max((s.end for s in spans), default=0.0)
    hub = 3 * n  # every clipping's post before any clipping's release
    # edges x -> (y, lag): moment x must come lag before moment y (post 3i, release 3i + 1, end 3i + 2)
    edges: list[list[tuple[int, float]]] = [[] for _ in range(3 * n + 1)]
    for i, t in enumerate(spans):
        b = graph.binding(t)
        released = b.after.start if b.cause in ("peer", "collective") and b.after is not None else t.start
        edges[3 * i].append((3 * i + 1, 0.0))
        edges[3 * i + 1].append((3 * i + 2, max(0.0, t.end - released)))
        own = graph.previous[id(t)]
        if own is not None:  # a gap after it (overhead, or a wait the trace does not name) stays as long
            edges[3 * index[id(own)] + 2].append((3 * i, max(0.0, t.start - own.end)))
        kind = t.action.kind
        if kind in graph.waits_for_peer:
            other = graph.peer_of(t)
            if other is not None:
                edges[3 * index[id(other)]].append((3 * i + 1, 0.0))
                if kind in RECV_KINDS:  # the data has all arrived no sooner than it has all left
                    edges[3 * index[id(other)] + 2].append((3 * i + 2, 0.0))
        elif kind is Kind.REDUCE_GRAD and (grads := graph.last_backward(t)) is not None:
            edges[3 * index[id(grads)] + 2].append((3 * i, max(0.0, t.start - grads.end)))  # its gradients
        elif kind is Kind.CLIP:
            edges[3 * i].append((hub, 0.0))
            edges[hub].append((3 * i + 1, 0.0))
    indegree = [0] * len(edges)
    for out in edges:
        for y, _ in out:
            indegree[y] += 1
    order = [x for x in range(len(edges)) if indegree[x] == 0]
    for x in order:  # grows as it goes: Kahn's order
        for y, _ in edges[x]:
            indegree[y] -= 1
            if indegree[y] == 0:
                order.append(y)
    latest = [step_end] * len(edges)
    for x in reversed(order):  # moments in a loop (an odd measured timing) keep the step's end
        for y, lag in edges[x]:
            if latest[y] - lag < latest[x]:
                latest[x] = latest[y] - lag
    return {id(s): max(0.0, latest[3 * i + 2] - s.end) for i, s in enumerate(spans)}


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
