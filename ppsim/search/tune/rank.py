"""Order the evaluations by predicted throughput and say, from the numbers, why the best wins."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.space import RECOMPUTE, Candidate

GIB = 2**30


def ranking(evals: list[Evaluation]) -> list[Evaluation]:
    """Plans that fit, best first: throughput, then less memory, then the candidates' order."""
    ok = [e for e in evals if e.ranked]
    return sorted(ok, key=lambda e: (-(e.throughput_samples_per_s or 0.0), e.peak_memory_bytes or 0.0, e.candidate))


def pareto_front(evals: list[Evaluation]) -> list[Evaluation]:
    """Fitting plans no other plan beats on both throughput (higher) and peak memory (lower)."""
    front: list[Evaluation] = []
    for e in sorted(ranking(evals), key=lambda e: (e.peak_memory_bytes or 0.0, -(e.throughput_samples_per_s or 0.0))):
        if not front or (e.throughput_samples_per_s or 0) > (front[-1].throughput_samples_per_s or 0):
            front.append(e)
    return front


Group = Callable[[Candidate], Hashable]  #: the group a candidate is in (None: in none)

#: the groups :func:`alternatives` compares the winner with: the best plan of each must be known
EXPLAINED: tuple[Group, ...] = (
    lambda c: c.stages,
    lambda c: True if c.pure_data_parallel else None,
    lambda c: c.schedule,
    lambda c: c.recompute,
    lambda c: c.zero_stage,
    lambda c: c.expert_parallel,
    lambda c: c.context_parallel,
)
#: the groups the page draws a line point for (best plan per stages, per micro-batches, each schedule)
DRAWN: tuple[Group, ...] = (
    lambda c: (c.stages, c.schedule),
    lambda c: (c.microbatches, c.schedule),
)


@dataclass(frozen=True)
class Alternative:
    """The best plan of a group that differs from the winner in one way, or why the group has none."""

    what: str  #: e.g. "p=4", "pure data parallel", "recompute=none"
    best: Evaluation | None
    least_memory: Evaluation | None  #: when nothing in the group fits: the plan closest to fitting


def _group(evals: list[Evaluation], what: str, keep: Callable[[Evaluation], bool]) -> Alternative | None:
    members = [e for e in evals if keep(e) and e.error is None]
    if not members:
        return None
    ranked = ranking(members)
    closest = min(members, key=lambda e: e.peak_memory_bytes or float("inf"))
    return Alternative(what, ranked[0] if ranked else None, closest)


def alternatives(evals: list[Evaluation], best: Evaluation) -> list[Alternative]:
    """The winner against: the nearest fewer and more stages, pure data parallel, each other
    schedule, each other recompute mode, ZeRO-1 on / off, each other expert and context parallelism."""
    b = best.candidate
    out: list[Alternative | None] = []
    stage_counts = sorted({e.candidate.stages for e in evals})
    fewer = [p for p in stage_counts if p < b.stages]
    more = [p for p in stage_counts if p > b.stages]
    for p in ([fewer[-1]] if fewer else []) + ([more[0]] if more else []):
        out.append(_group(evals, f"p={p}",
                          lambda e, p=p: e.candidate.stages == p))  # type: ignore[misc]  # mypy#15459: a lambda with a default
    if not b.pure_data_parallel:
        out.append(_group(evals, "pure data parallel", lambda e: e.candidate.pure_data_parallel)
                   or Alternative("pure data parallel", None, None))
    for sched in sorted({e.candidate.schedule for e in evals} - {b.schedule}):
        out.append(_group(evals, f"schedule {sched}",
                          lambda e, s=sched: e.candidate.schedule == s))  # type: ignore[misc]  # mypy#15459: a lambda with a default
    for rc in sorted({e.candidate.recompute for e in evals} - {b.recompute}):
        out.append(_group(evals, f"recompute={rc}",
                          lambda e, rc=rc: e.candidate.recompute == rc))  # type: ignore[misc]  # mypy#15459: a lambda with a default
    for z in sorted({e.candidate.zero_stage for e in evals} - {b.zero_stage}):
        out.append(_group(evals, f"zero={z}",
                          lambda e, z=z: e.candidate.zero_stage == z))  # type: ignore[misc]  # mypy#15459: a lambda with a default
    for ep in sorted({e.candidate.expert_parallel for e in evals} - {b.expert_parallel}):
        out.append(_group(evals, f"ep={ep}",
                          lambda e, ep=ep: e.candidate.expert_parallel == ep))  # type: ignore[misc]  # mypy#15459
    for cp in sorted({e.candidate.context_parallel for e in evals} - {b.context_parallel}):
        out.append(_group(evals, f"cp={cp}",
                          lambda e, cp=cp: e.candidate.context_parallel == cp))  # type: ignore[misc]  # mypy#15459
    return [a for a in out if a is not None]


def _gib(x: float | None) -> str:
    return f"{(x or 0) / GIB:,.1f} GiB"


def explain(evals: list[Evaluation], best: Evaluation) -> list[str]:
    """One line per alternative: how far its best plan is behind, and the figure that explains it."""
    lines = []
    for alt in alternatives(evals, best):
        closest = alt.least_memory
        if alt.best is not None:
            lines.append(f"{alt.what}: {_reason(alt.best, best)}")
        elif closest is not None:
            lines.append(f"{alt.what}: nothing fits; the least memory it needs is {_gib(closest.peak_memory_bytes)} "
                         f"of {_gib(closest.memory_capacity_bytes)} ({closest.candidate.label()})")
        else:
            k = best.candidate
            batch = k.micro_batch * k.microbatches * k.data_parallel
            lines.append(f"{alt.what}: no such plan splits the batch of {batch} sequences over {k.devices} "
                         "replicas with the micro-batch sizes searched")
    return lines


def _reason(alt: Evaluation, best: Evaluation) -> str:
    ratio = (alt.throughput_samples_per_s or 0) / (best.throughput_samples_per_s or 1)
    parts = [f"best {alt.throughput_samples_per_s:,.2f} samples/s = {ratio:.2f}x ({alt.candidate.label()})"]
    if step_factors(alt, best) is not None:  # without the figures, no claim either way
        parts += step_causes(alt, best, "vs") or ["the same compute and bubble within 1 %"]
    parts.append(f"peak {_gib(alt.peak_memory_bytes)}")
    return "; ".join(parts)


def step_factors(a: Evaluation, b: Evaluation) -> tuple[float, float] | None:
    """``a``'s step over ``b``'s on the same devices as (compute, bubble): the devices' compute time
    over ``b``'s, and the busy share of ``b``'s step over ``a``'s; their product is the step ratio
    (step = compute / (devices x (1 - bubble))). None without the figures."""
    if not (a.device_compute_ms and b.device_compute_ms) or a.bubble_fraction is None or b.bubble_fraction is None \
            or a.bubble_fraction >= 1:
        return None
    return a.device_compute_ms / b.device_compute_ms, (1 - b.bubble_fraction) / (1 - a.bubble_fraction)


def step_causes(a: Evaluation, b: Evaluation, versus: str) -> list[str]:
    """Why ``a``'s step differs from ``b``'s, in the two factors of :func:`step_factors` that move it
    by 1 % or more: the compute with what makes it differ, the bubble (``versus``: "vs" or "->",
    how the two bubbles are joined)."""
    factors = step_factors(a, b)
    if factors is None:
        return []
    compute, bubble = factors
    out = []
    if abs(compute - 1) >= 0.01:
        causes = compute_causes(a, b)
        out.append(f"{compute - 1:+.0%} compute" + (f" ({'; '.join(causes)})" if causes else ""))
    if abs(bubble - 1) >= 0.01:
        pair = (a, b) if versus == "vs" else (b, a)
        out.append(f"bubble {pair[0].bubble_fraction:.1%} {versus} {pair[1].bubble_fraction:.1%}")
    return out


def compute_causes(a: Evaluation, b: Evaluation) -> list[str]:
    """What makes ``a``'s devices compute for longer (or shorter) than ``b``'s in a step: the knobs
    that change the work, and the optimizer step when it holds most of the difference."""
    ka, kb = a.candidate, b.candidate
    out = []
    if ka.recompute != kb.recompute:
        more = ka.recompute in RECOMPUTE and kb.recompute in RECOMPUTE \
            and RECOMPUTE.index(ka.recompute) > RECOMPUTE.index(kb.recompute)  # listed from the least work
        out.append(f"recompute {ka.recompute} against {kb.recompute}" + (": more forwards run again" if more else ""))
    if ka.tensor_parallel != kb.tensor_parallel:
        out.append(f"tensor parallel {ka.tensor_parallel} against {kb.tensor_parallel}"
                   + (": more all-reduces, smaller matmuls" if ka.tensor_parallel > kb.tensor_parallel else ""))
    if ka.expert_parallel != kb.expert_parallel:
        out.append(f"expert parallel {ka.expert_parallel} against {kb.expert_parallel}")
    if ka.context_parallel != kb.context_parallel:
        out.append(f"context parallel {ka.context_parallel} against {kb.context_parallel}"
                   + (": keys and values passed round, shorter sequences a device"
                      if ka.context_parallel > kb.context_parallel else ""))
    if ka.micro_batch != kb.micro_batch:
        out.append(f"micro-batches of {ka.micro_batch} against {kb.micro_batch}")
    opt_a, opt_b = a.device_optimizer_ms or 0.0, b.device_optimizer_ms or 0.0
    total = (a.device_compute_ms or 0.0) - (b.device_compute_ms or 0.0)
    if opt_b > 0 and total and (opt_a - opt_b) / total >= 0.5:  # the optimizer step holds most of it
        why = ""
        if (ka.schedule == "dualpipe") != (kb.schedule == "dualpipe"):
            why = ": DualPipe sums the two copies' gradients" if ka.schedule == "dualpipe" else ": one copy of the model"
        elif ka.zero_stage != kb.zero_stage:
            why = f": ZeRO-{ka.zero_stage}"
        out.append(f"optimizer steps {opt_a / opt_b - 1:+.0%}{why}")
    if not out and ka.stages != kb.stages:
        out.append(f"{ka.stages} stages: each stage's share of the embedding and the head")
    return out


#: the knobs a plan is told apart by, as the table names them
_KNOBS = (("p", "stages"), ("d", "data_parallel"), ("t", "tensor_parallel"), ("cp", "context_parallel"),
          ("ep", "expert_parallel"),
          ("etp", "expert_tensor"), ("b", "micro_batch"), ("m", "microbatches"), ("schedule", "schedule"),
          ("v", "chunks"), ("recompute", "recompute"), ("zero", "zero_stage"))


def versus_own(own: Evaluation, best: Evaluation) -> str:
    """The scenario's own plan against the search's best: how much faster the best is, and what
    differs (the knobs, compute, bubble, memory)."""
    label = own.candidate.label()
    if own.error is not None:
        return f"yours ({label}) cannot run: {own.error}"
    if not own.fits:
        return (f"yours ({label}) does not fit: it needs {_gib(own.peak_memory_bytes)} of "
                f"{_gib(own.memory_capacity_bytes)}; the best fits in {_gib(best.peak_memory_bytes)}")
    ratio = (best.throughput_samples_per_s or 0) / (own.throughput_samples_per_s or 1)
    a, b = own.candidate, best.candidate
    parts = [f"{name} {getattr(a, key)} -> {getattr(b, key)}" for name, key in _KNOBS if getattr(a, key) != getattr(b, key)]
    parts += step_causes(best, own, "->")
    parts.append(f"peak {_gib(own.peak_memory_bytes)} -> {_gib(best.peak_memory_bytes)}")
    return (f"yours ({label}): {own.throughput_samples_per_s:,.2f} samples/s; the best is {ratio:.2f}x"
            + (": " + "; ".join(parts) if parts else ""))
