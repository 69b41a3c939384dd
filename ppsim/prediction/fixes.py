"""What makes a plan that does not fit fit: the scenario with one of its plan's knobs turned, on
the same devices and the same global batch, predicted, the fastest that fit first.

The knobs are those ``ppsim tune`` searches, one at a time from the user's plan: less recomputed
memory (selective, then full recomputation), the optimizer states sharded (ZeRO-1), twice the
stages or twice the tensor parallelism (half the replicas: the same devices, each rank holding half
as much of the model), half the micro-batch size (twice the micro-batches). Each is the command
line option that makes it, so the user can run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppsim.errors import PpsimError
from ppsim.inputs.scenario import Scenario


@dataclass(frozen=True)
class Fix:
    """A change of the plan that fits: the options that make it, and what it then predicts."""

    options: str  #: ``--recompute selective``, ``--stages 8 --data-parallel 4 --microbatches 64``
    step_ms: float
    peak_bytes: float
    capacity_bytes: float

    def words(self, step_ms: float) -> str:
        """``--recompute selective: 20,104.2 ms (+5 %), peak 61.3 of 80 GiB`` against a step of ``step_ms``."""
        pct = round(100 * (self.step_ms / step_ms - 1)) if step_ms > 0 else 0
        change = "the same step" if pct == 0 else f"{pct:+d} %"
        return (f"{self.options}: {self.step_ms:,.1f} ms ({change}), peak {self.peak_bytes / 2**30:,.1f} of "
                f"{self.capacity_bytes / 2**30:,.0f} GiB")


def _variants(s: Scenario) -> list[dict[str, Any]]:
    """One knob at a time, on the same devices and global batch."""
    t, p, d, m = s.training, s.pipeline.stages, s.data_parallel, s.microbatches
    out: list[dict[str, Any]] = []
    if t.recompute == "none":
        out.append({"recompute": "selective"})
    if t.recompute != "full":
        out.append({"recompute": "full"})
    if t.zero_stage == 0 and s.weight_replicas > 1:
        out.append({"zero_stage": 1})
    if d % 2 == 0:  # half the replicas, each with twice the micro-batches: the same global batch
        out.append({"stages": 2 * p, "data_parallel": d // 2, "microbatches": 2 * m})
        out.append({"tensor_parallel": 2 * s.tensor_parallel, "data_parallel": d // 2, "microbatches": 2 * m})
    if t.micro_batch % 2 == 0:
        out.append({"micro_batch": t.micro_batch // 2, "microbatches": 2 * m})
    return out


#: the command line's name of each knob (``ppsim run``'s plan options)
_OPTION = {"micro_batch": "--micro-batch-size"}


def _options(change: dict[str, Any]) -> str:
    return " ".join(f"{_OPTION.get(k, '--' + k.replace('_', '-'))} {v}" for k, v in change.items())


def fixes(s: Scenario, *, top: int = 3) -> list[Fix]:
    """The ``top`` fastest one-knob changes of ``s`` that fit its devices' memory (none when none
    does); a change the scenario cannot take (too few layers for the stages, heads that do not
    split) is left out."""
    from ppsim.prediction.path import predict
    from ppsim.trace.metrics import summarize

    found = []
    for change in _variants(s):
        try:
            summary = summarize(predict(s.with_overrides(**change), placements=False).trace, waits=False)
        except PpsimError:
            continue
        peaks = [r.peak_memory_bytes for r in summary.per_rank if r.peak_memory_bytes is not None]
        if summary.fits and peaks and summary.memory_capacity_bytes:
            found.append(Fix(_options(change), summary.step_time_ms, max(peaks), summary.memory_capacity_bytes))
    return sorted(found, key=lambda f: (f.step_ms, f.peak_bytes))[:top]


def fixes_line(found: list[Fix], step_ms: float) -> str:
    """The changes that make a plan fit, fastest first, against its step of ``step_ms`` (or that
    no change of one knob does)."""
    if not found:
        return ("no single change of recomputation, ZeRO, stages, tensor parallelism or micro-batch size fits: "
                "ppsim tune searches them together")
    return "; ".join(f.words(step_ms) for f in found)
