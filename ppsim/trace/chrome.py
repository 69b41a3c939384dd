"""Chrome trace / Perfetto JSON: export a Trace, check such a document, and read it back.

Layout: one process per rank (``pid = rank + 1``: Perfetto treats pid 0 as the kernel's idle task),
one thread per lane (compute, send, recv, collective; overlapping spans of a lane go to extra
threads ``send #2``, ... so that slices nest), spans as complete (``X``) events, matched sends and
receives as flow arrows, counters as ``C`` events.

Times are quantised to whole nanoseconds before they are written in microseconds, so spans that
touch still touch after Perfetto rounds ``ts`` and ``dur`` to nanoseconds separately. The exact
millisecond values ride in each slice's args and in ``otherData``, so :func:`from_chrome_trace`
gives the Trace back unchanged.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppsim.errors import PlanError, TraceError
from ppsim.formats import CHROME_FORMAT
from ppsim.plan import RECV_KINDS, SEND_KINDS, Action, matching
from ppsim.trace.meta import TraceMeta, read_meta
from ppsim.trace.trace import LANES, Counter, Span, Trace, lane_of

CHROME_VERSION = 1
FLOW_CAT = "p2p"
CRITICAL_CAT = "critical_path"  #: the flow arrows of the step's critical path, from rank to rank
ALLTOALL_CAT = "alltoall"  #: the slices of the experts' all-to-alls (meta["alltoall_spans"])
ALLTOALL_THREAD = "all-to-all"  #: their thread on each rank that has some
_THREADS_PER_PID = 1000  #: tid = pid * 1000 + position, position 1..999
_META_ARG = {  # metadata event name -> the arg it carries
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
}
_REQUIRED = {
    "X": ("name", "ts", "dur", "pid", "tid"),
    "M": ("name", "pid", "args"),
    "C": ("name", "ts", "pid", "args"),
    "s": ("id", "cat", "name", "ts", "pid", "tid"),
    "f": ("id", "cat", "name", "ts", "pid", "tid"),
}


def _ns(ms: float) -> int:
    return round(ms * 1e6)


def _us(ns: int) -> float:
    return ns / 1000


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _inside(start: int, end: int, at: int) -> int:
    """``at`` clamped 1 ns inside [start, end] (onto the slice itself when it is shorter than 2 ns)."""
    margin = 1 if end - start >= 2 else 0
    return min(max(at, start + margin), end - margin)


def _thread_copies(spans: list[Span], ns: list[tuple[int, int]]) -> tuple[list[int], dict[tuple[int, str], int]]:
    """Greedy interval colouring per (rank, lane): each span's copy index and the copies each lane needs."""
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        groups[(s.rank, s.lane)].append(i)
    copy_of = [0] * len(spans)
    copies: dict[tuple[int, str], int] = {}
    for key, idx in groups.items():
        ends: list[int] = []  # last end on each copy
        for i in sorted(idx, key=lambda i: (ns[i][0], ns[i][1], i)):
            start, end = ns[i]
            c = next((k for k, last in enumerate(ends) if last <= start), len(ends))
            if c == len(ends):
                ends.append(end)
            ends[c] = end
            copy_of[i] = c
        copies[key] = len(ends)
    return copy_of, copies


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """The Chrome trace (JSON object format) of ``trace``; deterministic for a given trace: a process
    per rank and a thread per lane (overlapping spans of one lane on extra threads), a slice per span,
    a flow arrow from each send to its receive, the critical path (marked slices, arrows between
    ranks), the counters, and ppsim's own copy of the meta."""
    spans = trace.spans
    ns = [(_ns(s.start), _ns(s.end)) for s in spans]
    copy_of, copies = _thread_copies(spans, ns)
    meta_events, tid_of = _process_and_thread_names(trace, copies)
    slices = _slices(spans, ns, [tid_of[(s.rank, s.lane, copy_of[i])] for i, s in enumerate(spans)])
    flows = _flows(spans, ns, slices)
    return {
        "traceEvents": meta_events + slices + flows + _critical_path(trace, ns, slices, first_id=len(flows) // 2 + 1)
        + _alltoall_slices(trace, tid_of) + _counter_events(trace),
        "displayTimeUnit": "ms",
        "otherData": _other_data(trace),
    }


def _process_and_thread_names(trace: Trace, copies: dict[tuple[int, str], int]
                              ) -> tuple[list[dict[str, Any]], dict[tuple[int, str, int], int]]:
    """The metadata events naming each rank's process (with its stages) and each lane's threads, and
    the thread id of every (rank, lane, copy)."""
    spans = trace.spans
    ranks = sorted(set(range(trace.num_ranks)) | {s.rank for s in spans} | {c.rank for c in trace.counters})
    stage_to_rank = trace.meta.get("stage_to_rank")
    events: list[dict[str, Any]] = []
    tid_of: dict[tuple[int, str, int], int] = {}
    for rank in ranks:
        pid = rank + 1
        if stage_to_rank is not None:
            stages = [s for s, r in enumerate(stage_to_rank) if r == rank]
        else:
            stages = sorted({s.action.stage for s in spans if s.rank == rank})
        name = f"rank {rank} · stage {','.join(map(str, stages))}" if stages else f"rank {rank}"
        main_tid = pid * _THREADS_PER_PID + 1
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": main_tid, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": main_tid, "args": {"sort_index": rank}},
        ]
        threads: list[tuple[str, int]] = [(lane, c) for lane in LANES for c in range(max(1, copies.get((rank, lane), 0)))]
        if _alltoalls(trace, rank):
            threads.append((ALLTOALL_THREAD, 0))
        if len(threads) >= _THREADS_PER_PID:
            raise TraceError(f"rank {rank} needs {len(threads)} timeline threads; at most {_THREADS_PER_PID - 1} fit")
        for pos, (lane, c) in enumerate(threads, start=1):
            tid = tid_of[(rank, lane, c)] = pid * _THREADS_PER_PID + pos
            tname = lane if c == 0 else f"{lane} #{c + 1}"
            events += [
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}},
                {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": pos}},
            ]
    return events, tid_of


def _alltoalls(trace: Trace, rank: int) -> list[list[float]]:
    """[start, end] ms of rank ``rank``'s expert-parallel all-to-alls (``meta["alltoall_spans"]``)."""
    per_rank = trace.meta.get("alltoall_spans") or []
    return per_rank[rank] if rank < len(per_rank) else []


def _alltoall_slices(trace: Trace, tid_of: dict[tuple[int, str, int], int]) -> list[dict[str, Any]]:
    """A slice per expert-parallel all-to-all, on its rank's own thread; read back from the meta,
    not as spans (they are not actions of the plan)."""
    out = []
    for rank in range(trace.num_ranks):
        for t0, t1 in _alltoalls(trace, rank):
            start, end = _ns(t0), _ns(t1)
            out.append(dict(ph="X", name="all-to-all", cat=ALLTOALL_CAT, pid=rank + 1,
                            tid=tid_of[(rank, ALLTOALL_THREAD, 0)], ts=_us(start), dur=_us(end - start),
                            args={"start_ms": t0, "end_ms": t1}))
    return out


def _slices(spans: list[Span], ns: list[tuple[int, int]], tids: list[int]) -> list[dict[str, Any]]:
    """A complete event per span, on its thread, with what it did in its args."""
    slices: list[dict[str, Any]] = []
    for i, s in enumerate(spans):
        a = s.action
        args: dict[str, Any] = {"stage": a.stage}
        if a.microbatch is not None:
            args["microbatch"] = a.microbatch
        if len(a.parts) > 1:  # an overlapped forward and backward: what each part is
            args["forward"], args["backward"] = (str(x) for x in a.parts)
        args["start_ms"] = s.start
        args["end_ms"] = s.end
        if s.bytes is not None:
            args["bytes"] = s.bytes
        if s.peer is not None:
            args["peer"] = s.peer
        start, end = ns[i]
        ts, dur = _us(start), _us(end - start)
        slices.append(dict(ph="X", name=str(a), cat=a.kind.value, pid=s.rank + 1, tid=tids[i], ts=ts, dur=dur, args=args))
    return slices


def _flows(spans: list[Span], ns: list[tuple[int, int]], slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A flow arrow from each send to its receive (in order, when a message is sent more than once)."""
    recvs: dict[Action, list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        if s.action.kind in RECV_KINDS:
            recvs[s.action].append(i)
    used: dict[Action, int] = defaultdict(int)
    flows: list[dict[str, Any]] = []
    for i, s in enumerate(spans):
        if s.action.kind not in SEND_KINDS:
            continue
        target = matching(s.action)
        k = used[target]
        if k >= len(recvs.get(target, ())):
            continue
        used[target] += 1
        j = recvs[target][k]
        fid = len(flows) // 2 + 1
        name = f"{s.action} -> {target}"
        for ph, e, at in (("s", i, ns[i][0]), ("f", j, ns[j][1])):
            pid, tid = slices[e]["pid"], slices[e]["tid"]
            ev = dict(ph=ph, id=fid, cat=FLOW_CAT, name=name, pid=pid, tid=tid, ts=_us(_inside(*ns[e], at)))
            if ph == "f":
                ev["bp"] = "e"
            flows.append(ev)
    return flows


def _critical_path(trace: Trace, ns: list[tuple[int, int]], slices: list[dict[str, Any]], first_id: int
                   ) -> list[dict[str, Any]]:
    """The step's critical path (:mod:`ppsim.trace.critical`): every slice's slack in its args
    (``slack_ms``), each slice on the path marked (``critical_path``: what it waited for), and a
    flow arrow where the path goes from one rank to another (a message waited for, the last rank
    into a collective), numbered from ``first_id``."""
    from ppsim.trace.critical import critical_path

    path = critical_path(trace)
    for i, span in enumerate(trace.spans):  # every slice: how much later it could end, the step the same
        slices[i]["args"]["slack_ms"] = round(path.slack(span), 6)
    index = {id(s): i for i, s in enumerate(trace.spans)}
    on_path = [index[id(s)] for s in path.spans if id(s) in index]
    for i in on_path:
        binding = path.binding(trace.spans[i])
        slices[i]["args"]["critical_path"] = binding.cause + (
            f" {binding.waited_ms:.3f} ms" if binding.waited_ms > 0 else "")
    flows: list[dict[str, Any]] = []
    for a, b in zip(on_path, on_path[1:], strict=False):
        if trace.spans[a].rank == trace.spans[b].rank:
            continue
        fid = first_id + len(flows) // 2
        for ph, e, at in (("s", a, ns[a][1]), ("f", b, ns[b][0])):
            ev = dict(ph=ph, id=fid, cat=CRITICAL_CAT, name="critical path", pid=slices[e]["pid"],
                      tid=slices[e]["tid"], ts=_us(_inside(*ns[e], at)))
            if ph == "f":
                ev["bp"] = "e"
            flows.append(ev)
    return flows


def _counter_events(trace: Trace) -> list[dict[str, Any]]:
    """A counter event per point of every counter (memory per rank over time)."""
    return [dict(ph="C", name=c.name, pid=c.rank + 1, tid=(c.rank + 1) * _THREADS_PER_PID + 1, ts=_us(_ns(t)),
                 args={c.name: v})
            for c in trace.counters for t, v in c.points]


def _other_data(trace: Trace) -> dict[str, Any]:
    """The trace's scalar meta for viewers, and ppsim's own copy of all of it (read back by load)."""
    meta = json.loads(json.dumps(trace.meta))  # a detached, JSON-normalised copy
    other: dict[str, Any] = {k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool))}
    other["ppsim"] = {
        "format": CHROME_FORMAT,
        "version": CHROME_VERSION,
        "meta": meta,
        "counters": [
            {"rank": c.rank, "name": c.name, "unit": c.unit, "t_ms": [t for t, _ in c.points]} for c in trace.counters
        ],
    }
    return other


def write_chrome_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as a Chrome trace JSON file (open it in ui.perfetto.dev or chrome://tracing)."""
    Path(path).write_text(json.dumps(to_chrome_trace(trace), separators=(",", ":")))


def validate_chrome_trace(doc: Any) -> list[str]:
    """Problems that would make Perfetto / chrome://tracing misread ``doc``; empty when it is valid.

    Checks the fields of X, M, C, s and f events, non-negative durations, strict nesting of the
    slices on every (pid, tid) (at Perfetto's nanosecond resolution), process and thread names,
    and that every flow id has one start and one end, each inside a slice on its thread.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["the document must be an object with a 'traceEvents' list"]
    problems: list[str] = []
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit must be 'ms' or 'ns', not {doc['displayTimeUnit']!r}")
    seen = _Seen()
    for i, ev in enumerate(doc["traceEvents"]):
        problem = seen.take(i, ev)
        if problem:
            problems.append(problem)
    return problems + seen.naming_problems() + seen.nesting_problems() + seen.flow_problems()


@dataclass
class _Seen:
    """What a Chrome trace's events say, gathered event by event for the checks that span them."""

    pids: set[Any] = field(default_factory=set)
    named_pids: set[Any] = field(default_factory=set)
    named_threads: set[tuple[Any, Any]] = field(default_factory=set)
    #: per (pid, tid): (start ns, end ns, event index) of each slice
    slices: dict[tuple[Any, Any], list[tuple[int, int, int]]] = field(default_factory=lambda: defaultdict(list))
    #: per flow id: its start (s) and end (f) events with their indices
    flows: dict[Any, dict[str, list[tuple[int, dict[str, Any]]]]] = field(
        default_factory=lambda: defaultdict(lambda: {"s": [], "f": []}))

    def take(self, i: int, ev: Any) -> str | None:
        """Record event ``i``; the problem with its own fields, if any (then it is not recorded)."""
        if not isinstance(ev, dict):
            return f"event {i}: not an object"
        ph = ev.get("ph")
        if ph not in _REQUIRED:
            return f"event {i}: unsupported ph {ph!r} (expected one of {', '.join(_REQUIRED)})"
        missing = [k for k in _REQUIRED[ph] if k not in ev]
        if missing:
            return f"event {i} ({ph}): missing {', '.join(missing)}"
        bad = [k for k in ("ts", "dur") if k in ev and not _is_num(ev[k])]
        bad += [k for k in ("pid", "tid") if k in ev and (not isinstance(ev[k], int) or isinstance(ev[k], bool))]
        if bad:
            return f"event {i} ({ph}): {', '.join(bad)} must be finite numbers (pid, tid integers)"
        pid, tid = ev["pid"], ev.get("tid")
        self.pids.add(pid)
        if ph == "X":
            if ev["dur"] < 0:
                return f"event {i} (X {ev['name']!r}): negative dur {ev['dur']}"
            start = round(ev["ts"] * 1000)
            self.slices[(pid, tid)].append((start, start + round(ev["dur"] * 1000), i))
        elif ph == "M":
            key = _META_ARG.get(ev["name"])
            args = ev["args"]
            if key is None:
                return f"event {i} (M): unknown metadata name {ev['name']!r}"
            if not isinstance(args, dict) or not isinstance(args.get(key), str if key == "name" else int):
                return f"event {i} (M {ev['name']}): args.{key} is missing or of the wrong type"
            if ev["name"] == "process_name":
                self.named_pids.add(pid)
            elif ev["name"] == "thread_name":
                self.named_threads.add((pid, tid))
                if tid is None:
                    return f"event {i} (M thread_name): missing tid"
        elif ph == "C":
            args = ev["args"]
            if not isinstance(args, dict) or not args or not all(_is_num(v) for v in args.values()):
                return f"event {i} (C {ev['name']!r}): args must be a non-empty object of numbers"
        else:
            self.flows[ev["id"]][ph].append((i, ev))
            if ph == "f" and ev.get("bp") != "e":
                return f"event {i} (f): bp must be 'e' (bind to the enclosing slice)"
        return None

    def naming_problems(self) -> list[str]:
        """Processes without a name, and threads that hold slices without one."""
        return ([f"pid {pid} has no process_name" for pid in sorted(self.pids - self.named_pids, key=str)]
                + [f"pid {pid} tid {tid} has slices but no thread_name"
                   for pid, tid in sorted(set(self.slices) - self.named_threads, key=str)])

    def nesting_problems(self) -> list[str]:
        """Slices of one thread that overlap without one holding the other."""
        problems = []
        for (pid, tid), items in sorted(self.slices.items(), key=lambda kv: str(kv[0])):
            stack: list[tuple[int, int, int]] = []
            for start, end, i in sorted(items, key=lambda x: (x[0], -x[1], x[2])):
                while stack and stack[-1][1] <= start:
                    stack.pop()
                if stack and end > stack[-1][1]:
                    problems.append(f"pid {pid} tid {tid}: slices of events {stack[-1][2]} and {i} overlap partially")
                    continue
                stack.append((start, end, i))
        return problems

    def flow_problems(self) -> list[str]:
        """Flows without exactly one start and one end of the same name, or with an end in no slice."""
        problems = []
        for fid, ends in sorted(self.flows.items(), key=lambda kv: str(kv[0])):
            if len(ends["s"]) != 1 or len(ends["f"]) != 1:
                n_s, n_f = len(ends["s"]), len(ends["f"])
                problems.append(f"flow {fid!r}: {n_s} start (s) and {n_f} end (f) events; needs one of each")
                continue
            (_, s), (_, f) = ends["s"][0], ends["f"][0]
            if (s["cat"], s["name"]) != (f["cat"], f["name"]):
                problems.append(f"flow {fid!r}: start and end differ in cat or name")
            for i, ev in (ends["s"][0], ends["f"][0]):
                t = round(ev["ts"] * 1000)
                if not any(a <= t <= b for a, b, _ in self.slices.get((ev["pid"], ev["tid"]), ())):
                    where = f"pid {ev['pid']} tid {ev['tid']}"
                    problems.append(f"flow {fid!r}: its {ev['ph']} event {i} lies in no slice on {where}")
        return problems


def from_chrome_trace(doc: Any) -> Trace:
    """Read back a document written by :func:`to_chrome_trace` (spans, counters, meta; flows are derived)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError("not a Chrome trace: expected a JSON object with a 'traceEvents' list")
    other = doc.get("otherData")
    blob = other.get("ppsim") if isinstance(other, dict) else None
    if blob is not None:
        if not isinstance(blob, dict) or blob.get("format") != CHROME_FORMAT:
            raise TraceError(f"otherData.ppsim is not a {CHROME_FORMAT!r} block")
        if blob.get("version") != CHROME_VERSION:
            raise TraceError(
                f"Chrome trace version {blob.get('version')!r} is not supported (this ppsim reads {CHROME_VERSION})"
            )
    events = doc["traceEvents"]
    lanes: dict[tuple[Any, Any], str] = {}
    spans: list[Span] = []
    series: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for i, ev in enumerate(events):
        try:
            ph = ev.get("ph")
            if ph == "M" and ev.get("name") == "thread_name":
                lanes[(ev["pid"], ev["tid"])] = str(ev["args"]["name"]).split(" #")[0]
        except (AttributeError, KeyError, TypeError) as exc:
            raise TraceError(f"Chrome trace event {i}: malformed ({type(exc).__name__}: {exc})") from None
    for i, ev in enumerate(events):
        ph = ev.get("ph")
        try:
            if ph == "X" and ev.get("cat") == ALLTOALL_CAT:
                continue  # the all-to-alls come back with the meta
            if ph == "X":
                key = (ev["pid"], ev["tid"])
                if key not in lanes:
                    raise TraceError(f"Chrome trace event {i}: pid {key[0]} tid {key[1]} has no thread_name (the lane)")
                args = ev.get("args") or {}
                start = float(args["start_ms"]) if "start_ms" in args else ev["ts"] / 1000
                end = float(args["end_ms"]) if "end_ms" in args else (ev["ts"] + ev["dur"]) / 1000
                action = Action.parse(ev["name"])
                rank = int(ev["pid"]) - 1
                spans.append(Span(rank, lane_of(lanes[key]), action, start, end, args.get("bytes"), args.get("peer")))
            elif ph == "C":
                series[(int(ev["pid"]) - 1, ev["name"])].append((ev["ts"] / 1000, float(ev["args"][ev["name"]])))
        except (KeyError, TypeError, ValueError, PlanError) as exc:
            raise TraceError(f"Chrome trace event {i} ({ph}): malformed ({type(exc).__name__}: {exc})") from None

    counters: list[Counter] = []
    try:
        for d in blob.get("counters", []) if blob else []:
            key = (int(d["rank"]), str(d["name"]))
            times = [float(t) for t in d["t_ms"]]
            points, series[key] = series[key][: len(times)], series[key][len(times) :]
            if len(points) != len(times):
                raise TraceError(f"counter {key[1]!r} of rank {key[0]}: {len(times)} times but {len(points)} C events")
            values = tuple((t, v) for t, (_, v) in zip(times, points, strict=True))
            counters.append(Counter(key[0], key[1], str(d.get("unit", "")), values))
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"otherData.ppsim.counters is malformed ({type(exc).__name__}: {exc})") from None
    counters += [Counter(r, n, "", tuple(p)) for (r, n), p in series.items() if p]
    return Trace(spans=spans, meta=read_meta(blob.get("meta", {})) if blob else TraceMeta(), counters=counters)
