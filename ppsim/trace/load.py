"""Reading a timeline from disk as a Trace, whatever wrote it: a ppsim Trace JSON, a ppexec run
folder (its ``trace.json``), a Chrome trace that ppsim or ppexec exported, or the torch profiler
traces of a torch.distributed.pipelining run (a folder of one Kineto JSON per rank, or the files)."""

from __future__ import annotations

from pathlib import Path

from ppsim.errors import TraceError, file_error, shown_path
from ppsim.trace.trace import Trace

WHAT = "a ppsim trace, a Chrome trace ppsim wrote, a ppexec run folder, or torch profiler traces (a folder or files)"


def load_trace(path: str | Path | list[Path], side: str | None = None) -> Trace:
    """The Trace in ``path`` (or in the Kineto rank files ``path`` lists); errors name ``side``
    (e.g. "measured") as the field at fault."""
    first = path[0] if isinstance(path, list) and path else path
    more = f" (and {len(path) - 1} more files)" if isinstance(path, list) and len(path) > 1 else ""
    where = shown_path(first) + more
    if not isinstance(first, list) and Path(first).suffix in (".yaml", ".yml") and Path(first).is_file():
        raise TraceError(f"{where} is a scenario, not a trace: save its prediction with `ppsim run {where} "
                         "--save-trace predicted.json` and give that", field=side)
    try:
        try:
            trace = _load_files(path) if isinstance(path, list) else _load(Path(path))
        except (OSError, RuntimeError) as exc:  # RuntimeError: pathlib's symbolic link loop
            raise file_error(getattr(exc, "filename", None) or first, exc, writing=False, kind=TraceError) from None
        try:
            trace.check()
        except TraceError as exc:
            raise TraceError(f"{where}: {exc.message}; give a trace that ppsim, ppexec or torch's profiler wrote, "
                             "undamaged") from None
        return trace
    except TraceError as exc:
        raise TraceError(exc.message, field=side or exc.field) from None


def load_traces(paths: list[Path]) -> list[tuple[str, Trace]]:
    """(label, Trace) of each trace ``paths`` name, several torch profiler files in a row making one."""
    out: list[tuple[str, Trace]] = []
    group: list[Path] = []

    def flush() -> None:
        if group:
            out.append((group[0].parent.name or group[0].name, load_trace(list(group))))
            group.clear()

    for p in paths:
        if p.is_file() and _may_be_kineto(p) and _looks_like_kineto(p):
            group.append(p)
            continue
        flush()
        out.append((p.name, load_trace(p)))
    flush()
    return out


def _may_be_kineto(p: Path) -> bool:
    return p.name.endswith((".json", ".json.gz")) and not p.name.endswith(".trace.json")


def _head(p: Path) -> str:
    """The first 4 KiB of a (gzipped) text file, or "" when it cannot be read as one."""
    import gzip

    try:
        with (gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else p.open(encoding="utf-8")) as fh:
            return fh.read(4096)
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def _looks_like_kineto(p: Path) -> bool:
    """The head of a torch profiler file (it opens with its schema version; ppsim's files do not)."""
    head = _head(p)
    return '"schemaVersion"' in head or '"distributedInfo"' in head


def looks_like_a_saved_step(p: Path) -> bool:
    """Whether ``p`` is a step this module reads rather than a scenario (which may be JSON too): a
    run folder, or a JSON file whose head holds spans, trace events or a profiler's schema."""
    if p.is_dir():
        return (p / "trace.json").is_file()
    if not (p.is_file() and p.name.endswith((".json", ".json.gz"))):
        return False
    head = _head(p)
    return any(key in head for key in ('"spans"', '"traceEvents"', '"schemaVersion"'))


def _load_files(paths: list[Path]) -> Trace:
    from ppsim.trace.kineto import load_kineto

    if len(paths) == 1:
        return _load(paths[0])
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise TraceError(f"{missing[0]} does not exist; several files are the torch profiler traces of one run's ranks")
    return load_kineto(paths)


def _load(p: Path) -> Trace:
    from ppsim.trace.kineto import is_kineto, load_kineto, read_json

    if p.is_dir():
        if (p / "trace.json").is_file():
            p = p / "trace.json"
        else:
            ranks = sorted(f for f in p.iterdir() if f.is_file() and _may_be_kineto(f))
            if not ranks:
                raise TraceError(f"{p} is a folder without trace.json or torch profiler traces; give {WHAT}")
            return load_kineto(ranks)
    if not p.is_file():
        raise TraceError(f"{p} does not exist; give {WHAT}")
    data = read_json(p)
    if is_kineto(data):
        return load_kineto([p])
    if isinstance(data, dict) and "traceEvents" in data:
        from ppsim.trace.chrome import from_chrome_trace

        try:
            return from_chrome_trace(data)
        except TraceError as exc:
            raise TraceError(f"{p}: not a Chrome trace ppsim can read ({exc.message})") from None
    try:
        return Trace.from_dict(data)
    except TraceError as exc:
        raise TraceError(f"{p}: {exc.message}") from None
