"""Where a rank's time outside compute goes: blocked on a transfer, or waiting for a peer's work.

From a Trace alone (simulated or measured). A rank runs its actions one after the other, so a
communication action blocks its rank from its start until the rank's next action starts, or its
own end if that comes first (a posted send blocks only until the rank moves on). Within that
window, compute spans that overlap it (a gradient reduction started under the last backward) are
left out, and the rest is split at the moment the data could first move:

- a receive: before its matching send started, the peer had not yet produced or sent the message:
  **peer wait**; from then on the message was on its way (sender's overhead, queued behind other
  messages on the link, on the wire, latency, receiver's overhead): **exposed comm**;
- a send under ``rendezvous`` semantics: before the receiver posted its receive, **peer wait**;
  the rest, **exposed comm**; under ``eager`` and ``async`` a send waits for no one: exposed comm;
- gradient clipping's all-reduce: until the last rank of the pipeline got there (the latest
  ``CLIP`` start), **peer wait**; the rest, exposed comm;
- other collectives (the data-parallel gradient reduction): exposed comm.

What is neither compute nor one of these is idle: outside every action (before the rank's first
or after its last, as the step waits for the slowest rank; framework overhead between actions in
a measured run). A faster link shortens exposed comm and nothing else; peer wait shrinks only when
the peers it waits for get faster.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsim.plan import Action, Kind, matching
from ppsim.trace.trace import Span, Trace

_P2P = (Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B)
_SENDS = (Kind.SEND_F, Kind.SEND_B)


@dataclass(frozen=True)
class Waits:
    """A rank's time blocked outside compute, split by what it waited for."""

    exposed_comm_ms: float  #: blocked while data moved or queued for a link, or in a collective
    peer_wait_ms: float  #: blocked until a peer produced, sent or asked for the data


def rank_waits(trace: Trace) -> list[Waits]:
    """Every rank's :class:`Waits` (see the module docstring)."""
    per_rank: list[list[Span]] = [[] for _ in range(trace.num_ranks)]
    p2p: dict[Action, Span] = {}  #: every send and receive by its action (the first, when replicas repeat it)
    clip_starts: list[float] = []
    for s in trace.spans:
        per_rank[s.rank].append(s)
        kind = s.action[1]
        if kind in _P2P:
            p2p.setdefault(s.action, s)
        elif kind is Kind.CLIP:
            clip_starts.append(s.start)
    everyone_clipping = max(clip_starts, default=float("-inf"))
    rendezvous = trace.meta.get("comm") == "rendezvous"

    def ready(s: Span) -> float:
        """When the data of ``s`` could first move: before it, the rank waits for a peer."""
        kind = s.action[1]
        if kind is Kind.CLIP:
            return everyone_clipping
        if kind not in _P2P or (kind in _SENDS and not rendezvous):
            return float("-inf")
        other = p2p.get(matching(s.action))
        return other.start if other is not None else float("-inf")

    out = []
    for spans in per_rank:
        spans.sort(key=lambda s: (s.start, s.end))
        compute = _merged([(s.start, s.end) for s in spans if s.lane == "compute"])
        exposed: list[tuple[float, float]] = []
        peer: list[tuple[float, float]] = []
        for i, s in enumerate(spans):
            if s.lane == "compute":
                continue
            start = s.start
            end = min(s.end, spans[i + 1].start) if i + 1 < len(spans) else s.end  # until the rank moves on
            if end <= start:
                continue
            moves = min(max(ready(s), start), end)
            if moves > start:
                peer.append((start, moves))
            if end > moves:
                exposed.append((moves, end))
        out.append(Waits(_outside(exposed, compute), _outside(peer, compute)))
    return out


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals with the overlapping ones joined."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _outside(intervals: list[tuple[float, float]], covered: list[tuple[float, float]]) -> float:
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
