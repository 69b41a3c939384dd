"""Torch profiler traces of a plain torch.distributed.pipelining job (tests/data/kineto, made by
its make_fixture.py: ScheduleInterleaved1F1B, 2 ranks x 2 stages, 4 micro-batches, 3 profiled
steps) read as a measured Trace, compared with a prediction, and refused clearly when they cannot be."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT, invoke
from ppsim.cli import app
from ppsim.errors import TraceError
from ppsim.inputs.scenario import parse_scenario
from ppsim.plan import COMPUTE_KINDS, Kind
from ppsim.prediction import predict
from ppsim.trace import Trace
from ppsim.trace.load import load_trace, load_traces
from ppsim.trace.metrics import step_time_ms, summarize

KINETO = DATA / "kineto"
FILES = sorted(KINETO.glob("rank*.json.gz"))
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


def _rewrite(tmp_path: Path, change: object) -> Path:
    out = tmp_path / "ranks"
    out.mkdir()
    for f in FILES:
        doc = json.load(gzip.open(f))
        change(doc)  # type: ignore[operator]
        (out / f.name.removesuffix(".gz")).write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(traceEvents=[e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("PP:")]),
     "has no PP:<action> events"),
    (lambda d: [e.update(name="PP:0FOO1") for e in d["traceEvents"] if e.get("name") == "PP:0F1"],
     "the label 'PP:0FOO1' is not a pipeline action"),
    (lambda d: d.update(traceEvents=[e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]),
     "appears twice in one step: call prof.step() once per training step"),
])
def test_traces_that_cannot_be_read_say_why_in_one_line(tmp_path: Path, predicted: Path, change: object,
                                                        says: str) -> None:
    folder = _rewrite(tmp_path, change)
    with pytest.raises(TraceError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_trace(folder)
    res = invoke(app, "compare", predicted, folder)
    assert res.exit_code == 1 and says in " ".join(res.output.split()) and "Traceback" not in res.output


def test_a_missing_rank_is_named(predicted: Path) -> None:
    with pytest.raises(TraceError, match="do not hold every stage once"):
        load_trace(FILES[:1])
    res = invoke(app, "compare", predicted, FILES[0])
    assert res.exit_code == 1 and "give the file of every rank" in " ".join(res.output.split())


@pytest.mark.slow  # starts two torch processes
def test_a_fresh_profile_of_a_plain_torch_job_is_read(tmp_path: Path, predicted: Path) -> None:
    """The fixture's own script, run now: what torch writes today is still what ppsim reads."""
    pytest.importorskip("torch")
    shutil.copy(KINETO / "make_fixture.py", tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(tmp_path / "make_fixture.py"), str(tmp_path / "out")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          start_new_session=True)  # torchrun signals its process group when it ends
    assert done.returncode == 0, done.stderr[-3000:]
    trace = load_trace(tmp_path / "out")
    assert trace.meta["num_ranks"] == 2 and len(trace.meta["profiled_steps"]) == 3
    res = invoke(app, "compare", predicted, tmp_path / "out")
    assert res.exit_code == 0, res.output
