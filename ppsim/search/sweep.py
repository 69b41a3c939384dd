"""Predict several variants of one scenario: each of a list of schedules, or a grid of stages x micro-batches.

A variant that cannot be built (a schedule that does not take the scenario's chunks, more stages than
layers, ...) is kept with its error instead of stopping the others, so the caller can name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario
from ppsim.trace import Trace
from ppsim.trace.metrics import Summary, summarize

if TYPE_CHECKING:  # pragma: no cover - a profile's reader is imported where a profile is read
    from ppsim.inputs.profile import Profile


@dataclass(frozen=True)
class Variant:
    """One prediction of a sweep: its label, the pipeline keys changed, and its trace or its error."""

    label: str
    overrides: dict[str, Any]
    trace: Trace | None = None
    summary: Summary | None = None
    error: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.summary is not None

    def peak_memory_bytes(self) -> float | None:
        """The highest memory peak over the stages (None when memory is not modelled)."""
        if self.summary is None:
            return None
        peaks = [st.peak_memory_bytes for st in self.summary.per_rank if st.peak_memory_bytes is not None]
        return max(peaks) if peaks else None


def predict_variant(base: Scenario, label: str, overrides: dict[str, Any], profile: Profile | None = None,
                    notes: tuple[str, ...] = ()) -> Variant:
    """Predict ``base`` with ``overrides``; a PpsimError becomes the variant's error."""
    from ppsim.prediction import predict

    try:
        trace = predict(base.with_overrides(**overrides), profile).trace
    except PpsimError as exc:
        return Variant(label, overrides, error=str(exc), notes=notes)
    return Variant(label, overrides, trace, summarize(trace), notes=notes)


def schedule_variants(base: Scenario, names: list[str], profile: Profile | None = None) -> list[Variant]:
    """One variant per schedule, on the same model and batch. A schedule that cannot run the
    scenario's chunks gets its own (noted); a schedule that takes several gets its default when
    the scenario has 1 (where it can run them; noted), or it would only repeat 1F1B."""
    from ppsim.plan.schedules import SEARCHED, describe

    out = []
    for name in names:
        overrides: dict[str, Any] = {"schedule": name}
        notes: tuple[str, ...] = ()
        chunks, have = describe(name).chunks, base.pipeline.chunks
        if not chunks.allows(have):
            overrides["chunks"] = chunks.default
            if name != SEARCHED:  # auto's search picks its chunks, which its row shows
                notes = (f"{name} runs {chunks.words()} per rank: compared with chunks {chunks.default} "
                         f"(the scenario has {have})",)
        elif have == 1 and chunks.default > 1:
            own = predict_variant(base, name, {**overrides, "chunks": chunks.default}, profile,
                                  (f"{name} compared with chunks {chunks.default} (the scenario has 1, which is "
                                   "plain 1F1B)",))
            if own.error is None:
                out.append(own)
                continue
            notes = (f"{name} compared with chunks 1: chunks {chunks.default} cannot run here ({own.error})",)
        out.append(predict_variant(base, name, overrides, profile, notes))
    return out


#: what a sweep holds while stages and micro-batches change
FIXED = ("gpus", "replica")


def grid_variants(base: Scenario, stages: list[int] | None, microbatches: list[int] | None,
                  profile: Profile | None = None, fixed: str = "gpus", skews: list[float] | None = None
                  ) -> list[Variant]:
    """One variant per (stages, micro-batches, routing skew) point of the grid; a missing list keeps
    the scenario's value. ``fixed="gpus"``: the GPU count and the global batch hold
    (:func:`grid_point`); ``"replica"``: one replica's data parallelism and micro-batch size hold, so
    more stages use more GPUs and more micro-batches make a bigger global batch. A skew is the
    mixture of experts' ``model.moe.skew`` (its busiest expert rank's tokens over the mean)."""
    from ppsim.prediction import predict

    out = []
    for p in stages or (None,):
        for m in microbatches or (None,):
            for skew in skews or (None,):
                given = {k: v for k, v in (("stages", p), ("microbatches", m), ("skew", skew)) if v is not None}
                label = ", ".join(f"{k} {v:g}" for k, v in given.items())
                try:
                    s = with_skew(grid_point(base, p, m, fixed), skew)
                except PpsimError as exc:
                    out.append(Variant(label, given, error=str(exc)))
                    continue
                shape = {"stages": s.pipeline.stages, "microbatches": s.microbatches, "d": s.data_parallel,
                         "b": s.training.micro_batch, "GPUs": s.devices,
                         "global batch": s.global_batch} | ({"skew": skew} if skew is not None else {})
                try:
                    trace = predict(s, profile).trace
                except PpsimError as exc:
                    out.append(Variant(label, shape, error=str(exc)))
                    continue
                out.append(Variant(label, shape, trace, summarize(trace)))
    return out


def with_skew(s: Scenario, skew: float | None) -> Scenario:
    """``s`` with its experts' routing skew ``skew`` (None: as it is) in place of any routing draw."""
    if skew is None:
        return s
    if s.model is None or s.model.moe is None:
        raise PpsimError("--skew sets model.moe.skew, the routing of a mixture of experts, and the model has none: "
                         "add a model.moe section or drop --skew", field="--skew")
    moe = s.model.moe.model_copy(update={"skew": skew, "routing": None})
    return s.model_copy(update={"model": s.model.model_copy(update={"moe": moe})})


def grid_point(base: Scenario, stages: int | None, microbatches: int | None, fixed: str) -> Scenario:
    """``base`` with ``stages`` and ``microbatches`` (None: the scenario's). Holding the GPUs and the
    global batch, the data parallelism is GPUs / (t x stages) and a micro-batch count sets the
    micro-batch size to global batch / (count x d), else the count is global batch / (size x d)."""
    from ppsim.inputs.overrides import PlanOverrides, apply_overrides

    if fixed == "replica":
        return apply_overrides(base, PlanOverrides(stages=stages, microbatches=microbatches))[0]
    t, p = base.tensor_parallel, stages or base.pipeline.stages
    gpus, batch = base.pipeline.stages * base.data_parallel * t, base.global_batch
    if gpus % (t * p):
        raise PpsimError(f"{p} stages do not divide {gpus} GPUs (tensor parallel {t}): choose a divisor of "
                         f"{gpus // t}, or --fixed replica", field="--stages")
    d = gpus // (t * p)
    if microbatches is not None:
        if batch % (microbatches * d):
            raise PpsimError(f"{microbatches} micro-batches x {d} replicas do not divide the global batch {batch}: "
                             f"choose a divisor of {batch // d}, or --fixed replica", field="--microbatches")
        b, m = batch // (microbatches * d), microbatches
    else:
        b = base.training.micro_batch
        if batch % (b * d):
            raise PpsimError(f"micro-batches of {b} x {d} replicas do not divide the global batch {batch}: "
                             "choose other --stages, or --fixed replica", field="--stages")
        m = batch // (b * d)
    return apply_overrides(base, PlanOverrides(stages=p, data_parallel=d, micro_batch=b, microbatches=m))[0]


def variant_doc(v: Variant) -> dict[str, Any]:
    """One point of ``ppsim sweep --json``: its shape (stages, micro-batches, d, b, GPUs, global
    batch), its headline figures and whether it fits, or its error."""
    shape = {{"d": "data_parallel", "b": "micro_batch", "GPUs": "gpus", "global batch": "global_batch"}.get(k, k): x
             for k, x in v.overrides.items()}
    if v.summary is None:
        return {**shape, "error": v.error}
    s = v.summary
    return {**shape, "step_time_ms": s.step_time_ms, "bubble_fraction": s.bubble_fraction,
            "throughput_samples_per_s": s.throughput_samples_per_s, "tokens_per_s": s.tokens_per_s, "mfu": s.mfu,
            "peak_memory_bytes": v.peak_memory_bytes(), "memory_capacity_bytes": s.memory_capacity_bytes,
            "fits": s.fits, "error": None}
