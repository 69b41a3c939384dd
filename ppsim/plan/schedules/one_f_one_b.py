"""One-forward-one-backward schedules: 1F1B (PipeDream-flush, DeepSpeed's TrainSchedule),
Megatron's interleaved 1F1B with several chunks (virtual stages) per rank, and Megatron-Core's
combined 1F1B (``--overlap-moe-expert-parallel-comm``), whose steady state runs each forward
together with a backward of another micro-batch so that each one's communication (the experts'
all-to-alls) hides under the other's compute."""

from __future__ import annotations

from ppsim.plan.action import Action, Kind, Overlap, new_action
from ppsim.plan.plan import Plan
from ppsim.plan.schedules.base import make_plan


def one_f_one_b(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """1F1B: stage s runs min(p - s - 1, m) warm-up forwards, then alternates F and B, then drains.

    This is the per-stage order of DeepSpeed's ``TrainSchedule``; stage s never holds more than
    min(p - s, m) micro-batches of activations.
    """
    p, m = num_ranks, num_microbatches
    F, B, act = Kind.F, Kind.B, new_action  # (an Action from a tuple: a long plan makes tens of thousands)
    orders: list[list[Action]] = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        order = [act((s, F, i)) for i in range(warmup)]
        for i in range(m - warmup):
            order.append(act((s, F, warmup + i)))
            order.append(act((s, B, i)))
        order.extend(act((s, B, i)) for i in range(m - warmup, m))
        orders.append(order)
    return make_plan("1f1b", p, m, chunks, orders)


def _virtual(k: int, p: int, v: int, backward: bool) -> tuple[int, int]:
    """The (chunk, micro-batch) of a rank's k-th forward (or backward) in Megatron's order."""
    group = (k // p) % v
    chunk = v - 1 - group if backward else group
    microbatch = (k // (p * v)) * p + k % p
    return chunk, microbatch


def interleaved_1f1b(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Plan:
    """Megatron's interleaved 1F1B: v chunks per rank, rank r warms up with (v-1)p + 2(p-1-r)
    forwards, micro-batches advance in groups of p per chunk. Needs m to be a multiple of p."""
    p, m, v = num_ranks, num_microbatches, chunks
    if v == 1:  # as in Megatron: one chunk per rank is plain 1F1B
        plain = one_f_one_b(p, m, 1)
        return make_plan("interleaved-1f1b", p, m, 1, [list(a) for a in plain.actions])
    return make_plan("interleaved-1f1b", p, m, v, [
        fwd[:warmup] + [x for pair in zip(fwd[warmup:], bwd, strict=False) for x in pair] + bwd[len(fwd) - warmup:]
        for fwd, bwd, warmup in _megatron_passes(p, m, v)])


def _megatron_passes(p: int, m: int, v: int, extra_warmup: int = 0) -> list[tuple[list[Action], list[Action], int]]:
    """Per rank, its forwards and backwards in Megatron's order (1F1B's with one chunk) and how
    many forwards it runs before its first backward."""
    total = m * v
    F, B, act = Kind.F, Kind.B, new_action
    # the k-th forward's and backward's (chunk, micro-batch): the same on every rank
    forwards = [_virtual(k, p, v, backward=False) if v > 1 else (0, k) for k in range(total)]
    backwards = [_virtual(k, p, v, backward=True) if v > 1 else (0, k) for k in range(total)]
    out = []
    for r in range(p):
        warmup = (v - 1) * p + 2 * (p - 1 - r) if v > 1 else p - 1 - r
        out.append(([act((c * p + r, F, mb)) for c, mb in forwards], [act((c * p + r, B, mb)) for c, mb in backwards],
                    min(warmup + extra_warmup, total)))
    return out


def combined_1f1b(num_ranks: int, num_microbatches: int, chunks: int = 1) -> Plan:
    """Megatron-Core's combined 1F1B: the (interleaved) 1F1B order with one more warm-up forward,
    so that every forward of the steady state runs together with the backward of an earlier
    micro-batch as one overlapped action (:class:`~ppsim.plan.Overlap`); without a pipeline it is
    F0, (F1; B0), ..., (F(m-1); B(m-2)), B(m-1), as Megatron runs one stage."""
    p, m, v = num_ranks, num_microbatches, chunks
    orders: list[list[Action | Overlap]] = []
    for fwd, bwd, warmup in _megatron_passes(p, m, v, extra_warmup=1):
        steady = [Overlap.of(f, b) for f, b in zip(fwd[warmup:], bwd, strict=False)]
        orders.append([*fwd[:warmup], *steady, *bwd[len(fwd) - warmup:]])
    return make_plan("combined-1f1b", p, m, v, orders)  # type: ignore[arg-type]  # Overlaps stand in for Actions
