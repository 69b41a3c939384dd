"""Reading a timeline from disk as a Trace, whatever wrote it: a ppsim Trace JSON, a ppexec run
folder (its ``trace.json``), or a Chrome trace that ppsim or ppexec exported."""

from __future__ import annotations

import json
from pathlib import Path

from ppsim.errors import TraceError
from ppsim.trace.trace import Trace

_HEAD_BYTES = 4096  #: how much of a file tells its format


def load_trace(path: str | Path, side: str | None = None) -> Trace:
    """The Trace in ``path``; errors name ``side`` (e.g. "predicted") as the field at fault."""
    p = Path(path)
    try:
        return _load(p)
    except TraceError as exc:
        raise TraceError(exc.message, field=side or exc.field) from None


def _load(p: Path) -> Trace:
    if p.is_dir():
        if not (p / "trace.json").is_file():
            raise TraceError(f"{p} is a folder without trace.json; give a trace file or a ppexec run folder")
        p = p / "trace.json"
    if not p.is_file():
        raise TraceError(f"{p} does not exist; give a ppsim trace, a Chrome trace ppsim wrote or a ppexec run folder")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: cannot read it ({type(exc).__name__})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if '"traceEvents"' in text[:_HEAD_BYTES] or (isinstance(data, dict) and "traceEvents" in data):
        from ppsim.trace.chrome import from_chrome_trace

        try:
            return from_chrome_trace(data)
        except TraceError as exc:
            raise TraceError(f"{p}: not a Chrome trace ppsim can read ({exc.message})") from None
    try:
        return Trace.from_dict(data)
    except TraceError as exc:
        raise TraceError(f"{p}: {exc.message}") from None
