"""One format for predicted and measured timelines: the Trace, its metrics, the comparison of two,
and its files (ppsim JSON, Chrome trace / Perfetto).

Imports plan (and errors, formats); metrics are functions of a Trace alone.
"""

from ppsim.trace.meta import MemorySource, SearchRecord, TraceMeta, plan_meta, read_meta
from ppsim.trace.trace import LANES, TRACE_VERSION, Counter, Span, Trace

__all__ = ["LANES", "TRACE_VERSION", "Counter", "MemorySource", "SearchRecord", "Span", "Trace", "TraceMeta", "plan_meta",
           "read_meta"]
