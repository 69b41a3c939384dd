"""What a rank tells the launcher, as typed events written one JSON line each to
``RUN_DIR/ranks/rank-R.jsonl`` (flushed per line, so what was recorded survives a crash).

A rank writes ``Ready`` once it is set up, one ``Step`` per recorded step, ``Measure`` for what a
profiling rank measured, ``Failure`` if it fails, and ``Done`` at the end. The launcher, the
results and the profile read them back with :func:`read_events` into a :class:`RankState` per rank
(:func:`decode` reads one line); nothing else parses the files.

Each event is a pydantic model whose ``type`` field tells them apart (a discriminated union, read
by one ``TypeAdapter``): a line of the wrong shape is refused naming its fields, and JSON's lists
come back as the tuples they were written from. Fields a reader does not know are skipped, so an
older ppexec reads a newer one's events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ppexec.runtimes import RuntimeName
from ppsim.api import MemorySource
from ppsim.errors import PpsimError

Span = tuple[str, int, int]  #: (action text, start ns, end ns) on the rank's clock


class _Event(BaseModel):
    # strict: JSON's types as written (an int is no str, a bool no int); unknown fields are skipped
    model_config = ConfigDict(frozen=True, strict=True)


class Ready(_Event):
    """The rank is set up and at the barrier before the first step."""

    type: Literal["ready"] = "ready"
    rank: int
    pipe_rank: int  #: its place in the pipeline: the rank of the Plan it runs
    replica: int  #: its data-parallel replica
    tp_rank: int  #: its rank in the tensor-parallel group (0 without one)
    host: str
    clock_ns: int  #: perf_counter_ns right after the barrier: aligns the clocks of several hosts
    pid: int
    backend: str
    runtime: RuntimeName


class Step(_Event):
    """One recorded training step: a span per plan action, the memory after each, the loss."""

    type: Literal["step"] = "step"
    step: int
    loss: float | None  #: the step's mean loss, on the rank that holds the last stage
    spans: list[Span]
    #: named moments inside actions (ns): ``clip``; ``alltoall`` and ``alltoall_end`` around each of
    #: the MoE layers' expert-parallel all-to-alls
    marks: list[tuple[str, int]] = Field(default_factory=list)
    memory: list[tuple[int, int]] = Field(default_factory=list)  #: (ns, bytes) at the end of every action
    memory_source: MemorySource | None = None  #: "rss" (a CPU process) or "allocator" (a GPU's bytes in use)
    forwards: dict[str, int] = Field(default_factory=dict)  #: block and attention-core forwards run
    #: the token copies this rank's experts received in each MoE layer forward (expert parallelism
    #: only; left out of the line otherwise)
    received: list[int] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: this rank's token copies per expert (all of the model's) in each of those forwards
    routed: list[list[int]] = Field(default_factory=list, exclude_if=lambda v: not v)


def exchanges(marks: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """(start, end) ns of each all-to-all: an ``alltoall`` mark and the ``alltoall_end`` after it."""
    starts = [t for name, t in marks if name == "alltoall"]
    ends = [t for name, t in marks if name == "alltoall_end"]
    return list(zip(starts, ends, strict=True))


def exchange_spans(ranks: list[list[tuple[int, int]]]) -> tuple[list[float], list[float]]:
    """(arrival gaps, times after the last arrival) in ms of the all-to-alls ``ranks`` ran, each
    rank's (start, end) ns in the order it ran them (a collective runs in the same order on every
    rank; the ranks share one host's clock). The gap is how long the first rank to arrive waited
    for the last; the time after the last arrival, to the last rank's return, is the exchange as a
    step pays it."""
    gaps, after = [], []
    for each in zip(*ranks, strict=True):
        starts, ends = [a for a, _ in each], [b for _, b in each]
        gaps.append((max(starts) - min(starts)) / 1e6)
        after.append((max(ends) - max(starts)) / 1e6)
    return gaps, after


class Measure(_Event):
    """What a profiling rank measured (layer times, the link, collectives...)."""

    type: Literal["measure"] = "measure"
    name: str
    data: Any


class Failure(_Event):
    """The rank failed, in ``action`` if it was running one."""

    type: Literal["error"] = "error"
    rank: int
    action: str | None
    error: str
    traceback: str = ""


class Done(_Event):
    """The rank recorded everything it was asked to."""

    type: Literal["done"] = "done"
    rank: int


Event = Ready | Step | Measure | Failure | Done
_EVENT: TypeAdapter[Event] = TypeAdapter(Annotated[Event, Field(discriminator="type")])
#: what pydantic says of a line that is no event at all (not JSON, not an object, no or an unknown type)
_NOT_AN_EVENT = {"json_type", "dict_type", "model_type", "model_attributes_type",
                 "union_tag_invalid", "union_tag_not_found"}


def fields_at_fault(error: ValidationError, skip: int = 0) -> str:
    """The fields a pydantic error names, each with what was found there: ``steps (str)``,
    ``world_size (missing)``, ``spans.0.1 (str)``, ``colour (unknown)``; ``skip`` leading parts
    of each location are left out (a discriminated union's tag)."""
    out: list[str] = []
    for e in error.errors():
        where = ".".join(str(part) for part in e["loc"][skip:]) or "the document"
        found = {"missing": "missing", "extra_forbidden": "unknown"}.get(e["type"], type(e.get("input")).__name__)
        text = f"{where} ({found})"
        if text not in out:
            out.append(text)
    return ", ".join(out)


def encode(event: Event) -> str:
    return json.dumps(event.model_dump())


def decode(line: bytes | str) -> Event:
    """One event from its JSON line; a line that is not JSON, of an unknown type, or with missing or
    mistyped fields is a ValueError naming them."""
    try:
        return _EVENT.validate_json(line)
    except ValidationError as exc:
        errors = exc.errors()
        if errors[0]["type"] == "json_invalid":
            raise ValueError(errors[0]["msg"]) from None  # "Invalid JSON: ... at line 1 column 1"
        if any(e["type"] in _NOT_AN_EVENT and len(e["loc"]) <= 1 for e in errors):
            raise ValueError(f"not a ppexec event: {line[:80]!r}") from None
        kind = errors[0]["loc"][0]
        raise ValueError(f"a {kind!r} event whose fields are wrong: {fields_at_fault(exc, skip=1)}") from None


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


@dataclass
class RankState:
    """What the events of one rank say so far (the launcher's, the results' and the profile's view of it)."""

    rank: int
    ready: Ready | None = None
    steps: list[Step] = field(default_factory=list)
    error: Failure | None = None
    done: bool = False
    teardown_code: int | None = None  #: a non-zero exit after "done": a crash in the teardown, the run complete
    teardown_error: Failure | None = None  #: an error reported after "done" (in the final barrier)
    measurements: dict[str, Any] = field(default_factory=dict)  #: a profiling rank's ``Measure`` events
    offset: int = 0  #: bytes of the event file already read
    lines: int = 0  #: lines of the event file already read


def read_events(run_dir: Path, states: list[RankState]) -> None:
    """Read the new lines of every rank's event file into ``states``."""
    for st in states:
        path = events_path(run_dir, st.rank)
        if not path.exists():
            continue
        with path.open("rb") as fh:
            fh.seek(st.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        first_line = 1 + st.lines
        st.offset += len(complete)
        st.lines += complete.count(b"\n")
        for n, line in enumerate(complete.splitlines(), start=first_line):
            try:
                event = decode(line)
            except ValueError as exc:
                raise PpsimError(f"{path}: line {n} is not a ppexec event ({exc}); the rank's events are "
                                 "damaged: run it again") from None
            if isinstance(event, Ready):
                st.ready = event
            elif isinstance(event, Step):
                st.steps.append(event)
            elif isinstance(event, Failure) and st.done:
                st.teardown_error = event  # a peer left the final barrier early: all was recorded
            elif isinstance(event, Failure):
                st.error = event
            elif isinstance(event, Done):
                st.done = True
            elif isinstance(event, Measure):
                st.measurements[event.name] = event.data
