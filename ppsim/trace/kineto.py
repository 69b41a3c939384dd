"""Torch profiler traces of torch.distributed.pipelining runs (Kineto JSON, one file per rank)
read as one measured Trace, so a prediction can be checked against a run ppexec did not make.

torch.distributed.pipelining's schedule runtime runs every action inside
``record_function("PP:<action>")``: ``PP:0F3``, ``PP:2RECV_B1``, ``PP:0REDUCE_GRAD``, in ppsim's
own text form. Each rank's file gives its rank (``distributedInfo.rank``) and its clock
(``baseTimeNanoseconds`` + ``ts``: Unix-epoch time, one clock for the ranks of a host). The Trace
is the step whose step time is the median over the profiled steps, as ppexec chooses.

Steps are told apart in one of two ways:

- **ProfilerStep#N** events, which torch writes when the profiler has a ``schedule=`` and the loop
  calls ``prof.step()``: each spans one step (from one ``prof.step()`` to the next), and every
  event is the step of the window it lies in; step N is ``ProfilerStep#N``.
- **The repetition of the actions**, when there are none (a profiler with no ``schedule=`` writes
  no ProfilerStep events even if the loop calls ``prof.step()``): each rank runs its plan's same
  sequence of actions every step, so the k-th occurrence of an action's text (in time) belongs to
  step k (0, 1, ...). Every action of a rank must occur the same number of times, and step k's
  actions must all start before step k + 1's first one; else the file is refused in one line.
  Step k's window runs from its first action to the next step's first action (the last step's, to
  the end of the trace): the optimizer step and the allocations after ``pipe.step()`` returns
  belong to the step they follow, as in a ProfilerStep window; what comes before the first
  step's first action belongs to no step. The pipeline's ranks must split into as many steps, and
  files of the two kinds are not mixed.

- A rank's place in the pipeline comes from the stages its actions name (the rank holding stage
  0 is pipeline rank 0, ...): loop and V placements alike. With data parallelism several files
  hold the same stages; the one of the lowest global rank (replica 0) is read, as ppexec shows.
- FSDP's ``UNSHARD`` / ``RESHARD`` have no ppsim kind and are left out; each optimizer step
  (``Optimizer.step#...``) becomes the rank's ``OPT`` (one per stage when there is one per stage).
- Step-level kinds torch adds of its own (``REDUCE_GRAD`` scales gradients even without replicas)
  are kept; ``ppsim compare`` counts what one side lacks, it does not fail on it.

Files may be gzipped (``export_chrome_trace("rank0.json.gz")``).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from collections import Counter as Tally
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppsim.errors import PlanError, TraceError
from ppsim.plan import Action, Kind
from ppsim.trace.meta import TraceMeta
from ppsim.trace.trace import Counter, Span, Trace

PREFIX = "PP:"
SKIPPED = ("UNSHARD", "RESHARD")  #: torch kinds with no ppsim counterpart (FSDP's)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPTIMIZER = re.compile(r"^Optimizer\.step#")
_NO_LABELS = ("has no PP:<action> events: torch labels each action of its multi-stage schedule runtime "
              "(ScheduleInterleaved1F1B, ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, "
              "ScheduleDualPipeV, a schedule loaded from CSV); Schedule1F1B and ScheduleGPipe do not. Profile with "
              "record_function left on (the default) and export one file per rank")


def read_json(path: Path) -> Any:
    """A JSON document from ``path``, gunzipped if its name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return json.load(fh)
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def is_kineto(doc: Any) -> bool:
    """A torch profiler trace (not a Chrome trace ppsim wrote)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return False
    other = doc.get("otherData")
    if isinstance(other, dict) and "ppsim" in other:
        return False
    return "distributedInfo" in doc or "schemaVersion" in doc or "baseTimeNanoseconds" in doc


@dataclass
class _RankFile:
    path: Path
    rank: int
    spans: dict[int, list[tuple[Action, float, float]]]  #: profiled step -> (action, start ns, end ns)
    memory: dict[int, list[tuple[float, float]]]  #: profiled step -> (ns, bytes allocated)
    marked: bool = True  #: steps told apart by ProfilerStep#N events (else by the actions' repetition)

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(sorted({x.stage for spans in self.spans.values() for a, _, _ in spans for x in a.parts}))


def load_kineto(paths: list[Path]) -> Trace:
    """The measured Trace of the profiled step with the median step time, from every rank's file."""
    if not paths:
        raise TraceError("no Kineto files given")
    files = [_read_rank(p) for p in sorted(paths)]
    seen: dict[int, Path] = {}
    for f in files:
        if f.rank in seen:
            raise TraceError(f"{f.path} and {seen[f.rank]} are both rank {f.rank}: give each rank's file once")
        seen[f.rank] = f.path
    pipeline = _pipeline(files)
    _same_steps(pipeline)
    steps = sorted(set.intersection(*(set(f.spans) for f in pipeline)))
    if not steps:
        raise TraceError("the rank files share no profiled step (ProfilerStep#N): they come from different runs "
                         "or profiler schedules")
    times = {k: _step_ms(pipeline, k) for k in steps}
    chosen = next(k for k in steps if times[k] == statistics.median_low(list(times.values())))
    return _trace(pipeline, chosen, steps, times)


def _read_rank(path: Path) -> _RankFile:
    doc = read_json(path)
    if not is_kineto(doc):
        raise TraceError(f"{path} is not a torch profiler (Kineto) trace: it has no traceEvents and no distributedInfo")
    info = doc.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if not isinstance(rank, int):
        digits = re.findall(r"\d+", path.name)
        if not digits:
            raise TraceError(f"{path} names no rank: it has no distributedInfo.rank (torch writes it when the "
                             "process group is initialised before profiling) and its file name no number")
        rank = int(digits[-1])
    base = float(doc.get("baseTimeNanoseconds") or 0)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    windows = sorted((int(m.group(1)), _ns(e, base), _ns(e, base) + float(e.get("dur", 0)) * 1e3)
                     for e in events if (m := _STEP.match(str(e.get("name", "")))))
    labelled = [e for e in events if str(e.get("name", "")).startswith(PREFIX)]
    if not labelled:
        raise TraceError(f"{path} {_NO_LABELS}")
    actions: list[tuple[Action, float, float]] = []
    for e in labelled:
        text = str(e["name"])[len(PREFIX):]
        if text.endswith(SKIPPED):
            continue
        try:
            action = Action.parse(text)
        except PlanError as exc:
            raise TraceError(f"{path}: the label {e['name']!r} is not a pipeline action ({exc.message})") from None
        start = _ns(e, base)
        actions.append((action, start, start + float(e.get("dur", 0)) * 1e3))
    actions.sort(key=lambda x: x[1])
    marked = bool(windows)
    spans: dict[int, list[tuple[Action, float, float]]] = defaultdict(list)
    if marked:
        for a, t0, t1 in actions:
            spans[_step_of(t0, windows, path, PREFIX + str(a))].append((a, t0, t1))
    else:
        spans, windows = _split_by_repetition(actions, path)
    for e in events:
        if _OPTIMIZER.match(str(e.get("name", ""))):
            start = _ns(e, base)
            step = _step_of(start, windows, path, e["name"], outside_ok=True)
            if step is not None and step in spans:
                spans[step].append((Action(-1, Kind.OPT), start, start + float(e.get("dur", 0)) * 1e3))
    for items in spans.values():
        _assign_optimizer_steps(items)
        texts = [str(a) for a, _, _ in items]
        twice = next((t for t in texts if texts.count(t) > 1), None)
        if twice is not None:
            raise TraceError(f"{path}: {twice} appears twice in one step: call prof.step() once per training step "
                             "(the ProfilerStep#N events tell the steps apart)")
    return _RankFile(path, rank, dict(spans), _memory(doc, base, windows), marked)


def _split_by_repetition(actions: list[tuple[Action, float, float]], path: Path,
                         ) -> tuple[dict[int, list[tuple[Action, float, float]]], list[tuple[int, float, float]]]:
    """A rank's actions (in time order) without ProfilerStep events, split into steps by their repetition:
    the k-th occurrence of an action's text is step k's. With each step's window: from its first action
    to just before the next step's first one (the last step's, to the end of the trace)."""
    counts = Tally(str(a) for a, _, _ in actions)
    if not counts:
        return {}, []
    usual = Tally(counts.values()).most_common(1)[0][0]  #: the steps: how often most actions occur
    odd = next((t for t, c in counts.items() if c != usual), None)
    advice = ("profile whole training steps on every rank, or give profile() a schedule= so that prof.step() marks "
              "each step (ProfilerStep#N)")
    if odd is not None:
        same = next(t for t, c in counts.items() if c == usual)
        raise TraceError(f"{path} has no ProfilerStep#N events and its actions do not repeat evenly step after step "
                         f"({PREFIX}{odd} occurs {counts[odd]}x, {PREFIX}{same} {usual}x), so its steps cannot be "
                         f"told apart: {advice}")
    seen: Tally[str] = Tally()
    spans: dict[int, list[tuple[Action, float, float]]] = defaultdict(list)
    for a, t0, t1 in actions:
        spans[seen[str(a)]].append((a, t0, t1))
        seen[str(a)] += 1
    firsts = [min(t0 for _, t0, _ in spans[k]) for k in range(usual)]
    for k in range(1, usual):
        late = max(spans[k - 1], key=lambda x: x[1])
        if late[1] >= firsts[k]:
            raise TraceError(f"{path} has no ProfilerStep#N events and its actions do not repeat step after step "
                             f"(step {k - 1}'s {PREFIX}{late[0]} starts after step {k}'s first action), so its steps cannot "
                             f"be told apart: {advice}")
    windows = [(k, firsts[k], math.nextafter(firsts[k + 1], -math.inf) if k + 1 < usual else math.inf)
               for k in range(usual)]
    return dict(spans), windows


def _same_steps(pipeline: list[_RankFile]) -> None:
    """Ranks whose steps were told apart by their actions' repetition must agree with each other: as many
    steps on every rank, and no rank's steps told apart by ProfilerStep#N events instead."""
    unmarked = [f for f in pipeline if not f.marked]
    if not unmarked:
        return
    if len(unmarked) < len(pipeline):
        marked = next(f for f in pipeline if f.marked)
        raise TraceError(f"{marked.path} has ProfilerStep#N events and {unmarked[0].path} none: the files come from "
                         "different profiler setups; profile every rank alike")
    counts = {f.path.name: len(f.spans) for f in pipeline}
    if len(set(counts.values())) > 1:
        raise TraceError(f"the rank files have no ProfilerStep#N events and repeat their actions a different number of "
                         f"times ({counts}): profile the same training steps on every rank")


def _ns(event: dict[str, Any], base: float) -> float:
    return base + float(event.get("ts", 0)) * 1e3


def _step_of(ns: float, windows: list[tuple[int, float, float]], path: Path, name: str,
             outside_ok: bool = False) -> Any:
    """The profiled step whose window (a ProfilerStep#N event's, or one told by the actions' repetition)
    holds an event at ``ns``; 0 when there is no window (a rank with no action)."""
    if not windows:
        return 0
    for step, lo, hi in windows:
        if lo <= ns <= hi:
            return step
    if outside_ok:
        return None
    raise TraceError(f"{path}: {name} lies outside every ProfilerStep#N event")


def _assign_optimizer_steps(items: list[tuple[Action, float, float]]) -> None:
    """A rank's optimizer steps as its stages' OPT: one per stage in ppsim's order (the last stage
    first) when there are as many, else one OPT of the rank's last stage spanning them all."""
    stages = sorted({a.stage for a, _, _ in items if a.stage >= 0}, reverse=True)
    opts = sorted((x for x in items if x[0].stage < 0), key=lambda x: x[1])
    if not opts:
        return
    for x in opts:
        items.remove(x)
    if not stages:
        return
    if len(opts) == len(stages):
        items += [(Action(s, Kind.OPT), t0, t1) for s, (_, t0, t1) in zip(stages, opts)]
    else:
        items.append((Action(stages[0], Kind.OPT), opts[0][1], opts[-1][2]))


def _memory(doc: dict[str, Any], base: float, windows: list[tuple[int, float, float]]) -> dict[int, list[tuple[float, float]]]:
    """``[memory]`` events (``profile_memory=True``): the allocated bytes of the device that has most of them."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("name") == "[memory]"
              and isinstance(e.get("args"), dict) and "Total Allocated" in e["args"]]
    if not events:
        return {}
    devices: dict[Any, int] = defaultdict(int)
    for e in events:
        devices[e["args"].get("Device Type")] += 1
    device = max(devices, key=lambda k: devices[k])
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        if e["args"].get("Device Type") == device:
            ns = _ns(e, base)
            for step, lo, hi in windows or [(0, float("-inf"), float("inf"))]:
                if lo <= ns <= hi:
                    out[step].append((ns, float(e["args"]["Total Allocated"])))
    return dict(out)


def _pipeline(files: list[_RankFile]) -> list[_RankFile]:
    """One file per pipeline rank, in pipeline order: of the files holding the same stages (data
    parallel replicas) the lowest global rank."""
    by_stages: dict[tuple[int, ...], _RankFile] = {}
    for f in sorted(files, key=lambda f: f.rank):
        by_stages.setdefault(f.stages, f)
    pipeline = sorted(by_stages.values(), key=lambda f: f.stages[0] if f.stages else 0)
    held = [s for f in pipeline for s in f.stages]
    if sorted(held) != list(range(len(held))) or len(set(held)) != len(held):
        where = {f.path.name: list(f.stages) for f in pipeline}
        raise TraceError(f"the rank files do not hold every stage once ({where}): give the file of every rank of "
                         "the pipeline")
    return pipeline


def _step_ms(pipeline: list[_RankFile], step: int) -> float:
    spans = [x for f in pipeline for x in f.spans[step]]
    return (max(t1 for _, _, t1 in spans) - min(t0 for _, t0, _ in spans)) / 1e6


def _trace(pipeline: list[_RankFile], step: int, steps: list[int], times: dict[int, float]) -> Trace:
    origin = min(t0 for f in pipeline for _, t0, _ in f.spans[step])
    stage_to_rank = [0] * sum(len(f.stages) for f in pipeline)
    for r, f in enumerate(pipeline):
        for s in f.stages:
            stage_to_rank[s] = r
    spans = []
    for r, f in enumerate(pipeline):
        for a, t0, t1 in sorted(f.spans[step], key=lambda x: x[1]):
            peer = None
            if a.kind in (Kind.SEND_F, Kind.RECV_B):
                peer = stage_to_rank[a.stage + 1] if a.stage + 1 < len(stage_to_rank) else None
            elif a.kind in (Kind.SEND_B, Kind.RECV_F):
                peer = stage_to_rank[a.stage - 1] if a.stage > 0 else None
            spans.append(Span(r, a.lane, a, (t0 - origin) / 1e6, (t1 - origin) / 1e6, None, peer))
    counters = [Counter(r, "memory_bytes", "bytes", tuple(((t - origin) / 1e6, b) for t, b in f.memory[step]))
                for r, f in enumerate(pipeline) if f.memory.get(step)]
    microbatches = 1 + max((a.microbatch for f in pipeline for a, _, _ in f.spans[step] if a.microbatch is not None),
                           default=-1)
    meta: TraceMeta = {
        "source": "measured",
        "clock": "torch profiler (Unix-epoch ns: baseTimeNanoseconds + ts)",
        "time_unit": "ms",
        "trace_format": "kineto",
        "runtime": "torch",
        "files": [str(f.path) for f in pipeline],
        "num_ranks": len(pipeline),
        "num_microbatches": microbatches,
        "chunks": max(len(f.stages) for f in pipeline),
        "stage_to_rank": stage_to_rank,
        "comm": "async",
        "step": step,
        "profiled_steps": steps,
        "step_times_ms": [times[k] for k in steps],
        "memory_measured": "allocator" if counters else None,
    }
    return Trace(spans=spans, meta=meta, counters=counters)
