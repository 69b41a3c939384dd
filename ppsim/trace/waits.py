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

import math
from dataclasses import dataclass
from operator import itemgetter

from ppsim.plan import Action, Kind, matching
from ppsim.trace.intervals import merged, outside, union_length
from ppsim.trace.trace import Span, Trace

_P2P = frozenset((Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B))
_RECEIVES = frozenset((Kind.RECV_F, Kind.RECV_B))
_START_END = itemgetter(3, 4)  #: a span's (start, end)


@dataclass(frozen=True)
class RankTime:
    """Where a rank's step goes: computing, or blocked outside compute, split by what it waited for."""

    compute: list[Span]  #: its compute spans
    busy_ms: float  #: the compute spans' union
    exposed_comm_ms: float | None  #: blocked while data moved or queued for a link, or in a collective
    peer_wait_ms: float | None  #: blocked until a peer produced, sent or asked for the data


def busy_times(trace: Trace) -> list[RankTime]:
    """Every rank's compute spans and busy time alone (no waits: cheaper, for views that show none)."""
    computes: list[list[Span]] = [[] for _ in range(trace.num_ranks)]
    for s in trace.spans:
        if s[1] == "compute":
            computes[s[0]].append(s)
    return [RankTime(c, union_length([(s[3], s[4]) for s in c]), None, None) for c in computes]


def rank_times(trace: Trace) -> list[RankTime]:
    """Every rank's :class:`RankTime` (see the module docstring), in one pass over its spans."""
    per_rank: list[list[Span]] = [[] for _ in range(trace.num_ranks)]
    p2p: dict[Action, float] = {}  #: each send's and receive's start by its action (the first, when replicas repeat it)
    everyone_clipping = -math.inf  #: when the last rank got to the gradient norm's all-reduce
    for s in trace.spans:
        per_rank[s[0]].append(s)
        kind = s[2][1]
        if kind in _P2P:
            p2p.setdefault(s[2], s[3])
        elif kind is Kind.CLIP and s[3] > everyone_clipping:
            everyone_clipping = s[3]
    waits_for_peer = _P2P if trace.meta.get("comm") == "rendezvous" else _RECEIVES  #: no data moves before the peer acts
    out = []
    for mine in per_rank:
        mine.sort(key=_START_END)
        computes = [s for s in mine if s[1] == "compute"]
        compute = merged([(s[3], s[4]) for s in computes])
        nexts = [s[3] for s in mine[1:]] + [math.inf]  #: when the rank starts its next action
        exposed: list[tuple[float, float]] = []
        peer: list[tuple[float, float]] = []
        for s, moves_on in zip(mine, nexts):
            if s[1] == "compute":
                continue
            start, end = s[3], s[4]
            if moves_on < end:
                end = moves_on
            if end <= start:
                continue
            kind = s[2][1]
            if kind in waits_for_peer:
                moves = p2p.get(matching(s[2]), -math.inf)  # the data could not move before its peer acted
            elif kind is Kind.CLIP:
                moves = everyone_clipping  # nor the norm before the last rank got to the all-reduce
            else:
                moves = -math.inf
            moves = start if moves < start else end if moves > end else moves
            if moves > start:
                peer.append((start, moves))
            if end > moves:
                exposed.append((moves, end))
        out.append(RankTime(computes, sum(e - s for s, e in compute), outside(exposed, compute),
                            outside(peer, compute)))
    return out
