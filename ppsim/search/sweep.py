"""Predict several variants of one scenario: each of a list of schedules, or a grid of stages x micro-batches.

A variant that cannot be built (a schedule that does not take the scenario's chunks, more stages than
layers, ...) is kept with its error instead of stopping the others, so the caller can name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ppsim.errors import PpsimError
from ppsim.inputs.profile import Profile
from ppsim.inputs.scenario import Scenario
from ppsim.trace import Trace
from ppsim.trace.metrics import Summary, summarize


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
    from ppsim.plan.schedules import get

    out = []
    for name in names:
        overrides: dict[str, Any] = {"schedule": name}
        notes: tuple[str, ...] = ()
        chunks, have = get(name).chunks, base.pipeline.chunks
        if not chunks.allows(have):
            overrides["chunks"] = chunks.default
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


def grid_variants(base: Scenario, stages: list[int] | None, microbatches: list[int] | None,
                  profile: Profile | None = None) -> list[Variant]:
    """One variant per (stages, micro-batches) pair of the grid; a missing list keeps the scenario's value."""
    out = []
    for p in stages or [None]:
        for m in microbatches or [None]:
            overrides = {k: v for k, v in (("stages", p), ("microbatches", m)) if v is not None}
            label = ", ".join(f"{k} {v}" for k, v in overrides.items())
            out.append(predict_variant(base, label, overrides, profile))
    return out
