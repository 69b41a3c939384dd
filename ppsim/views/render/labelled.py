"""What the side-by-side views draw: predictions with a label, or the reason one could not run.

``ppsim.search.sweep.Variant`` is one; the views declare only what they read, so they need not
import the search that makes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ppsim.trace import Trace
from ppsim.trace.metrics import Summary


class LabelledPrediction(Protocol):
    @property
    def label(self) -> str: ...

    @property
    def overrides(self) -> Mapping[str, Any]:
        """The plan keys this prediction changed (``schedule``, ``stages``, ``microbatches``...)."""

    @property
    def trace(self) -> Trace | None: ...

    @property
    def summary(self) -> Summary | None: ...

    @property
    def error(self) -> str | None: ...

    @property
    def ok(self) -> bool: ...

    def peak_memory_bytes(self) -> float | None: ...


def trace_of(v: LabelledPrediction) -> Trace:
    """The trace of a prediction that ran (``v.ok``)."""
    assert v.trace is not None, f"{v.label} ran but has no trace"
    return v.trace
