"""What a block of a timeline says, the same on the HTML pages and in the TUI."""

from __future__ import annotations

from collections.abc import Mapping

from ppsim.plan import Action
from ppsim.trace import Span, Trace
from ppsim.trace.metrics import rank_stages


def chunk_of_stage(trace: Trace) -> dict[int, int]:
    """Each virtual stage's chunk, its place among its rank's stages (placement from the trace's
    ``stage_to_rank``); empty when every rank holds one stage."""
    out: dict[int, int] = {}
    for rank in range(trace.num_ranks):
        stages = rank_stages(trace, rank)
        if len(stages) > 1:
            out.update((s, c) for c, s in enumerate(stages))
    return out


def bar_text(span: Span, chunk_of: Mapping[int, int]) -> str:
    """Label inside a block: its micro-batch, prefixed by its chunk when the rank holds several
    (``c1:5``); the kind for step-level actions (``OPT``); both parts' for an overlapped action."""
    a = span.action
    if len(a.parts) > 1:  # an overlapped forward and backward: ``5|c1:2``, the forward's then the backward's
        return "|".join(_microbatch_text(x, chunk_of) for x in a.parts)
    if a.microbatch is None:
        return a.kind.value
    return _microbatch_text(a, chunk_of)


def _microbatch_text(a: Action, chunk_of: Mapping[int, int]) -> str:
    chunk = chunk_of.get(a.stage)
    return f"c{chunk}:{a.microbatch}" if chunk is not None else str(a.microbatch)
