"""Chrome trace / Perfetto export: structure, overlap splitting, flows, the validator, the round trip."""

from __future__ import annotations

import copy
import json
from collections import Counter as Tally
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA, GPT_YAML
from ppsim.errors import TraceError
from ppsim.inputs.scenario import load
from ppsim.plan import RECV_KINDS, SEND_KINDS, Action, Kind, matching
from ppsim.prediction import predict
from ppsim.trace import LANES, Counter, Span, Trace
from ppsim.trace.chrome import from_chrome_trace, to_chrome_trace, validate_chrome_trace, write_chrome_trace

SCENARIO = GPT_YAML
INTERLEAVED = {"schedule": "interleaved-1f1b", "chunks": 2, "microbatches": 16, "stages": 4}
VARIANTS: dict[str, dict[str, Any]] = {
    "gpt": {},
    "async": {"comm": "async"},
    "gpipe": {"schedule": "gpipe", "microbatches": 8, "stages": 4},
    "zb-h1": {"schedule": "zb-h1", "microbatches": 16, "stages": 4},
    "interleaved": INTERLEAVED,
    "interleaved-async": {**INTERLEAVED, "comm": "async"},
}
_cache: dict[str, Trace] = {}


def variant(name: str) -> Trace:
    if name not in _cache:
        _cache[name] = predict(load(SCENARIO).with_overrides(**VARIANTS[name])).trace
    return _cache[name]


def events(doc: dict[str, Any], ph: str, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (name is None or e["name"] == name)]


def p2p(doc: dict[str, Any], ph: str) -> list[dict[str, Any]]:
    """The flow events of the messages (not those of the critical path)."""
    return [e for e in events(doc, ph) if e["cat"] == "p2p"]


def thread_names(doc: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events(doc, "M", "thread_name")}


def sp(rank: int, text: str, start: float, end: float, **kw: Any) -> Span:
    a = Action.parse(text)
    return Span(rank, a.lane, a, start, end, **kw)


def small_trace() -> Trace:
    """Two ranks, one message each way, overlapping sends on rank 0, a counter."""
    spans = [
        sp(0, "0F0", 0.0, 1.0),
        sp(0, "0SEND_F0", 1.0, 3.0, bytes=8, peer=1),
        sp(0, "0F1", 1.0, 2.0),
        sp(0, "0SEND_F1", 2.0, 4.0, bytes=8, peer=1),  # overlaps 0SEND_F0 partially
        sp(1, "1RECV_F0", 0.0, 3.5, bytes=8, peer=0),
        sp(1, "1F0", 3.5, 4.5),
        sp(1, "1B0", 4.5, 6.5),
        sp(1, "1SEND_B0", 6.5, 7.0, bytes=8, peer=0),
        sp(0, "0RECV_B0", 4.0, 7.25, bytes=8, peer=1),
        sp(0, "0B0", 7.25, 9.25),
        sp(0, "0OPT", 9.25, 9.25),  # zero duration
    ]
    counters = [Counter(0, "activation_bytes", "bytes", ((0.0, 0.0), (1.0, 5.0), (7.25, 0.0)))]
    return Trace(spans=spans, meta={"source": "simulated", "num_ranks": 2, "stage_to_rank": [0, 1]}, counters=counters)


# ----- structure --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(VARIANTS))
def test_structure_is_valid(name: str) -> None:
    trace = variant(name)
    doc = to_chrome_trace(trace)
    assert validate_chrome_trace(doc) == []
    assert validate_chrome_trace(json.loads(json.dumps(doc))) == []
    assert doc["displayTimeUnit"] == "ms"
    assert len(events(doc, "X")) == len(trace.spans)
    assert len(events(doc, "C")) == sum(len(c.points) for c in trace.counters)
    assert doc["otherData"]["schedule"] == trace.meta["schedule"]


@pytest.mark.parametrize("name", ["gpt", "interleaved"])
def test_process_and_thread_names(name: str) -> None:
    trace = variant(name)
    doc = to_chrome_trace(trace)
    procs = {e["pid"]: e["args"]["name"] for e in events(doc, "M", "process_name")}
    order = {e["pid"]: e["args"]["sort_index"] for e in events(doc, "M", "process_sort_index")}
    stage_to_rank = trace.meta["stage_to_rank"]
    assert len(procs) == len(order) == trace.num_ranks
    for rank in range(trace.num_ranks):
        stages = ",".join(str(s) for s, r in enumerate(stage_to_rank) if r == rank)
        assert procs[rank + 1] == f"rank {rank} · stage {stages}"
        assert order[rank + 1] == rank
        lanes = [n for (pid, _), n in sorted(thread_names(doc).items()) if pid == rank + 1]
        assert lanes[: len(LANES)] == list(LANES)
    sort_keys = {(e["pid"], e["tid"]) for e in events(doc, "M", "thread_sort_index")}
    assert sort_keys == set(thread_names(doc))
    if name == "interleaved":
        assert procs[1] == "rank 0 · stage 0,4"


def test_slices_carry_times_in_microseconds_and_args() -> None:
    doc = to_chrome_trace(small_trace())
    x = {e["name"]: e for e in events(doc, "X")}
    send = x["0SEND_F0"]
    assert (send["ts"], send["dur"], send["cat"]) == (1000.0, 2000.0, "SEND_F")
    slack = {e["name"]: e["args"].pop("slack_ms") for e in x.values()}
    assert send["args"] == {"stage": 0, "microbatch": 0, "start_ms": 1.0, "end_ms": 3.0, "bytes": 8, "peer": 1}
    assert x["0OPT"]["dur"] == 0 and x["0OPT"]["args"] == {"stage": 0, "start_ms": 9.25, "end_ms": 9.25}
    assert min(slack.values()) == 0.0 and all(v >= 0 for v in slack.values())
    assert thread_names(doc)[(send["pid"], send["tid"])] == "send"


# ----- overlap splitting ------------------------------------------------------------------------
def _partial_overlaps(doc: dict[str, Any]) -> list[tuple[str, str]]:
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in events(doc, "X"):
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    bad = []
    for slices in by_thread.values():
        for a in slices:
            for b in slices:
                a0, b0 = round(a["ts"] * 1000), round(b["ts"] * 1000)  # whole ns, as Perfetto reads them
                a1, b1 = a0 + round(a["dur"] * 1000), b0 + round(b["dur"] * 1000)
                if a0 < b0 < a1 < b1:
                    bad.append((a["name"], b["name"]))
    return bad


def test_overlapping_sends_go_to_extra_threads() -> None:
    trace = small_trace()
    doc = to_chrome_trace(trace)
    names = thread_names(doc)
    x = {e["name"]: e for e in events(doc, "X")}
    assert names[(x["0SEND_F0"]["pid"], x["0SEND_F0"]["tid"])] == "send"
    assert names[(x["0SEND_F1"]["pid"], x["0SEND_F1"]["tid"])] == "send #2"
    assert sorted(n for (pid, _), n in names.items() if pid == 1) == sorted([*LANES, "send #2"])
    assert _partial_overlaps(doc) == []
    assert validate_chrome_trace(doc) == []
    # the check above can fail: force both sends onto one thread
    x["0SEND_F1"]["tid"] = x["0SEND_F0"]["tid"]
    assert _partial_overlaps(doc) == [("0SEND_F0", "0SEND_F1")]


def test_greedy_colouring_reuses_threads_and_keeps_touching_spans_together() -> None:
    spans = [
        sp(0, "0SEND_F0", 0.0, 10.0),
        sp(0, "0SEND_F1", 2.0, 3.0),
        sp(0, "0SEND_F2", 5.0, 15.0),
        sp(0, "0SEND_F3", 12.0, 20.0),
        sp(0, "0SEND_F4", 20.0, 21.0),  # touches 0SEND_F3
        sp(0, "0SEND_F5", 21.0, 21.0),  # zero duration, touches
    ]
    doc = to_chrome_trace(Trace(spans=spans, meta={"num_ranks": 1}))
    names = thread_names(doc)
    lane = {e["name"]: names[(e["pid"], e["tid"])] for e in events(doc, "X")}
    assert lane == {
        "0SEND_F0": "send",
        "0SEND_F1": "send #2",
        "0SEND_F2": "send #2",
        "0SEND_F3": "send",
        "0SEND_F4": "send",
        "0SEND_F5": "send",
    }
    assert validate_chrome_trace(doc) == []


def test_spans_touching_up_to_float_noise_share_a_thread() -> None:
    a, b = 0.1 + 0.2, 0.3  # 0.30000000000000004 vs 0.3
    spans = [sp(0, "0F0", 0.0, a), sp(0, "0F1", b, 1.0)]
    doc = to_chrome_trace(Trace(spans=spans, meta={"num_ranks": 1}))
    assert len({e["tid"] for e in events(doc, "X")}) == 1
    assert validate_chrome_trace(doc) == []
    assert from_chrome_trace(doc).spans == spans


@pytest.mark.parametrize("name", ["async", "interleaved-async"])
def test_extra_threads_exactly_where_simulated_spans_overlap(name: str) -> None:
    trace = variant(name)
    lanes: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for s in trace.spans:
        lanes.setdefault((s.rank, s.lane), []).append((round(s.start * 1e6), round(s.end * 1e6)))
    overlapping = False
    for intervals in lanes.values():
        reach = -1
        for start, end in sorted(intervals):
            overlapping |= start < reach
            reach = max(reach, end)
    doc = to_chrome_trace(trace)
    assert any(" #" in n for n in thread_names(doc).values()) == overlapping
    assert _partial_overlaps(doc) == []


# ----- flows ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gpt", "interleaved", "interleaved-async"])
def test_one_flow_per_matched_send_recv_pair(name: str) -> None:
    trace = variant(name)
    doc = to_chrome_trace(trace)
    recvs = {s.action: s for s in trace.spans if s.action.kind in RECV_KINDS}
    pairs = {s.action: recvs[matching(s.action)] for s in trace.spans if s.action.kind in SEND_KINDS}
    pairs = {a: r for a, r in pairs.items() if r is not None}
    starts, finishes = p2p(doc, "s"), p2p(doc, "f")
    assert len(starts) == len(finishes) == len(pairs) > 0
    assert len({e["id"] for e in starts}) == len(starts)
    x = {e["name"]: e for e in events(doc, "X")}
    fin = {e["id"]: e for e in finishes}
    for s in starts:
        send_text, recv_text = s["name"].split(" -> ")
        f = fin[s["id"]]
        assert (f["cat"], f["name"], f["bp"]) == (s["cat"], s["name"], "e")
        send, recv = x[send_text], x[recv_text]
        assert str(pairs[Action.parse(send_text)].action) == recv_text
        assert (s["pid"], s["tid"]) == (send["pid"], send["tid"])
        assert (f["pid"], f["tid"]) == (recv["pid"], recv["tid"])
        assert send["ts"] <= s["ts"] <= send["ts"] + send["dur"]
        assert recv["ts"] <= f["ts"] <= recv["ts"] + recv["dur"]
        assert abs(f["ts"] - (recv["ts"] + recv["dur"])) <= 0.0011  # the moment the data lands


def test_unmatched_send_gets_no_flow() -> None:
    trace = Trace(spans=[sp(0, "0SEND_F0", 0.0, 1.0, bytes=8, peer=1)], meta={"num_ranks": 2})
    doc = to_chrome_trace(trace)
    assert p2p(doc, "s") == [] and p2p(doc, "f") == []
    assert validate_chrome_trace(doc) == []


# ----- the validator ----------------------------------------------------------------------------
@pytest.fixture
def doc() -> dict[str, Any]:
    d = to_chrome_trace(small_trace())
    assert validate_chrome_trace(d) == []
    return d


def _x(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(e for e in events(doc, "X") if e["name"] == name)


def test_validator_catches_negative_duration(doc: dict[str, Any]) -> None:
    _x(doc, "0F0")["dur"] = -1.0
    assert any("negative dur" in p for p in validate_chrome_trace(doc))


def test_validator_catches_partial_overlap(doc: dict[str, Any]) -> None:
    _x(doc, "0SEND_F1")["tid"] = _x(doc, "0SEND_F0")["tid"]
    problems = validate_chrome_trace(doc)
    assert any("overlap partially" in p for p in problems), problems


def test_validator_allows_nesting_and_zero_duration(doc: dict[str, Any]) -> None:
    inner = copy.deepcopy(_x(doc, "0F0"))
    inner.update(ts=100.0, dur=0.0)
    outer = copy.deepcopy(_x(doc, "0F0"))
    outer.update(ts=0.0, dur=1000.0)
    doc["traceEvents"] += [inner, outer]
    assert validate_chrome_trace(doc) == []


def test_validator_catches_missing_thread_and_process_names(doc: dict[str, Any]) -> None:
    send = _x(doc, "0SEND_F1")
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not (e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == send["tid"])
    ]
    assert any(f"tid {send['tid']} has slices but no thread_name" in p for p in validate_chrome_trace(doc))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e["ph"] == "M" and e["name"] == "process_name")]
    assert any("has no process_name" in p for p in validate_chrome_trace(doc))


def test_validator_catches_flow_without_end(doc: dict[str, Any]) -> None:
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (e["ph"] == "f" and e["id"] == 1)]
    problems = validate_chrome_trace(doc)
    assert any("flow 1: 1 start (s) and 0 end (f)" in p for p in problems), problems


def test_validator_catches_bad_flows(doc: dict[str, Any]) -> None:
    f = events(doc, "f")[0]
    f.pop("bp")
    s = events(doc, "s")[0]
    s["ts"] = 1e9  # outside every slice
    problems = validate_chrome_trace(doc)
    assert any("bp must be 'e'" in p for p in problems)
    assert any("lies in no slice" in p for p in problems)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: _x(d, "0F0").pop("ts"), "missing ts"),
        (lambda d: _x(d, "0F0").update(ts="0"), "must be finite numbers"),
        (lambda d: _x(d, "0F0").update(ts=float("nan")), "must be finite numbers"),
        (lambda d: events(d, "C")[0].update(args={"activation_bytes": "big"}), "args must be a non-empty object"),
        (lambda d: events(d, "M", "thread_name")[0].update(args={}), "args.name is missing"),
        (lambda d: events(d, "M", "process_sort_index")[0].update(name="process_labels"), "unknown metadata name"),
        (lambda d: d["traceEvents"].append({"ph": "B", "name": "x", "pid": 1, "tid": 1001, "ts": 0}), "unsupported ph"),
        (lambda d: d.update(displayTimeUnit="s"), "displayTimeUnit"),
    ],
)
def test_validator_catches_malformed_events(doc: dict[str, Any], mutate: Any, expected: str) -> None:
    mutate(doc)
    problems = validate_chrome_trace(doc)
    assert any(expected in p for p in problems), problems


def test_validator_rejects_non_documents() -> None:
    assert validate_chrome_trace([]) and validate_chrome_trace({"traceEvents": {}})
    assert validate_chrome_trace({"traceEvents": []}) == []


# ----- round trip and determinism ---------------------------------------------------------------
def _assert_same(back: Trace, trace: Trace) -> None:
    assert back.spans == trace.spans
    assert back.counters == trace.counters
    assert back.meta == json.loads(json.dumps(trace.meta))


@pytest.mark.parametrize("name", list(VARIANTS))
def test_round_trip(name: str) -> None:
    trace = variant(name)
    _assert_same(from_chrome_trace(to_chrome_trace(trace)), trace)


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    trace = small_trace()
    path = tmp_path / "trace.json"
    write_chrome_trace(trace, path)
    doc = json.loads(path.read_text())
    assert validate_chrome_trace(doc) == []
    _assert_same(from_chrome_trace(doc), trace)


def test_deterministic() -> None:
    first = json.dumps(to_chrome_trace(variant("interleaved-async")))
    again = predict(load(SCENARIO).with_overrides(**VARIANTS["interleaved-async"])).trace
    assert json.dumps(to_chrome_trace(again)) == first
    assert json.dumps(to_chrome_trace(variant("interleaved-async"))) == first


def test_export_does_not_alias_meta() -> None:
    trace = small_trace()
    doc = to_chrome_trace(trace)
    doc["otherData"]["ppsim"]["meta"]["stage_to_rank"].append(9)
    assert trace.meta["stage_to_rank"] == [0, 1]


def test_from_chrome_trace_errors(doc: dict[str, Any]) -> None:
    for bad in ([], {"events": []}, {"traceEvents": None}):
        with pytest.raises(TraceError, match="traceEvents"):
            from_chrome_trace(bad)
    wrong = copy.deepcopy(doc)
    wrong["otherData"]["ppsim"]["format"] = "something-else"
    with pytest.raises(TraceError, match="ppsim-chrome-trace"):
        from_chrome_trace(wrong)
    newer = copy.deepcopy(doc)
    newer["otherData"]["ppsim"]["version"] = 99
    with pytest.raises(TraceError, match="version 99"):
        from_chrome_trace(newer)
    unnamed = copy.deepcopy(doc)
    _x(unnamed, "0F0")["name"] = "not an action"
    with pytest.raises(TraceError, match="not an action"):
        from_chrome_trace(unnamed)
    lost = copy.deepcopy(doc)
    lost["traceEvents"] = [e for e in lost["traceEvents"] if e["name"] != "thread_name"]
    with pytest.raises(TraceError, match="no thread_name"):
        from_chrome_trace(lost)
    short = copy.deepcopy(doc)
    short["traceEvents"].remove(events(short, "C")[0])
    with pytest.raises(TraceError, match="3 times but 2 C events"):
        from_chrome_trace(short)


def test_foreign_document_without_ppsim_block_reads_from_timestamps() -> None:
    doc = to_chrome_trace(small_trace())
    del doc["otherData"]
    for e in events(doc, "X"):
        del e["args"]["start_ms"], e["args"]["end_ms"]
    back = from_chrome_trace(doc)
    assert [str(s.action) for s in back.spans] == [str(s.action) for s in small_trace().spans]
    assert back.spans[1].start == pytest.approx(1.0) and back.spans[1].end == pytest.approx(3.0)
    assert back.counters[0].unit == "" and back.counters[0].points == small_trace().counters[0].points


# ----- property: any trace exports to a valid document and reads back exactly ---------------------
_ACTIONS = [Action(s, k, mb) for s in range(3) for k in (Kind.F, Kind.B, Kind.SEND_F, Kind.RECV_F) for mb in range(3)]
_ms = st.floats(min_value=0, max_value=1e5, allow_nan=False, allow_infinity=False)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    spans = []
    for _ in range(draw(st.integers(0, 25))):
        action = draw(st.sampled_from(_ACTIONS))
        start = draw(_ms)
        dur = draw(st.one_of(st.just(0.0), st.floats(0, 50), st.sampled_from([0.1, 0.2, 0.3])))
        spans.append(Span(action.stage, action.lane, action, start, start + dur, draw(st.none() | st.integers(0, 99))))
    points = tuple(sorted(draw(st.lists(st.tuples(_ms, _ms), max_size=5))))
    counters = [Counter(0, "mem", "bytes", points)] if points else []
    return Trace(spans=spans, meta={"num_ranks": 3, "schedule": "x"}, counters=counters)


@settings(max_examples=150, deadline=None)
@given(traces())
def test_any_trace_exports_validly_and_round_trips(trace: Trace) -> None:
    doc = json.loads(json.dumps(to_chrome_trace(trace)))
    assert validate_chrome_trace(doc) == []
    assert len(events(doc, "X")) == len(trace.spans)
    assert Tally(e["ph"] for e in doc["traceEvents"])["s"] == Tally(e["ph"] for e in doc["traceEvents"])["f"]
    _assert_same(from_chrome_trace(doc), trace)


# ----- the memory counter track, and measured traces from ppexec ---------------------------------
def test_predicted_trace_has_a_memory_counter_track_per_rank() -> None:
    trace = variant("gpt")
    doc = to_chrome_trace(trace)
    memory = [c for c in trace.counters if c.name == "memory_bytes"]
    assert len(memory) == trace.num_ranks
    for c in memory:
        track = [e for e in events(doc, "C", "memory_bytes") if e["pid"] == c.rank + 1]
        assert [e["ts"] for e in track] == pytest.approx([t * 1000 for t, _ in c.points])
        assert [e["args"]["memory_bytes"] for e in track] == [v for _, v in c.points]
    assert {e["pid"] for e in events(doc, "C", "memory_bytes")} <= {e["pid"] for e in events(doc, "M", "process_name")}


MEASURED = sorted(DATA.glob("*.measured.trace.json"))


@pytest.mark.parametrize("path", MEASURED, ids=[p.name for p in MEASURED])
def test_measured_traces_export_validly_with_flows_and_round_trip(path: Path) -> None:
    trace = Trace.load(path)
    assert trace.meta["source"] == "measured"
    doc = to_chrome_trace(trace)
    assert validate_chrome_trace(json.loads(json.dumps(doc))) == []
    sends = [s for s in trace.spans if s.action.kind in SEND_KINDS]
    recvs = {s.action for s in trace.spans if s.action.kind in RECV_KINDS}
    matched = [s for s in sends if matching(s.action) in recvs]
    assert len(p2p(doc, "s")) == len(p2p(doc, "f")) == len(matched) > 0
    _assert_same(from_chrome_trace(doc), trace)


def test_a_lane_that_is_not_one_is_refused_in_one_line(tmp_path) -> None:
    """A span's lane is compute, send, recv or collective (its action's kind says which); a trace
    file naming another is refused, by ppsim's own reader and by the Chrome trace reader."""
    import json

    from ppsim.errors import TraceError
    from ppsim.trace.chrome import from_chrome_trace, to_chrome_trace
    from ppsim.trace.load import load_trace

    trace = Trace(spans=[Span(0, "compute", Action.parse("0F0"), 0.0, 1.0)], meta={"num_ranks": 1})
    path = tmp_path / "t.json"
    trace.save(path)
    doc = json.loads(path.read_text())
    doc["spans"][0][1] = "gpu"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="'gpu' is not a lane: a span's lane is one of compute, send, recv, collective"):
        load_trace(path)
    chrome = to_chrome_trace(trace)
    for ev in chrome["traceEvents"]:
        if ev.get("name") == "thread_name" and ev["args"]["name"] == "compute":
            ev["args"]["name"] = "gpu"
    with pytest.raises(TraceError, match="'gpu' is not a lane"):
        from_chrome_trace(chrome)


def test_the_critical_path_is_marked_and_drawn_from_rank_to_rank() -> None:
    from ppsim.trace.critical import critical_path

    trace = variant("gpt")
    doc = to_chrome_trace(trace)
    assert validate_chrome_trace(json.loads(json.dumps(doc))) == []
    path = critical_path(trace)
    marked = [e for e in events(doc, "X") if "critical_path" in e["args"]]
    assert [e["name"] for e in marked] == [str(s.action) for s in path.spans]
    assert all(e["args"]["slack_ms"] == 0.0 for e in marked)  # gpt.yaml's path crosses no idle gap
    assert sum(e["args"]["slack_ms"] > 0 for e in events(doc, "X")) > len(marked)
    starts = [e for e in events(doc, "s") if e["cat"] == "critical_path"]
    ends = {e["id"]: e for e in events(doc, "f") if e["cat"] == "critical_path"}
    hops = sum(a.rank != b.rank for a, b in zip(path.spans, path.spans[1:], strict=False))
    assert len(starts) == len(ends) == hops > 0
    assert all(s["pid"] != ends[s["id"]]["pid"] for s in starts)  # each arrow goes to another rank
    assert len({e["id"] for e in events(doc, "s")}) == len(events(doc, "s"))  # no id shared with the messages'
    _assert_same(from_chrome_trace(doc), trace)  # read back as it was written
