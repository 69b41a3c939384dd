"""What a rank tells the launcher, as typed events written one JSON line each to
``RUN_DIR/ranks/rank-R.jsonl`` (flushed per line, so what was recorded survives a crash).

A rank writes ``Ready`` once it is set up, one ``Step`` per recorded step, ``Measure`` for what a
profiling rank measured, ``Failure`` if it fails, and ``Done`` at the end. The launcher, the
results and the profile read them back with :func:`decode`; nothing else parses the files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from ppexec.typecheck import misfits

Span = tuple[str, int, int]  #: (action text, start ns, end ns) on the rank's clock


@dataclass(frozen=True)
class Ready:
    """The rank is set up and at the barrier before the first step."""

    kind: ClassVar[str] = "ready"
    rank: int
    pipe_rank: int  #: its place in the pipeline: the rank of the Plan it runs
    replica: int  #: its data-parallel replica
    tp_rank: int  #: its rank in the tensor-parallel group (0 without one)
    host: str
    clock_ns: int  #: perf_counter_ns right after the barrier: aligns the clocks of several hosts
    pid: int
    backend: str
    runtime: str


@dataclass(frozen=True)
class Step:
    """One recorded training step: a span per plan action, the memory after each, the loss."""

    kind: ClassVar[str] = "step"
    step: int
    loss: float | None  #: the step's mean loss, on the rank that holds the last stage
    spans: list[Span]
    marks: list[tuple[str, int]] = field(default_factory=list)  #: named moments inside actions (ns)
    memory: list[tuple[int, int]] = field(default_factory=list)  #: (ns, bytes) at the end of every action
    memory_source: str | None = None  #: "rss" (a CPU process) or "allocator" (a GPU's bytes in use)
    forwards: dict[str, int] = field(default_factory=dict)  #: block and attention-core forwards run


@dataclass(frozen=True)
class Measure:
    """What a profiling rank measured (layer times, the link, collectives...)."""

    kind: ClassVar[str] = "measure"
    name: str
    data: Any


@dataclass(frozen=True)
class Failure:
    """The rank failed, in ``action`` if it was running one."""

    kind: ClassVar[str] = "error"
    rank: int
    action: str | None
    error: str
    traceback: str = ""


@dataclass(frozen=True)
class Done:
    """The rank recorded everything it was asked to."""

    kind: ClassVar[str] = "done"
    rank: int


Event = Ready | Step | Measure | Failure | Done
_KINDS: dict[str, type] = {cls.kind: cls for cls in (Ready, Step, Measure, Failure, Done)}


def encode(event: Event) -> str:
    return json.dumps({"type": event.kind, **asdict(event)})


def decode(line: bytes | str) -> Event:
    """One event from its JSON line; a line that is not JSON, of an unknown type, or with missing or
    mistyped fields is a ValueError."""
    data = json.loads(line)  # JSONDecodeError and UnicodeDecodeError are ValueErrors
    kind = data.pop("type", None) if isinstance(data, dict) else None
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"not a ppexec event: {line[:80]!r}")
    bad = misfits(cls, data)
    if bad:
        raise ValueError(f"a {kind!r} event whose fields are wrong: {', '.join(bad)}")
    known = {f.name for f in fields(cls)}
    event = cls(**{k: v for k, v in data.items() if k in known})
    if isinstance(event, Step):  # JSON lists back to the tuples they were (misfits checked their lengths)
        event = Step(event.step, event.loss, [(a, start, end) for a, start, end in event.spans],
                     [(name, t) for name, t in event.marks], [(t, size) for t, size in event.memory],
                     event.memory_source, dict(event.forwards))
    return event


class EventLog:
    """A rank's event file: append-only JSON lines, flushed per line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")

    def write(self, event: Event) -> None:
        self._fh.write(encode(event) + "\n")
        self._fh.flush()


def events_path(run_dir: Path, rank: int) -> Path:
    return run_dir / "ranks" / f"rank-{rank}.jsonl"
