"""Bad input and faults, as a hostile user gives them (issue 21, ppsim's side): every case ends in at
most three lines naming the key or the file, exit 1 or 2, no traceback, within a deadline, and no file
that was there before is changed (nor any left behind).

Property-based where inputs vary (hypothesis mutates a valid scenario's numbers, deletes keys, repeats
keys), and a table of hand-made cases for each item of the issue: output paths, plan files, trace
files, sizes too big to simulate, numbers out of range.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import DATA, GPT_YAML, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.inputs import scenario as scenario_mod

DEADLINE_S = 15  #: a case that has not answered by then hangs
LONG = "a" * 296  #: with an extension, a 300-character file name


# ----- the one check every case passes ----------------------------------------------------------
@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in the test if the body runs longer than ``seconds`` (the CLI runs in process)."""

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s: the command hangs")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def refused(folder: Path, args: list[Any], names: str | tuple[str, ...], codes: tuple[int, ...] = (1, 2)) -> str:
    """Run ``ppsim ARGS`` in process and check the refusal; returns its output."""
    before = _snapshot(folder)
    with deadline(DEADLINE_S):
        res = invoke(app, *args)
    out = res.output
    assert isinstance(res.exception, SystemExit) or res.exception is None, f"{res.exception!r}\n{out}"
    assert "Traceback" not in out, out
    assert res.exit_code in codes, f"exit {res.exit_code}: {out}"
    lines = out.strip().splitlines()
    assert 1 <= len(lines) <= 3, out
    wanted = (names,) if isinstance(names, str) else names
    assert any(n in out for n in wanted), f"names none of {wanted}: {out}"
    assert _snapshot(folder) == before, "a file that was there before changed, or one was left behind"
    return out


# ----- inputs -----------------------------------------------------------------------------------
def _small_gpt() -> dict[str, Any]:
    """scenarios/gpt.yaml with 4 stages and 8 micro-batches: fast to simulate if a mutation is valid."""
    data = yaml.safe_load(GPT_YAML.read_text())
    data["pipeline"].update(stages=4)
    data["training"]["global_batch"] = 64
    return data


BASES: dict[str, dict[str, Any]] = {
    "model": _small_gpt(),
    "costs": {"pipeline": {"stages": 4, "microbatches": 8, "schedule": "zb-h1"},
              "costs": {"forward_ms": [1.0, 1.0, 1.0, 1.5], "backward_ms": 2.0, "weight_grad_ms": 1.0, "p2p_ms": 0.1,
                        "optimizer_ms": 0.5, "allreduce_ms": 1.0}, "data_parallel": 2},
    "cluster": {**{k: v for k, v in _small_gpt().items() if k != "hardware"},
                "cluster": {"nodes": 4, "devices_per_node": 8, "nics_per_node": 4,
                            "intra_node": {"bandwidth_gb_s": 300, "latency_us": 3},
                            "inter_node": {"bandwidth_gb_s": 25, "latency_us": 5}}},
}


def _numbers(data: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """The paths of every number (not a boolean) in a nested mapping."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _numbers(v, (*path, k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _numbers(v, (*path, i))]
    return [path] if isinstance(data, (int, float)) and not isinstance(data, bool) else []


def _has_upper_bound(path: tuple[str | int, ...]) -> bool:
    """Whether the key at ``path`` has a declared upper bound (so a huge value is always wrong)."""
    keys = [k for k in path if isinstance(k, str)]
    cls: Any = scenario_mod.Scenario
    for k in keys[:-1]:
        ann = cls.model_fields[k].annotation
        cls = next(a for a in (getattr(ann, "__args__", None) or (ann,)) if isinstance(a, type) and a is not type(None))
    rng = scenario_mod.valid_range(cls, keys[-1]) or ""
    return " - " in rng or "≤" in rng


def _set(data: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def _key(path: tuple[str | int, ...]) -> str:
    return ".".join(k for k in path if isinstance(k, str))


def _write(folder: Path, data: Any, name: str = "s.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None))
    return path


ALWAYS_WRONG = [math.nan, math.inf, -math.inf, -1, -1e-3, "abc", [1, 2, 3, 4, 5, 6, 7], {"x": 1}]
MUTATIONS = [(base, path) for base, data in BASES.items() for path in _numbers(data)]


# ----- property-based ---------------------------------------------------------------------------
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(case=st.sampled_from(MUTATIONS), bad=st.sampled_from([*ALWAYS_WRONG, "huge"]))
def test_a_number_made_nonsense_is_refused_naming_its_key(tmp_path: Path, case: tuple[str, tuple], bad: Any) -> None:
    base, path = case
    if bad == "huge":
        assume(_has_upper_bound(path))
        bad = 10**12
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    scenario = _write(folder, _set(BASES[base], path, bad))
    refused(folder, ["run", scenario], (_key(path), scenario.name), codes=(1,))


#: numbers up to 1,000 (quick to simulate where valid) and beyond 10^9 (refused everywhere); between
#: them lie valid plans of millions of actions, tens of seconds each
ANY_NUMBER = st.one_of(st.integers(-10**30, 1_000), st.integers(10**9 + 1, 10**30), st.floats(max_value=1_000),
                       st.floats(min_value=1e9 + 1), st.sampled_from([math.nan, math.inf, -math.inf]))


@FUZZ
@given(case=st.sampled_from(MUTATIONS), value=ANY_NUMBER)
def test_any_number_anywhere_is_run_or_refused_in_one_line(tmp_path: Path, case: tuple[str, tuple], value: Any) -> None:
    """Any number in any place: a prediction or one line naming the key, quickly, never a traceback."""
    base, path = case
    res, scenario = _run_written(tmp_path, _set(BASES[base], path, value))
    if res.exit_code == 1:
        assert re.match(r"error: [\w.\[\]-]+: ", res.output) or scenario.name in res.output, res.output
    else:
        doc = json.loads(res.stdout)
        assert math.isfinite(doc["step_time_ms"]) and doc["step_time_ms"] >= 0


def _run_written(tmp_path: Path, doc: dict) -> tuple[Any, Path]:
    """``ppsim run --json`` on ``doc`` written into a fresh folder: within the deadline, never a
    traceback, a prediction or at most 3 lines of error, and the folder unchanged."""
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    scenario = _write(folder, doc)
    before = _snapshot(folder)
    with deadline(DEADLINE_S):
        res = invoke(app, "run", scenario, "--json")
    assert "Traceback" not in res.output and res.exit_code in (0, 1), res.output
    if res.exit_code == 1:
        assert len(res.output.strip().splitlines()) <= 3, res.output
    assert _snapshot(folder) == before
    return res, scenario


def _keys(data: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if not isinstance(data, dict):
        return []
    return [p for k, v in data.items() for p in [(*path, k), *_keys(v, (*path, k))]]


@FUZZ
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_a_deleted_key_runs_with_its_default_or_is_named(tmp_path: Path, base: str, data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(_keys(BASES[base])))
    doc = copy.deepcopy(BASES[base])
    node = doc
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    _run_written(tmp_path, doc)


@FUZZ
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_a_key_given_twice_is_named_with_both_lines(tmp_path: Path, base: str, data: st.DataObject) -> None:
    text = yaml.safe_dump(BASES[base], sort_keys=False, default_flow_style=None)
    lines = text.splitlines()
    i = data.draw(st.sampled_from([i for i, line in enumerate(lines) if ":" in line and not line.lstrip().startswith("-")]))
    key = lines[i].split(":")[0].strip()
    indent = len(lines[i]) - len(lines[i].lstrip())
    if lines[i].rstrip().endswith(":"):  # a section: repeat it, as an empty mapping, after its block
        at = next((j for j in range(i + 1, len(lines)) if len(lines[j]) - len(lines[j].lstrip()) <= indent
                   and not lines[j].lstrip().startswith("-")), len(lines))
        repeated = lines[i] + " {}"
    else:
        at, repeated = i + 1, lines[i]
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / "twice.yaml"
    path.write_text("\n".join([*lines[:at], repeated, *lines[at:]]) + "\n")
    out = refused(folder, ["run", path], f"key '{key}' appears twice", codes=(1,))
    assert f"lines {i + 1} and {at + 1}" in out


# ----- hand-made: output paths ------------------------------------------------------------------
@pytest.fixture
def unwritable(tmp_path: Path) -> Iterator[Path]:
    """A folder no new file can be made in (a read-only folder; as root, /sys, which refuses every new file)."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    folder = Path("/sys")
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        yield folder
        return
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no unwritable folder here")


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A folder holding a scenario, a saved prediction and a symbolic link loop."""
    _write(tmp_path, BASES["costs"], "s.yaml")
    (tmp_path / "pred.json").write_bytes((DATA / "tiny-1f1b.predicted.trace.json").read_bytes())
    (tmp_path / "loop-a").symlink_to("loop-b")
    (tmp_path / "loop-b").symlink_to("loop-a")
    (tmp_path / "a-file").write_text("not a folder\n")
    return tmp_path


OUTPUTS: list[tuple[str, Callable[[Path, Path], list[Any]], str]] = [
    ("run --trace unwritable", lambda d, u: ["run", d / "s.yaml", "--trace", u / "t.json"], "--trace"),
    ("run --html unwritable", lambda d, u: ["run", d / "s.yaml", "--html", u / "t.html"], "--html"),
    ("run --html link loop", lambda d, u: ["run", d / "s.yaml", "--html", d / "loop-a"], "loop-a"),
    ("run --trace in a link loop", lambda d, u: ["run", d / "s.yaml", "--trace", d / "loop-a" / "t.json"], "loop-a"),
    ("run --html missing folder", lambda d, u: ["run", d / "s.yaml", "--html", d / "nope" / "t.html"], "nope"),
    ("run --save-trace under a file", lambda d, u: ["run", d / "s.yaml", "--save-trace", d / "a-file" / "t.json"],
     "a-file"),
    ("run --html 300 characters", lambda d, u: ["run", d / "s.yaml", "--html", d / f"{LONG}.html"], "--html"),
    ("plan --save unwritable", lambda d, u: ["plan", d / "s.yaml", "--save", u / "p.json"], "--save"),
    ("plan --save link loop", lambda d, u: ["plan", d / "s.yaml", "--save", d / "loop-b"], "loop-b"),
    ("plan --save 300 characters", lambda d, u: ["plan", d / "s.yaml", "--save", d / f"{LONG}.json"], "--save"),
    ("compare --html unwritable", lambda d, u: ["compare", d / "pred.json", d / "pred.json", "--html", u / "c.html"],
     "--html"),
    ("compare --html link loop", lambda d, u: ["compare", d / "pred.json", d / "pred.json", "--html", d / "loop-a"],
     "loop-a"),
    ("compare --html missing folder", lambda d, u: ["compare", d / "pred.json", d / "pred.json", "--html",
                                                    d / "no" / "c.html"], "no"),
    ("compare-schedules --html 300 characters", lambda d, u: ["compare-schedules", d / "s.yaml", "--html",
                                                              d / f"{LONG}.html"], "--html"),
    ("sweep --html unwritable", lambda d, u: ["sweep", d / "s.yaml", "--stages", "2,4", "--html", u / "w.html"],
     "--html"),
    ("tune --html link loop", lambda d, u: ["tune", d / "s.yaml", "--html", d / "loop-a"], "loop-a"),
    ("scenario of 300 characters", lambda d, u: ["run", d / f"{LONG}.yaml"], "aaaa"),
    ("scenario in a folder of 300 characters", lambda d, u: ["run", d / LONG / "s.yaml"], "aaaa"),
    ("scenario that is a link loop", lambda d, u: ["run", d / "loop-a"], "loop-a"),
    ("trace of 300 characters", lambda d, u: ["compare", d / "pred.json", d / f"{LONG}.json"], "aaaa"),
    ("plan file of 300 characters", lambda d, u: ["plan", d / f"{LONG}.json"], "aaaa"),
    ("tui scenario of 300 characters", lambda d, u: ["tui", d / f"{LONG}.yaml"], "aaaa"),
]


@pytest.mark.parametrize("make", [c[1] for c in OUTPUTS], ids=[c[0] for c in OUTPUTS])
def test_an_output_or_input_path_the_system_refuses_is_one_line(inputs: Path, unwritable: Path, make: Callable,
                                                                  request: pytest.FixtureRequest) -> None:
    name = next(c[2] for c in OUTPUTS if c[1] is make)
    out = refused(inputs, make(inputs, unwritable), name, codes=(1,))
    assert "; " in out  # the fix follows the problem


def test_the_output_messages_name_the_path_and_the_fix(inputs: Path, unwritable: Path) -> None:
    out = refused(inputs, ["run", inputs / "s.yaml", "--html", inputs / "loop-a"], "loop-a")
    assert "symbolic link" in out and "remove the link or choose another path" in out
    out = refused(inputs, ["run", inputs / "s.yaml", "--trace", unwritable / "t.json"], str(unwritable))
    assert "cannot write" in out and "choose a path you can write" in out
    out = refused(inputs, ["run", inputs / "s.yaml", "--html", inputs / f"{LONG}.html"], "characters)")
    assert "too long" in out and "choose a shorter name" in out


# ----- hand-made: plan files --------------------------------------------------------------------
def _plan_doc() -> dict[str, Any]:
    from ppsim.plan import schedules

    return json.loads(schedules.build("1f1b", 2, 4).to_json())


PLAN_FILES: list[tuple[str, Any, str]] = [
    ("a list", [1, 2], "a plan JSON is an object"),
    ("actions a number", {"actions": 5}, "'actions'"),
    ("actions of numbers", {"actions": [[5], [6]]}, "'actions'"),
    ("actions of strings", {"actions": ["0F0", "1F0"]}, "'actions'"),
    ("num_ranks a string", {"num_ranks": "two"}, "'num_ranks'"),
    ("num_ranks negative", {"num_ranks": -1}, "'num_ranks'"),
    ("num_ranks huge", {"num_ranks": 10**12}, "'num_ranks'"),
    ("num_microbatches huge", {"num_microbatches": 10**12}, "'num_microbatches'"),
    ("chunks zero", {"chunks": 0}, "'chunks'"),
    ("stage_to_rank null", {"stage_to_rank": None}, "'stage_to_rank'"),
    ("stage_to_rank out of range", {"stage_to_rank": [0, 7]}, "'stage_to_rank'"),
    ("meta a list", {"meta": [1]}, "'meta'"),
    ("format missing", {"format": None}, "'format'"),
    ("schedule missing", {"schedule": "drop"}, "'schedule'"),
    ("truncated", "truncate", "not valid JSON"),
    ("an action that is not one", "bad action", "0X0"),
]


def _plan_file(folder: Path, change: Any) -> Path:
    path = folder / "plan.json"
    doc = _plan_doc()
    if change == "truncate":
        path.write_text(json.dumps(doc)[:80])
        return path
    if change == "bad action":
        doc["actions"][0][1] = "0X0"
        change = {}
    if isinstance(change, dict):
        for k, v in change.items():
            if v == "drop":
                del doc[k]
            else:
                doc[k] = v
    else:
        doc = change
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("change, names", [c[1:] for c in PLAN_FILES], ids=[c[0] for c in PLAN_FILES])
@pytest.mark.parametrize("how", ["plan FILE", "run --schedule file:FILE"])
def test_a_malformed_plan_file_is_one_line_naming_the_field(tmp_path: Path, change: Any, names: str, how: str) -> None:
    path = _plan_file(tmp_path, change)
    scenario = _write(tmp_path, {"pipeline": {"stages": 2, "microbatches": 4}, "costs": {"forward_ms": 1, "backward_ms": 2}})
    args = ["plan", path] if how == "plan FILE" else ["run", scenario, "--schedule", f"file:{path}"]
    refused(tmp_path, args, names, codes=(1,))


# ----- hand-made: trace files -------------------------------------------------------------------
def _trace_doc() -> dict[str, Any]:
    return json.loads((DATA / "tiny-1f1b.measured.trace.json").read_text())


def _span(i: int, field: int, value: Any) -> Callable[[dict], dict]:
    def change(doc: dict) -> dict:
        doc["spans"][i][field] = value
        return doc
    return change


TRACES: list[tuple[str, Callable[[dict], Any] | str, str]] = [
    ("NaN start", _span(0, 3, math.nan), "start time nan"),
    ("inf end", _span(2, 4, math.inf), "end time inf"),
    ("-inf start", _span(1, 3, -math.inf), "start time -inf"),
    ("ends before it starts", _span(1, 3, 1e6), "before it starts"),
    ("negative rank", _span(1, 0, -1), "rank -1"),
    ("huge rank count", lambda d: {**d, "meta": {**d["meta"], "num_ranks": 10**9}}, "num_ranks"),
    ("meta a list", lambda d: {**d, "meta": [1]}, "'meta'"),
    ("micro-batches a string", lambda d: {**d, "meta": {**d["meta"], "num_microbatches": "8"}}, "meta.num_microbatches"),
    ("placement of floats", lambda d: {**d, "meta": {**d["meta"], "stage_to_rank": [0.5, 1]}}, "meta.stage_to_rank"),
    ("a foreign source", lambda d: {**d, "meta": {**d["meta"], "source": "guessed"}}, "meta.source"),
    ("a search without numbers", lambda d: {**d, "meta": {**d["meta"], "search": {"step_ms": "fast"}}}, "meta.search"),
    ("spans a number", lambda d: {**d, "spans": 5}, "malformed span"),
    ("a span too short", lambda d: {**d, "spans": [[0, "compute"]]}, "malformed span"),
    ("NaN counter", lambda d: {**d, "counters": [{"rank": 0, "name": "mem", "points": [[math.nan, 1]]}]}, "counter"),
    ("foreign object", lambda d: {"hello": "world"}, "not a ppsim trace"),
    ("foreign list", lambda d: [1, 2, 3], "not a ppsim trace"),
    ("Chrome trace of numbers", lambda d: {"traceEvents": [1, 2]}, "Chrome trace"),
    ("truncated", "truncate", "not valid JSON"),
    ("empty", "empty", "not valid JSON"),
]


@pytest.mark.parametrize("change, names", [c[1:] for c in TRACES], ids=[c[0] for c in TRACES])
def test_a_damaged_or_foreign_trace_is_refused_by_name(tmp_path: Path, change: Any, names: str) -> None:
    pred = tmp_path / "pred.json"
    pred.write_bytes((DATA / "tiny-1f1b.predicted.trace.json").read_bytes())
    bad = tmp_path / "measured.json"
    text = json.dumps(_trace_doc())
    bad.write_text(text[:200] if change == "truncate" else "" if change == "empty" else json.dumps(change(_trace_doc())))
    out = refused(tmp_path, ["compare", pred, bad], names, codes=(1,))
    assert "measured" in out and ("measured.json" in out or names in out)


# ----- hand-made: too big to simulate, numbers out of range -------------------------------------
SIZES: list[tuple[str, Any, list[str], str]] = [
    ("global batch huge", ("training", "global_batch"), 10**9, "training.global_batch"),
    ("micro-batches huge", ("pipeline", "microbatches"), 10**8, "pipeline.microbatches"),
    ("micro-batches beyond the declared bound", ("pipeline", "microbatches"), 10**12, "pipeline.microbatches"),
    ("layers huge", ("model", "layers"), 10**7, "model.layers"),
    ("stages huge", ("pipeline", "stages"), 10**6, "pipeline.stages"),
    ("chunks huge", ("pipeline", "chunks"), 10**6, "pipeline.chunks"),
    ("nodes huge", ("cluster", "nodes"), 10**9, "cluster.nodes"),
    ("nodes too many", ("cluster", "nodes"), 50_000, "cluster.nodes"),
    ("devices per node huge", ("cluster", "devices_per_node"), 10**6, "cluster.devices_per_node"),
    ("NICs per node huge", ("cluster", "nics_per_node"), 10**6, "cluster.nics_per_node"),
    ("data parallel huge", ("data_parallel",), 10**9, "data_parallel"),
    ("bucket too small to simulate", ("training", "bucket_mb"), 1e-9, "training.bucket_mb"),
    ("latency of a year", ("cluster", "inter_node", "latency_us"), 3e13, "cluster.inter_node.latency_us"),
    ("hidden huge", ("model", "hidden"), 10**30, "model.hidden"),
]


@pytest.mark.parametrize("path, value, key", [c[1:] for c in SIZES], ids=[c[0] for c in SIZES])
def test_a_plan_too_big_is_refused_within_a_second(tmp_path: Path, path: tuple, value: Any, key: str) -> None:
    import time

    doc = copy.deepcopy(BASES["cluster"])
    if path == ("pipeline", "microbatches"):
        doc["training"].pop("global_batch")
    scenario = _write(tmp_path, _set(doc, path, value))
    t0 = time.perf_counter()
    refused(tmp_path, ["run", scenario], key, codes=(1,))
    assert time.perf_counter() - t0 < 1.0


OVERRIDES: list[tuple[str, list[str], str]] = [
    ("--microbatches huge", ["run", "{s}", "--microbatches", "100000000"], "pipeline.microbatches"),
    ("--stages huge", ["plan", "{s}", "--stages", "1000000"], "pipeline.stages"),
    ("--chunks huge", ["run", "{s}", "--chunks", "100000", "--schedule", "interleaved-1f1b"], "pipeline.chunks"),
    ("a sweep of huge micro-batch counts", ["sweep", "{s}", "--microbatches", "100000000,300000000", "--fixed", "replica"],
     "pipeline.microbatches"),
    ("compare-schedules with huge micro-batches", ["compare-schedules", "{s}", "--microbatches", "100000000"],
     "pipeline.microbatches"),
]


@pytest.mark.parametrize("args, key", [c[1:] for c in OVERRIDES], ids=[c[0] for c in OVERRIDES])
def test_huge_counts_on_the_command_line_are_refused_at_once(tmp_path: Path, args: list[str], key: str) -> None:
    import time

    doc = copy.deepcopy(BASES["model"])
    doc["training"].pop("global_batch")
    scenario = _write(tmp_path, doc)
    t0 = time.perf_counter()
    refused(tmp_path, [a.replace("{s}", str(scenario)) for a in args], key)
    assert time.perf_counter() - t0 < 1.5


@pytest.mark.parametrize("name", sorted(p.name for p in SCENARIOS.glob("*.yaml")))
def test_every_shipped_scenario_is_within_the_limits(name: str) -> None:
    """The limits refuse nonsense, not the scenarios the project ships."""
    s = scenario_mod.load(SCENARIOS / name)
    assert scenario_mod.plan_actions(s) <= scenario_mod.MAX_PLAN_ACTIONS


# ----- hand-made: files beside the scenario -----------------------------------------------------
DS_HEAD = '{"train_batch_size": 64, "bf16": {"enabled": true}, '
SIDE_FILES: list[tuple[str, str, str, str]] = [
    ("device memory NaN", "devices.yaml", "mine:\n  memory_gb: .nan\n", "memory_gb"),
    ("device peak zero", "devices.yaml", "mine:\n  peak_tflops: {bf16: 0}\n", "peak_tflops"),
    ("device key twice", "devices.yaml", "mine:\n  memory_gb: 80\n  memory_gb: 40\n", "memory_gb"),
    ("device file nested too deeply", "devices.yaml", "mine: " + "[" * 20000 + "]" * 20000 + "\n", "devices.yaml"),
    ("ds_config clipping a string", "ds.json", DS_HEAD + '"gradient_clipping": "abc"}', "gradient_clipping"),
    ("ds_config clipping null", "ds.json", DS_HEAD + '"gradient_clipping": null}', "gradient_clipping"),
    ("ds_config a list", "ds.json", "[1, 2]", "ds.json"),
]


@pytest.mark.parametrize("file, text, key", [c[1:] for c in SIDE_FILES], ids=[c[0] for c in SIDE_FILES])
def test_a_bad_file_beside_the_scenario_is_named(tmp_path: Path, file: str, text: str, key: str) -> None:
    (tmp_path / file).write_text(text)
    doc = {k: v for k, v in BASES["model"].items() if k != "training"}
    if file == "devices.yaml":
        doc["hardware"] = {**doc["hardware"], "device": "mine", "device_file": file}
    else:
        doc["deepspeed"] = file
    refused(tmp_path, ["run", _write(tmp_path, doc)], key, codes=(1,))
