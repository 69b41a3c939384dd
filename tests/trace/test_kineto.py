"""Torch profiler traces of a plain torch.distributed.pipelining job (tests/data/kineto, made by
its make_fixture.py: ScheduleInterleaved1F1B, 2 ranks x 2 stages, 4 micro-batches, 3 profiled
steps; no-schedule/: the same job, 2 steps profiled with no profiler schedule, hence no
ProfilerStep#N events) read as a measured Trace, compared with a prediction, and refused clearly
when they cannot be."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DATA, ROOT, invoke
from ppsim.cli import app
from ppsim.errors import TraceError
from ppsim.inputs.scenario import parse_scenario
from ppsim.plan import COMPUTE_KINDS, Kind
from ppsim.prediction import predict
from ppsim.trace import Trace, kineto, read_meta
from ppsim.trace.load import load_trace, load_traces
from ppsim.trace.metrics import step_time_ms, summarize

KINETO = DATA / "kineto"
FILES = sorted(KINETO.glob("rank*.json.gz"))
NO_SCHEDULE = KINETO / "no-schedule"
NO_SCHEDULE_FILES = sorted(NO_SCHEDULE.glob("rank*.json.gz"))
#: the job the fixture profiled, as a ppsim scenario (explicit costs: only the plan matters here)
SCENARIO = {"name": "kineto-fixture", "costs": {"forward_ms": 2.0, "backward_ms": 4.0},
            "pipeline": {"stages": 2, "chunks": 2, "microbatches": 4, "schedule": "interleaved-1f1b", "comm": "async"}}


@pytest.fixture(scope="module")
def measured() -> Trace:
    return load_trace(KINETO)


@pytest.fixture(scope="module")
def predicted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kineto") / "predicted.trace.json"
    predict(parse_scenario(SCENARIO)).trace.save(path)
    return path


def test_the_folder_is_one_measured_trace_of_the_pipeline(measured: Trace) -> None:
    m = measured.meta
    assert (m["source"], m["trace_format"], m["runtime"]) == ("measured", "kineto", "torch")
    assert (m["num_ranks"], m["chunks"], m["num_microbatches"], m["stage_to_rank"]) == (2, 2, 4, [0, 1, 0, 1])
    assert m["profiled_steps"] == [2, 3, 4]
    assert read_meta(json.loads(json.dumps(m))) == m  # declared keys of their declared types
    # the median step of the three, as ppexec chooses
    times = dict(zip(m["profiled_steps"], m["step_times_ms"]))
    assert times[m["step"]] == sorted(times.values())[1]
    assert step_time_ms(measured) == pytest.approx(times[m["step"]])
    compute = {(s.rank, str(s.action)) for s in measured.spans if s.action.kind in COMPUTE_KINDS}
    assert compute == {(stage % 2, f"{stage}{k}{mb}") for stage in range(4) for k in "FB" for mb in range(4)}
    kinds = {s.action.kind for s in measured.spans}
    assert Kind.REDUCE_GRAD in kinds and Kind.OPT in kinds  # torch's own REDUCE_GRAD; the optimizer step
    assert all(0 <= s.start <= s.end for s in measured.spans)
    assert all(s.peer == 1 - s.rank for s in measured.spans if s.lane in ("send", "recv"))


def test_files_given_one_by_one_are_the_same_trace(measured: Trace) -> None:
    assert load_trace(FILES).spans == measured.spans
    [(_, one)] = load_traces(FILES)
    assert one.spans == measured.spans


def test_ppsim_compare_reads_the_folder_and_the_files(predicted: Path) -> None:
    for args in ([str(KINETO)], [str(f) for f in FILES]):
        res = invoke(app, "compare", predicted, *args, "--json")
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["matched"] >= 32 and doc["measured_schedule"] == "kineto"
        assert any("only in the measured trace" in note and "REDUCE_GRAD" in note for note in doc["unmatched"])


def test_a_dualpipev_run_reads_with_its_overlapped_actions_and_matches_ppsims_plan(tmp_path: Path) -> None:
    """torch's own ScheduleDualPipeV (tests/data/kineto/dualpipev, the same script): V placement,
    and the overlapped forward and backward as one action each, equal to ppsim's dualpipev plan."""
    from ppsim.plan import schedules

    measured = load_trace(KINETO / "dualpipev")
    assert (measured.meta["num_ranks"], measured.meta["stage_to_rank"]) == (2, [0, 1, 1, 0])
    compute = [[str(s.action) for s in sorted(measured.spans, key=lambda s: s.start)
                if s.rank == r and s.action.kind in COMPUTE_KINDS] for r in range(2)]
    assert compute == [[str(a) for a in rank] for rank in schedules.build("dualpipev", 2, 4).actions]
    assert sum(x.startswith("(") for r in compute for x in r) == 6  # torch's (F;B)OVERLAP_F_B, read whole
    assert max(r.peak_activation_microbatches for r in summarize(measured).per_rank) == 2.5  # p + 1/2
    path = tmp_path / "predicted.trace.json"
    scenario = {**SCENARIO, "pipeline": {**SCENARIO["pipeline"], "schedule": "dualpipev"}}  # type: ignore[dict-item]
    predict(parse_scenario(scenario)).trace.save(path)
    res = invoke(app, "compare", path, KINETO / "dualpipev", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["matched"] > sum(map(len, compute))  # every compute action, and messages


def test_ppsim_tui_shows_a_prediction_above_the_profiled_run(predicted: Path) -> None:
    pytest.importorskip("textual")
    from ppsim.views.tui.state import TuiState

    traces = load_traces([predicted, *FILES])
    assert [label for label, _ in traces] == ["predicted.trace.json", "kineto"]
    state = TuiState.from_traces(traces)
    assert [sh.summary.source for sh in state.shown] == ["simulated", "measured"]


def _rewrite(tmp_path: Path, change: object, files: list[Path] = FILES) -> Path:
    out = tmp_path / "ranks"
    out.mkdir()
    for f in files:
        doc = json.load(gzip.open(f))
        change(doc)  # type: ignore[operator]
        (out / f.name.removesuffix(".gz")).write_text(json.dumps(doc))
    return out


def _without_step_events(doc: dict[str, Any]) -> None:
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]


def _merge_steps_2_and_3(doc: dict[str, Any]) -> None:
    """ProfilerStep#2 stretched over #3, which is dropped: one window holds two steps' actions."""
    two, three = (next(e for e in doc["traceEvents"] if e.get("name") == f"ProfilerStep#{n}") for n in (2, 3))
    two["dur"] = three["ts"] + three["dur"] - two["ts"]
    doc["traceEvents"].remove(three)


def _rank(doc: dict[str, Any]) -> int:
    return doc["distributedInfo"]["rank"]


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(traceEvents=[e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("PP:")]),
     "has no PP:<action> events"),
    (lambda d: [e.update(name="PP:0FOO1") for e in d["traceEvents"] if e.get("name") == "PP:0F1"],
     "the label 'PP:0FOO1' is not a pipeline action"),
    (_merge_steps_2_and_3, "appears twice in one step: call prof.step() once per training step"),
    (lambda d: _rank(d) == 1 and _without_step_events(d),
     "ranks/rank1.json none: the files come from different profiler setups; profile every rank alike"),
])
def test_traces_that_cannot_be_read_say_why_in_one_line(tmp_path: Path, predicted: Path, change: object,
                                                        says: str) -> None:
    folder = _rewrite(tmp_path, change)
    with pytest.raises(TraceError, match=says.replace("(", r"\(").replace(")", r"\)")) as err:
        load_trace(folder)
    assert "\n" not in str(err.value)
    res = invoke(app, "compare", predicted, folder)
    assert res.exit_code == 1 and says in " ".join(res.output.split()) and "Traceback" not in res.output


def test_a_run_profiled_without_a_schedule_is_split_into_steps_by_its_repeated_actions(predicted: Path) -> None:
    """no-schedule/: torch writes no ProfilerStep#N event when the profiler has no schedule=, though
    the loop calls prof.step(); each rank's actions repeat once per step, and that tells the steps apart."""
    docs = [json.load(gzip.open(f)) for f in NO_SCHEDULE_FILES]
    assert not any(str(e.get("name", "")).startswith("ProfilerStep") for d in docs for e in d["traceEvents"])
    measured = load_trace(NO_SCHEDULE)
    m = measured.meta
    assert m["profiled_steps"] == [0, 1] and len(m["step_times_ms"]) == 2
    assert (m["num_ranks"], m["chunks"], m["num_microbatches"], m["stage_to_rank"]) == (2, 2, 4, [0, 1, 0, 1])
    assert m["step_times_ms"][m["profiled_steps"].index(m["step"])] == min(m["step_times_ms"])  # median_low of 2
    compute = [(s.rank, str(s.action)) for s in measured.spans if s.action.kind in COMPUTE_KINDS]
    assert sorted(compute) == sorted((stage % 2, f"{stage}{k}{mb}") for stage in range(4) for k in "FB" for mb in range(4))
    assert m["memory_measured"] == "allocator" and {c.rank for c in measured.counters} == {0, 1}  # profile_memory=True
    for f, doc in zip(NO_SCHEDULE_FILES, docs):
        labels = {e["name"][3:] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("PP:")
                  and not e["name"].endswith(kineto.SKIPPED)}
        rank = kineto._read_rank(f)
        assert sorted(rank.spans) == [0, 1]
        for k in (0, 1):
            texts = Counter(str(a) for a, _, _ in rank.spans[k] if a.kind != Kind.OPT)
            assert set(texts) == labels and set(texts.values()) == {1}  # every action of the rank, once per step
        # step 1 starts after step 0 ends; each step's optimizer step follows its last action
        assert max(t1 for _, _, t1 in rank.spans[0]) < min(t0 for _, t0, _ in rank.spans[1])
        for k in (0, 1):
            [opt] = [x for x in rank.spans[k] if x[0].kind == Kind.OPT]
            assert opt[1] > max(t0 for a, t0, _ in rank.spans[k] if a.kind != Kind.OPT)
    res = invoke(app, "compare", predicted, NO_SCHEDULE, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["matched"] >= 32 and doc["measured_schedule"] == "kineto"


def test_without_step_events_the_repetition_finds_the_steps_profilerstep_marks(tmp_path: Path) -> None:
    """The scheduled fixture with its ProfilerStep#N events taken out splits into the same three steps."""
    marked = load_trace(KINETO)
    told = load_trace(_rewrite(tmp_path, _without_step_events))
    assert told.meta["profiled_steps"] == [0, 1, 2]  # torch's steps 2, 3, 4, counted from the first profiled one
    assert told.meta["step_times_ms"] == marked.meta["step_times_ms"]
    assert told.spans == marked.spans


def _drop_second(name: str) -> Any:
    """A change dropping the second occurrence (step 1's) of the event ``name``."""
    def change(doc: dict[str, Any]) -> None:
        if _rank(doc) == 0:
            doc["traceEvents"].remove(sorted((e for e in doc["traceEvents"] if e.get("name") == name),
                                             key=lambda e: e["ts"])[1])
    return change


def _first_just_before_second(doc: dict[str, Any]) -> None:
    """Rank 0's first 0B1 moved to just before its second: as many occurrences, out of their steps."""
    if _rank(doc) == 0:
        first, second = sorted((e for e in doc["traceEvents"] if e.get("name") == "PP:0B1"), key=lambda e: e["ts"])
        first["ts"] = second["ts"] - 1


def _one_step_on_rank1(doc: dict[str, Any]) -> None:
    """Rank 1's actions of step 1 gone: its file holds one step, rank 0's two."""
    if _rank(doc) == 1:
        seen: set[str] = set()
        kept = []
        for e in sorted(doc["traceEvents"], key=lambda e: e.get("ts", 0)):
            if str(e.get("name", "")).startswith("PP:"):
                if e["name"] in seen:
                    continue
                seen.add(e["name"])
            kept.append(e)
        doc["traceEvents"] = kept


@pytest.mark.parametrize("change, says", [
    (_drop_second("PP:0F1"), "rank0.json has no ProfilerStep#N events and its actions do not repeat evenly step after "
                             "step (PP:0F1 occurs 1x, "),
    (_first_just_before_second, "rank0.json has no ProfilerStep#N events and its actions do not repeat step after step "
                                "(step 0's PP:0B1 starts after step 1's first action)"),
    (_one_step_on_rank1, "repeat their actions a different number of times ({'rank0.json': 2, 'rank1.json': 1}): "
                         "profile the same training steps on every rank"),
])
def test_schedule_less_traces_whose_actions_do_not_repeat_say_so_in_one_line(tmp_path: Path, predicted: Path,
                                                                             change: object, says: str) -> None:
    folder = _rewrite(tmp_path, change, NO_SCHEDULE_FILES)
    with pytest.raises(TraceError) as err:
        load_trace(folder)
    assert says in str(err.value) and "\n" not in str(err.value)
    res = invoke(app, "compare", predicted, folder)
    assert res.exit_code == 1 and says in " ".join(res.output.split()) and "Traceback" not in res.output


@cache
def _no_schedule_docs() -> tuple[dict[str, Any], ...]:
    return tuple(json.load(gzip.open(f)) for f in NO_SCHEDULE_FILES)


def _actions_of(r: int) -> list[int]:
    """Indices of rank ``r``'s events that are actions ppsim reads (not FSDP's UNSHARD / RESHARD)."""
    events = _no_schedule_docs()[r]["traceEvents"]
    return [i for i, e in enumerate(events) if str(e.get("name", "")).startswith("PP:")
            and not e["name"].endswith(kineto.SKIPPED)]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 1).flatmap(lambda r: st.tuples(st.just(r), st.sampled_from(_actions_of(r)))))
def test_any_one_action_missing_from_a_schedule_less_rank_is_named(dropped: tuple[int, int]) -> None:
    r, i = dropped
    docs = _no_schedule_docs()
    name = docs[r]["traceEvents"][i]["name"]
    with tempfile.TemporaryDirectory() as tmp:
        for f, doc in zip(NO_SCHEDULE_FILES, docs):
            if doc is docs[r]:
                events = doc["traceEvents"][:i] + doc["traceEvents"][i + 1:]
                (Path(tmp) / f.name.removesuffix(".gz")).write_text(json.dumps({**doc, "traceEvents": events}))
            else:
                shutil.copy(f, tmp)
        with pytest.raises(TraceError) as err:
            load_trace(Path(tmp))
    message = str(err.value)
    assert f"rank{r}.json has no ProfilerStep#N events" in message and f"({name} occurs 1x, " in message
    assert "\n" not in message


def test_a_missing_rank_is_named(predicted: Path) -> None:
    with pytest.raises(TraceError, match="do not hold every stage once"):
        load_trace(FILES[:1])
    res = invoke(app, "compare", predicted, FILES[0])
    assert res.exit_code == 1 and "give the file of every rank" in " ".join(res.output.split())


@pytest.mark.slow  # starts two torch processes
@pytest.mark.parametrize("options, steps", [([], 3), (["--no-schedule"], 2)])
def test_a_fresh_profile_of_a_plain_torch_job_is_read(tmp_path: Path, predicted: Path, options: list[str],
                                                      steps: int) -> None:
    """The fixture's own script, run now: what torch writes today is still what ppsim reads."""
    pytest.importorskip("torch")
    shutil.copy(KINETO / "make_fixture.py", tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(tmp_path / "make_fixture.py"), str(tmp_path / "out"), *options]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          start_new_session=True)  # torchrun signals its process group when it ends
    assert done.returncode == 0, done.stderr[-3000:]
    trace = load_trace(tmp_path / "out")
    assert trace.meta["num_ranks"] == 2 and len(trace.meta["profiled_steps"]) == steps
    res = invoke(app, "compare", predicted, tmp_path / "out")
    assert res.exit_code == 0, res.output
