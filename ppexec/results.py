"""Turn what the ranks recorded into ppsim Traces: the same format, metrics and exports as a prediction."""

from __future__ import annotations

from typing import Any

from ppexec.launch import RankState
from ppsim.plan import COMM_KINDS, Action, Plan, peer_stage
from ppsim.trace import Counter, Span, Trace, plan_meta


def clock_offsets(states: list[RankState]) -> tuple[dict[int, int], str]:
    """ns to subtract from each rank's clock. Ranks of one host share CLOCK_MONOTONIC; across hosts
    the clocks are aligned on the barrier every rank passed just before its ``ready`` event."""
    hosts = {st.ready.host for st in states if st.ready}
    if len(hosts) <= 1:
        return {st.rank: 0 for st in states}, "CLOCK_MONOTONIC, one host"
    ref = states[0].ready.clock_ns if states[0].ready else 0
    return {st.rank: (st.ready.clock_ns - ref) if st.ready else 0 for st in states}, "aligned at a barrier across hosts"


def step_trace(states: list[RankState], plan: Plan, step: int, meta: dict[str, Any], message_bytes: int,
               comm: str, replica: int = 0) -> Trace:
    """The measured Trace of recorded step ``step`` of data-parallel replica ``replica``."""
    offsets, clock = clock_offsets(states)
    # the trace shows one device per pipeline rank: tensor-parallel rank 0 of the replica
    shown = sorted(((st.ready.pipe_rank, st) for st in states
                    if st.ready and st.ready.replica == replica and st.ready.tp_rank == 0), key=lambda x: x[0])
    raw: list[tuple[int, Action, int, int]] = []
    for pipe_rank, st in shown:
        for text, t0, t1 in st.steps[step].spans:
            raw.append((pipe_rank, Action.parse(text), t0 - offsets[st.rank], t1 - offsets[st.rank]))
    origin = min(t0 for _, _, t0, _ in raw)
    where = plan.stage_to_rank
    spans = []
    for rank, a, t0, t1 in raw:
        message = a.kind in COMM_KINDS
        peer = where[peer_stage(a)] if message else None
        spans.append(Span(rank, a.lane, a, (t0 - origin) / 1e6, (t1 - origin) / 1e6,
                          message_bytes if message else None, peer))
    counters = []
    for pipe_rank, st in shown:
        points = tuple(((t - offsets[st.rank] - origin) / 1e6, float(b)) for t, b in st.steps[step].memory)
        if points:
            counters.append(Counter(pipe_rank, "memory_bytes", "bytes", points))
    records = [st.steps[step] for _, st in shown]
    sources = {r.memory_source for r in records} - {None}
    losses = [r.loss for r in records if r.loss is not None]
    forwards: dict[str, int] = {}
    for r in records:  # how often the blocks and their attention cores ran, recomputation included
        for name, n in r.forwards.items():
            forwards[name] = forwards.get(name, 0) + n
    full_meta = dict(meta)
    full_meta.update(plan_meta(plan, source="measured", clock=clock, comm=comm, message_bytes=message_bytes))
    full_meta.update({
        "step": step,
        "loss": losses[0] if losses else None,
        # "rss": a CPU process's resident memory (interpreter and libraries included), "allocator":
        # the device allocator's bytes in use, which is what ppsim predicts
        "memory_measured": sources.pop() if len(sources) == 1 else None,
        "forward_calls": forwards or None,
    })
    return Trace(spans=spans, meta=full_meta, counters=counters)
