"""A trace's meta: every key a writer puts there is declared in TraceMeta with its type, and a file's
meta of the wrong type is refused naming the key (stored traces and fresh predictions, no torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from conftest import ROOT
from ppsim import load_scenario
from ppsim.errors import TraceError
from ppsim.prediction import predict
from ppsim.trace import Trace, TraceMeta, read_meta
from ppsim.trace.chrome import from_chrome_trace, to_chrome_trace

DECLARED = set(get_type_hints(TraceMeta))
STORED = sorted((ROOT / "tests" / "data").glob("*.trace.json"))


def _json_round_trip(meta: TraceMeta) -> Any:
    return json.loads(json.dumps(meta))


@pytest.mark.parametrize("scenario", ["gpt.yaml", "megatron-gpt3-175b.yaml", "tiny-cpu.yaml"])
@pytest.mark.parametrize("schedule", [None, "auto", "interleaved-1f1b"])
def test_a_prediction_writes_only_declared_keys_of_their_declared_types(scenario: str, schedule: str | None) -> None:
    s = load_scenario(ROOT / "scenarios" / scenario, schedule=schedule)
    meta = predict(s).trace.meta
    assert set(meta) <= DECLARED, f"undeclared keys: {set(meta) - DECLARED}"
    assert read_meta(_json_round_trip(meta)) == _json_round_trip(meta)
    if schedule == "auto":
        assert set(meta["search"]) >= {"chosen", "step_ms", "considered", "simulated", "passes_ms"}


def test_an_overlapped_schedule_s_trace_reads_back_through_the_check(tmp_path: Path) -> None:
    """combined-1f1b interleaves its pairs layer by layer: the meta's flag (a JSON true) is read back."""
    trace = predict(load_scenario(ROOT / "scenarios" / "gpt-oss-120b.yaml")).trace
    assert trace.meta["overlap_layerwise"] is True
    trace.save(tmp_path / "t.json")
    assert Trace.load(tmp_path / "t.json").meta == _json_round_trip(trace.meta)


@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_stored_traces_simulated_and_measured_hold_declared_keys(path: Path) -> None:
    trace = Trace.load(path)
    assert set(trace.meta) <= DECLARED, f"undeclared keys: {set(trace.meta) - DECLARED}"


def test_a_chrome_trace_carries_the_meta_back_through_the_same_check(tmp_path: Path) -> None:
    trace = Trace.load(ROOT / "tests" / "data" / "tiny-1f1b.measured.trace.json")
    doc = to_chrome_trace(trace)
    assert from_chrome_trace(doc).meta == _json_round_trip(trace.meta)
    doc["otherData"]["ppsim"]["meta"]["chunks"] = 1.5
    with pytest.raises(TraceError, match=r"meta\.chunks is 1\.5; it must be a whole number"):
        from_chrome_trace(doc)


@pytest.mark.parametrize("key, value, says", [
    ("num_ranks", True, "a whole number"),  # JSON's true is no count
    ("partition", [4, "4"], "each item a whole number"),
    ("memory_measured", "vmstat", "one of 'rss', 'allocator'"),
    ("memory_static_bytes", [{"weights": 1}], "gradients (a whole number)"),
    ("p2p_ms", {"0": 1.0}, "a list, each item a number"),
    ("forward_calls", {"block": 1.5}, "values are each a whole number"),
    ("overlap_layerwise", 1, "true or false"),  # a count is no flag
])
def test_a_wrong_value_is_named_with_the_type_it_must_have(key: str, value: Any, says: str) -> None:
    with pytest.raises(TraceError, match=rf"meta\.{key} is .*; it must be .*{says.replace('(', '.').replace(')', '.')}"):
        read_meta({"source": "simulated", key: value})
    with pytest.raises(TraceError, match=r"meta\.num_ranks is true;"):  # the value as the file has it
        read_meta({"num_ranks": True})


def test_keys_this_ppsim_does_not_know_are_kept_and_nulls_are_allowed_where_declared() -> None:
    meta = read_meta({"source": "measured", "from_a_newer_ppsim": {"x": 1}, "scenario": None, "loss": None,
                      "samples_per_step": 8})
    assert meta["from_a_newer_ppsim"] == {"x": 1}  # type: ignore[typeddict-item]
    assert meta["samples_per_step"] == 8  # a JSON integer is a number
