"""`ppsim tune`: the exact memory check, the ranking against exhaustive simulation, executors that
agree, explanations from the numbers, and the command's outputs and errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import GPT_YAML, SCENARIOS, SPACE, small_base, small_search
from ppsim.cli import app
from ppsim.costs import build_workload
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.prediction import build, predict
from ppsim.search.tune.evaluate import Evaluation, evaluate
from ppsim.search.tune.executors import local, run_local, run_ray
from ppsim.search.tune.prune import search
from ppsim.search.tune.rank import DRAWN, EXPLAINED, explain, pareto_front, ranking
from ppsim.search.tune.space import Candidate, SearchSpace, apply, candidates
from ppsim.sim.allocation import peak_memory_bytes
from ppsim.trace.metrics import summarize

GPT = GPT_YAML
runner = CliRunner()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]), p=st.sampled_from([2, 4, 8]),
       m=st.sampled_from([4, 8, 16]), recompute=st.sampled_from(["none", "selective", "full"]),
       zero=st.sampled_from([0, 1]))
def test_the_memory_check_is_the_simulated_peak(schedule: str, p: int, m: int, recompute: str, zero: int) -> None:
    data = load(GPT).model_dump(exclude_none=True)
    data["pipeline"].update(stages=p, microbatches=m, schedule=schedule, chunks=2 if schedule == "interleaved-1f1b" else 1)
    data["training"].update(recompute=recompute, zero_stage=zero)
    data["training"].pop("global_batch", None)
    assume(not (schedule == "interleaved-1f1b" and m % p))
    s = parse_scenario(data)
    w = build_workload(s)
    exact = peak_memory_bytes(build(s, workload=w).plan, w.costs)
    simulated = [st.peak_memory_bytes for st in summarize(predict(s).trace).per_rank]
    assert exact == pytest.approx(simulated, rel=1e-12)


def test_the_ranking_is_exhaustive_simulation_ranked() -> None:
    base, cands, evals = small_search()
    assert len(cands) > 100
    # every plan simulated, no pruning, then ranked by the same key
    exhaustive = []
    for c in cands:
        s = parse_scenario(apply(base, c))
        summary = summarize(predict(s).trace)
        exhaustive.append((c, summary))
    fitting = [(c, sm) for c, sm in exhaustive if sm.fits]
    fitting.sort(key=lambda x: (-x[1].throughput_samples_per_s, max(st.peak_memory_bytes for st in x[1].per_rank), x[0]))
    ranked = ranking(evals)
    assert [e.candidate for e in ranked] == [c for c, _ in fitting]
    for e, (_, sm) in zip(ranked, fitting):
        assert e.throughput_samples_per_s == pytest.approx(sm.throughput_samples_per_s, rel=1e-12)
    # what was pruned is exactly what does not fit
    assert {e.candidate for e in evals if not e.fits} == {c for c, sm in exhaustive if not sm.fits}


def test_plans_that_do_not_fit_are_never_recommended() -> None:
    _, _, evals = small_search()
    assert any(not e.fits for e in evals)  # the case does prune
    for e in ranking(evals):
        assert e.fits and e.peak_memory_bytes <= e.memory_capacity_bytes


def test_local_processes_give_the_serial_results() -> None:
    base, cands, evals = small_search()
    assert run_local(base, cands, 2) == evals


@pytest.mark.slow  # starts a Ray cluster
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is an optional extra: pip install 'ppsim[ray]'")
def test_a_ray_cluster_gives_the_local_results() -> None:
    base, cands, evals = small_search()
    assert run_ray(base, cands[:60], batch=16) == evals[:60]
    # the bounded search's tasks, sent as the cluster frees up, simulate what the serial search does
    from ppsim.search.tune.executors import ray_cluster

    with local(base, 1) as ex:
        serial = search(ex, cands, top=3, groups=EXPLAINED, window=4)
    with ray_cluster(base) as ex:
        assert search(ex, cands, top=3, groups=EXPLAINED, window=4) == serial


@pytest.mark.parametrize("top,groups,front", [(1, (), True), (3, EXPLAINED, True), (10, EXPLAINED + DRAWN, True),
                                              (1, (), False), (3, EXPLAINED, False)])
def test_the_bounded_search_reports_what_the_exhaustive_one_does(top: int, groups: tuple, front: bool) -> None:
    """Skipping the plans whose step-time bound cannot beat a reported one changes no reported
    figure: the top plans, the best of every group, the explanations and (where it is reported)
    the Pareto front."""
    base, cands, exhaustive = small_search()
    with local(base, 1) as ex:
        pruned = search(ex, cands, top=top, groups=groups, front=front)
    skipped = [e for e in pruned if e.skipped]
    assert skipped, "the bound skips something here"
    for e in pruned:  # the bound holds wherever both are known
        if e.simulated:
            assert e.step_time_bound_ms <= e.step_time_ms + 1e-9
    def plans(evals: list) -> list:
        return [(e.candidate, e.step_time_ms, e.peak_memory_bytes) for e in evals]

    assert plans(ranking(pruned))[:top] == plans(ranking(exhaustive))[:top]
    if front:
        assert plans(pareto_front(pruned)) == plans(pareto_front(exhaustive))
    for group in groups:
        for value in {group(e.candidate) for e in exhaustive} - {None}:
            best = plans([e for e in ranking(exhaustive) if group(e.candidate) == value][:1])
            assert plans([e for e in ranking(pruned) if group(e.candidate) == value][:1]) == best
    if groups:
        assert explain(pruned, ranking(pruned)[0]) == explain(exhaustive, ranking(exhaustive)[0])
    fits = {e.candidate for e in exhaustive if e.fits}
    assert {e.candidate for e in pruned if e.fits} == fits


class _Scrambled:
    """A serial executor whose tasks finish in a seeded random order: what workers of uneven speed do."""

    def __init__(self, base: dict[str, Any], seed: int) -> None:
        import random

        from ppsim.search.tune.executors import _Serial

        self.serial, self.rng, self.done = _Serial(base), random.Random(seed), []

    def map(self, work: Any, cands: Any, progress: Any = None) -> list[Evaluation]:
        return self.serial.map(work, cands, progress)

    def submit(self, work: Any, items: Any) -> int:
        n = self.serial.submit(work, items)
        self.done.append(self.serial.next_done())
        return n

    def next_done(self) -> tuple[int, list[Evaluation]]:
        return self.done.pop(self.rng.randrange(len(self.done)))


@pytest.mark.parametrize("window", [1, 4])
def test_the_search_does_not_depend_on_when_workers_finish(window: int) -> None:
    """Tasks go out as workers free up, yet the same plans are simulated and skipped however the
    tasks' times fall: the frontier takes the results in the order they were sent."""
    base, cands, _ = small_search()
    with local(base, 1) as ex:
        serial = search(ex, cands, top=3, groups=EXPLAINED, window=window)
    for seed in (1, 2):
        assert search(_Scrambled(base, seed), cands, top=3, groups=EXPLAINED, window=window) == serial
    with local(base, 2) as ex:
        assert search(ex, cands, top=3, groups=EXPLAINED, window=window) == serial


def test_leaving_the_front_out_simulates_fewer_plans() -> None:
    """Without the Pareto front (the table alone does not show it) the slow plans that need little
    memory are not simulated for it; with it they are, and the front is the exhaustive search's."""
    base, cands, _ = small_search()
    with local(base, 1) as ex:
        with_front = search(ex, cands, top=3, groups=EXPLAINED, front=True)
        without = search(ex, cands, top=3, groups=EXPLAINED, front=False)
    simulated = {e.candidate for e in without if e.simulated}
    assert len(simulated) < sum(e.simulated for e in with_front)
    # what only the front needed: its plans that no group or the top asked for
    assert {e.candidate for e in pareto_front(with_front)} - simulated


def test_explanations_come_from_the_numbers() -> None:
    _, _, evals = small_search()
    best = ranking(evals)[0]
    lines = explain(evals, best)
    by_what = {line.split(":")[0]: line for line in lines}
    full = by_what["recompute=full"]
    # full recomputation runs every block's forward again: about a third more compute
    extra = float(full.split(" compute")[0].rsplit("; ", 1)[1].rstrip("%")) / 100
    assert 0.2 < extra < 0.4
    assert any(w.startswith("p=") for w in by_what)
    front = pareto_front(evals)
    assert front[0].peak_memory_bytes == min(e.peak_memory_bytes for e in ranking(evals))
    assert front[-1].throughput_samples_per_s == best.throughput_samples_per_s


def test_the_space_respects_the_model_and_the_batch() -> None:
    s = parse_scenario(small_base())
    for c in candidates(s, SPACE):
        assert c.devices == 8 and c.micro_batch * c.microbatches * c.data_parallel == 16
        assert s.model.heads % c.tensor_parallel == 0 and c.stages <= s.model.layers
        if c.schedule == "interleaved-1f1b":
            assert c.microbatches % c.stages == 0 and c.chunks > 1
        assert not (c.zero_stage and c.data_parallel == 1)
    with pytest.raises(PpsimError, match="--gpus: no plan splits global_batch 16 over 7 devices"):
        candidates(s, SearchSpace(gpus=7, max_stages=4))  # 7 replicas cannot split 16 sequences


def test_an_evaluation_that_cannot_run_says_why() -> None:
    base, cands, _ = small_search()
    c = cands[0]
    bad = dict(base, hardware={"device": "no-such-gpu"})
    ev = evaluate(bad, c)
    assert ev.error and "no-such-gpu" in ev.error and not ev.fits


# ----- the command ---------------------------------------------------------------------------------
def test_json_lists_the_top_plans_and_the_counts(small_yaml: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["tune", str(small_yaml), "--gpus", "8", "--micro-batch-sizes", "1,2", "--schedules",
                              "1f1b,zb-h1", "--top", "3", "--json", "--jobs", "1", "--html", str(tmp_path / "t.html")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["considered"] == doc["pruned_by_memory"] + doc["simulated"] + doc["skipped_by_bound"] + doc["invalid"]
    assert doc["fit"] == doc["skipped_by_bound"] + doc["simulated"]
    assert len(doc["top"]) == 3 and doc["why"]
    tops = [t["throughput_samples_per_s"] for t in doc["top"]]
    assert tops == sorted(tops, reverse=True)
    assert all(t["fits"] for t in doc["top"]) and doc["pareto_front"]
    assert (tmp_path / "t.html").read_text().startswith("<!-- ppsim -->")


def test_a_library_search_without_the_front_gives_none(small_yaml: Path) -> None:
    """A search told no output shows the Pareto front does not claim one: its JSON gives null, its
    page draws no front line."""
    from ppsim.search.tune.report import figure
    from ppsim.search.tune.run import TuneRequest, search_plans

    s = load(small_yaml)
    request = TuneRequest(gpus=8, micro_batches=(1,), schedules=("1f1b", "zb-h1"), exact=3, jobs=1, front=False)
    result = search_plans(s, request)
    assert result.to_json_dict(3)["pareto_front"] is None
    assert "Pareto front" not in {trace.name for trace in figure(result).data}
    full = search_plans(s, TuneRequest(gpus=8, micro_batches=(1,), schedules=("1f1b", "zb-h1"), exact=3, jobs=1))
    assert full.to_json_dict(3)["pareto_front"] and "Pareto front" in {trace.name for trace in figure(full).data}


def test_ctrl_c_ends_the_search_and_its_workers_quietly() -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while the workers bound plans: exit 130, no
    worker's traceback, no process left."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    search_cmd = [sys.executable, "-m", "ppsim.cli", "tune", str(ROOT / "scenarios" / "deepseek-v3.yaml"), "--jobs", "2"]
    child = subprocess.Popen(search_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # signal once its pool's workers are bounding plans (the whole search takes most of a minute; a
    # fixed sleep signalled too early or too late on a loaded machine)
    children = Path(f"/proc/{child.pid}/task/{child.pid}/children")
    deadline = time.monotonic() + 60
    while child.poll() is None and time.monotonic() < deadline and len(children.read_text().split()) < 2:
        time.sleep(0.2)
    time.sleep(1)
    if child.poll() is not None:
        pytest.fail(f"the search ended (exit {child.returncode}) before the signal: {child.communicate()[1].decode()}")
    os.killpg(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 130, err
    assert b"Traceback" not in err and b"ForkPoolWorker" not in err, err.decode()
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # nothing of its session is left
        os.killpg(child.pid, 0)


def test_the_table_names_the_best_and_why(small_yaml: Path) -> None:
    res = runner.invoke(app, ["tune", str(small_yaml), "--gpus", "8", "--micro-batch-sizes", "1", "--schedules",
                              "1f1b", "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert "best:" in res.stdout and "pruned by memory" in res.stdout and "recompute=full:" in res.stdout


@pytest.mark.parametrize("args, code, says", [
    (["--gpus", "7", "--max-stages", "4"], 1, "no plan splits global_batch"),
    (["--gpus", "0"], 2, "--gpus"),
    (["--gpus", "1", "--micro-batch-sizes", "1"], 1, "none of the"),  # a 13B model on one device
    (["--executor", "mpi"], 2, "--executor"),
    (["--schedules", "inference"], 2, "--schedules"),
    (["--micro-batch-sizes", "1,x"], 2, "--micro-batch-sizes"),
])
def test_bad_input_is_one_clear_line(small_yaml: Path, args: list[str], code: int, says: str) -> None:
    res = runner.invoke(app, ["tune", str(small_yaml), "--jobs", "1", *args])
    assert res.exit_code == code, res.output
    assert says in " ".join(res.output.split()) and "Traceback" not in res.output


def test_a_file_the_user_wrote_is_not_overwritten(small_yaml: Path, tmp_path: Path) -> None:
    mine = tmp_path / "page.html"
    mine.write_text("mine")
    res = runner.invoke(app, ["tune", str(small_yaml), "--gpus", "8", "--html", str(mine)])
    assert res.exit_code == 1 and mine.read_text() == "mine"


def test_the_page_gives_each_schedule_one_colour_in_both_plots() -> None:
    from ppsim.search.tune.report import TuneResult, figure

    _, _, evals = small_search()
    fig = figure(TuneResult("small", 8, evals, 1.0, 1, "local"))
    lines = [tr for tr in fig.data if tr.mode == "lines+markers" and tr.name != "Pareto front"]
    colours: dict[str, set] = {}
    for tr in lines:
        colours.setdefault(tr.name, set()).add(tr.line.color)
    assert colours and all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)


# ----- from the answer to the next command (issue 20) ---------------------------------------------
TUNE_ARGS = ["--gpus", "8", "--micro-batch-sizes", "1", "--schedules", "1f1b,zb-h1", "--jobs", "1"]


def test_written_plans_run_and_predict_what_tune_ranked(small_yaml: Path, tmp_path: Path) -> None:
    best, folder = tmp_path / "best.yaml", tmp_path / "plans"
    res = runner.invoke(app, ["tune", str(small_yaml), *TUNE_ARGS, "--json", "--write", str(best),
                              "--write-top", "3", str(folder)])
    assert res.exit_code == 0, res.output
    top = json.loads(res.stdout)["top"]
    files = [best] + [folder / f"small-tuned-{k}.yaml" for k in (1, 2, 3)]
    for path, row in zip(files, [top[0], *top[:3]]):
        header = path.read_text().splitlines()[:6]
        assert header[0].startswith("# written by ppsim tune: plan ")
        assert header[1].startswith("# search: ")
        assert header[2] == f"# command: ppsim tune {small_yaml} --gpus 8 --schedules 1f1b,zb-h1 --micro-batch-sizes 1"
        assert header[3] == f"# plan: {row['plan']}"
        assert f"step {row['step_time_ms']:,.3f} ms" in header[4]
        run = runner.invoke(app, ["run", str(path), "--json"])
        assert run.exit_code == 0, run.output
        doc = json.loads(run.stdout)
        assert doc["step_time_ms"] == pytest.approx(row["step_time_ms"], rel=1e-12)
        assert (doc["num_ranks"], doc["data_parallel"], doc["microbatches"]) == (
            row["candidate"]["stages"], row["candidate"]["data_parallel"], row["candidate"]["microbatches"])
        assert f"wrote {path}" in " ".join(res.stderr.split())


def test_tune_never_overwrites_a_file_the_user_wrote(small_yaml: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: my own\n")
    res = runner.invoke(app, ["tune", str(small_yaml), *TUNE_ARGS, "--write", str(mine)])
    assert res.exit_code == 1 and mine.read_text() == "name: my own\n"
    assert res.stderr.count("\n") == 1 and "--write" in res.stderr and "--force" in res.stderr
    res = runner.invoke(app, ["tune", str(small_yaml), *TUNE_ARGS, "--write", str(mine), "--force"])
    assert res.exit_code == 0 and mine.read_text().startswith("# written by ppsim tune")
    again = runner.invoke(app, ["tune", str(small_yaml), *TUNE_ARGS, "--write", str(mine)])  # its own file
    assert again.exit_code == 0, again.output
    folder = tmp_path / "top"
    folder.mkdir()
    (folder / "small-tuned-2.yaml").write_text("mine")
    res = runner.invoke(app, ["tune", str(small_yaml), *TUNE_ARGS, "--write-top", "2", str(folder)])
    assert res.exit_code == 1 and "--write-top" in res.stderr
    assert not (folder / "small-tuned-1.yaml").exists()  # refused before any work
    assert runner.invoke(app, ["tune", str(small_yaml), "--write", str(small_yaml)]).exit_code == 1  # an input


def test_plans_within_noise_are_said_to_be() -> None:
    from dataclasses import replace

    from ppsim.search.tune.report import TuneResult, noise_note, print_result, within_noise

    _, _, evals = small_search()
    ranked = ranking(evals)
    best = ranked[0].throughput_samples_per_s
    close = [replace(e, throughput_samples_per_s=best * (1 - 0.002 * i)) for i, e in enumerate(ranked[:3])]
    spread = close + [replace(e, throughput_samples_per_s=best * 0.9) for e in ranked[3:]]
    assert within_noise(spread) == 3 and within_noise(ranked[:1]) == 1
    assert noise_note(spread) == ("the top 3 plans are within 1% of each other: below what the model can tell apart; "
                                  "choose among them by memory headroom or simplicity, or measure them")
    assert noise_note(ranked[:1]) is None
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    print_result(TuneResult("small", 8, spread, 1.0, 1, "local"), 5, Console(file=out, width=200))
    assert "the top 3 plans are within 1% of each other" in out.getvalue()
    doc = TuneResult("small", 8, spread, 1.0, 1, "local").to_json_dict(5)
    assert doc["within_noise"] == 3


def test_a_search_runs_from_the_library_as_the_command_runs_it() -> None:
    """ppsim.search.tune.run.search_plans: what `ppsim tune` calls, with progress heard by callbacks."""
    from ppsim.search.tune.run import TuneRequest, search_plans

    s = parse_scenario(small_base())
    units: list[int] = []
    done: list[int] = []
    request = TuneRequest(gpus=8, micro_batches=(1,), schedules=("1f1b", "zb-h1"), exact=3, jobs=1)
    result = search_plans(s, request, on_start=units.append, on_advance=done.append)
    assert len(units) == 1 and sum(done) == units[0] == 2 * result.counts().considered
    assert result.ranked and result.counts().simulated >= 3
    tiny = s.model_copy(update={"hardware": s.hardware.model_copy(update={"device": "cpu"})})
    with pytest.raises(PpsimError, match="none of the .* plans considered fits in memory on 8 devices"):
        search_plans(tiny, request)


def test_tune_searches_expert_parallelism_for_a_mixture_of_experts() -> None:
    """A mixture of 8 experts on 8 devices: every plan's EP is a power of two dividing the experts
    and, with its tensor parallelism, the stage's devices; each candidate is a valid scenario
    (sequence parallelism turned on beside tensor parallelism, as Megatron needs); the best of
    each other EP is explained against the winner."""
    from conftest import SCENARIOS

    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    data["model"]["layers"] = 4
    data.pop("cluster")
    data.pop("expert_tensor_parallel", None)  # the search chooses it
    data["training"]["global_batch"] = 16
    data["pipeline"].update(stages=1, chunks=1, schedule="1f1b")
    data["data_parallel"] = 8
    s = parse_scenario(data)
    cands = candidates(s, SearchSpace(gpus=8, max_stages=2, schedules=("1f1b",), recompute=("none",), zero=(1,)))
    eps = {c.expert_parallel for c in cands}
    assert eps == {1, 2, 4, 8}
    # each expert whole (ETP 1) or split as the tensor parallelism (Megatron's default)
    assert {(c.tensor_parallel, c.expert_tensor) for c in cands} >= {(2, 1), (2, 2), (4, 1), (4, 4), (1, 1)}
    for c in cands:
        stage = c.tensor_parallel * c.data_parallel
        assert c.expert_tensor in (1, c.tensor_parallel)
        assert stage % (c.expert_parallel * c.expert_tensor) == 0 and 8 % c.expert_parallel == 0
        built = parse_scenario(apply(s.model_dump(exclude_none=True), c))
        assert (built.expert_parallel, built.expert_tensor) == (c.expert_parallel, c.expert_tensor)
        assert built.training.sequence_parallel or c.tensor_parallel == 1 or c.expert_parallel == 1
    evals = [evaluate(s.model_dump(exclude_none=True), c) for c in cands[:40]]
    best = ranking(evals)[0]
    lines = explain(evals, best)
    assert any(line.startswith("ep=") for line in lines)


def _small_mixtral(data_parallel: int, **pipeline: Any) -> tuple[Any, dict[str, Any]]:
    """mixtral-8x7b.yaml cut to 8 layers and a batch of 64, on no cluster, with ``pipeline``: a
    MoE search small enough to bound every plan of (the scenario, its mapping)."""
    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    data["model"]["layers"] = 8
    data.pop("expert_tensor_parallel")
    data.pop("cluster")
    data["training"]["global_batch"] = 64
    data["pipeline"].update(pipeline)
    data["data_parallel"] = data_parallel
    s = parse_scenario(data)
    return s, s.model_dump(exclude_none=True)


def test_a_whole_expert_plan_needs_at_least_the_memory_of_its_split_twin() -> None:
    """What the search's bounding relies on to skip ETP 1 plans whose ETP t twin does not fit: over
    every t > 1 plan of a small MoE space, ETP 1's peak memory is at least ETP t's; and the search
    bounds the same plans as fitting as bounding each one would."""
    from dataclasses import replace

    from ppsim.search.tune.evaluate import bound
    from ppsim.search.tune.executors import local
    from ppsim.search.tune.prune import _bounded

    s, base = _small_mixtral(16, stages=1, chunks=1, schedule="1f1b")
    cands = candidates(s, SearchSpace(gpus=16, max_stages=2, schedules=("1f1b",), recompute=("none", "full"),
                                      zero=(0, 1), micro_batches=(1, 4)))
    known = set(cands)
    whole = [c for c in cands if c.tensor_parallel > 1 and c.expert_tensor == 1
             and replace(c, expert_tensor=c.tensor_parallel) in known]  # a twin the search also considers
    assert len(whole) > 20
    for c in whole:
        a, b = bound(base, c), bound(base, replace(c, expert_tensor=c.tensor_parallel))
        assert a.peak_memory_bytes is not None and b.peak_memory_bytes is not None
        assert a.peak_memory_bytes >= b.peak_memory_bytes * (1 - 1e-12)
    with local(base, 1) as ex:
        searched = _bounded(ex, cands, None)
    assert [e.fits for e in searched] == [bound(base, c).fits for c in cands]


def test_a_scenario_that_sets_its_expert_tensor_parallelism_keeps_it() -> None:
    from conftest import SCENARIOS

    data = load(SCENARIOS / "mixtral-8x7b.yaml").model_dump(exclude_none=True)
    data.pop("cluster")
    data["expert_tensor_parallel"] = 1
    s = parse_scenario(data)
    cands = candidates(s, SearchSpace(gpus=64, max_stages=4, schedules=("1f1b",), recompute=("none",), zero=(1,)))
    assert {c.expert_tensor for c in cands} == {1} and {c.tensor_parallel for c in cands} > {1}


def test_the_expert_parallel_option_lays_the_experts_out() -> None:
    from conftest import SCENARIOS

    res = runner.invoke(app, ["run", str(SCENARIOS / "mixtral-8x7b.yaml"), "--expert-parallel", "4", "--json"])
    assert res.exit_code == 0, res.output
    bad = runner.invoke(app, ["run", str(SCENARIOS / "mixtral-8x7b.yaml"), "--expert-parallel", "3"])
    assert bad.exit_code == 1 and "expert_parallel" in bad.output and "Traceback" not in bad.output
    whole = runner.invoke(app, ["run", str(SCENARIOS / "mixtral-8x7b.yaml"), "--tensor-parallel", "2",
                                "--data-parallel", "8", "--expert-parallel", "4", "--expert-tensor-parallel", "1", "--json"])
    assert whole.exit_code == 0, whole.output
    odd = runner.invoke(app, ["run", str(SCENARIOS / "mixtral-8x7b.yaml"), "--expert-tensor-parallel", "3"])
    assert odd.exit_code == 1 and "expert_tensor_parallel" in odd.output and "Traceback" not in odd.output


def test_the_ordered_bound_is_never_above_the_simulated_step() -> None:
    """The bound the search takes before it simulates a plan (each rank's compute in its own
    order, messages free) is a lower bound: over every plan of the small space that fits, V-shaped,
    overlapped and zero-bubble ones among them, and a mixture of experts on a cluster's network;
    and a plan whose bound is over the threshold is bounded, not simulated."""
    from ppsim.search.tune.evaluate import Gated, bound, evaluate_gated
    from ppsim.sim.bound import ordered_bound_ms

    base, cands, evals = small_search()
    checked = 0
    for c, e in zip(cands, evals, strict=True):
        if not e.ranked:
            continue
        gated = evaluate_gated(base, Gated(c, float("inf")))
        assert gated.simulated and gated.step_time_ms == e.step_time_ms
        s = parse_scenario(apply(base, c))
        built = build(s)
        ordered = ordered_bound_ms(built.plan, built.workload.costs, data_parallel=s.data_parallel,
                                   clip=s.training.grad_clip > 0)
        assert bound(base, c).step_time_bound_ms <= gated.step_time_bound_ms <= e.step_time_ms * (1 + 1e-9)  # type: ignore[operator]
        assert ordered <= e.step_time_ms * (1 + 1e-9)  # type: ignore[operator]
        checked += 1
    assert checked > 50
    moe = load(SCENARIOS / "mixtral-8x7b.yaml")
    moe_base = moe.model_dump(exclude_none=True)
    ranked = 0
    for c in candidates(moe, SearchSpace(gpus=64, schedules=("dualpipev", "combined-1f1b", "v-min", "1f1b")))[::37]:
        gated = evaluate_gated(moe_base, Gated(c, float("inf")))
        if gated.ranked:
            assert gated.step_time_bound_ms <= gated.step_time_ms * (1 + 1e-9)  # type: ignore[operator]
            skipped = evaluate_gated(moe_base, Gated(c, gated.step_time_bound_ms * 0.99))  # type: ignore[operator]
            assert skipped.skipped and skipped.step_time_ms is None
            ranked += 1
    assert ranked >= 5


def test_a_plan_of_two_copies_needs_at_least_the_memory_of_its_one_copy_twin() -> None:
    """What the search's bounding relies on to skip DualPipe plans whose DualPipeV twin does not
    fit: over a small MoE space, DualPipe's peak memory is at least DualPipeV's on the same plan;
    and the search, which chains this twin with the ETP one, bounds the same plans as fitting as
    bounding each one would."""
    from dataclasses import replace

    from ppsim.search.tune.evaluate import bound
    from ppsim.search.tune.executors import local
    from ppsim.search.tune.prune import _bounded

    s, base = _small_mixtral(8, stages=2, chunks=2, schedule="dualpipe")
    cands = candidates(s, SearchSpace(gpus=16, max_stages=4, schedules=("dualpipe", "dualpipev"),
                                      recompute=("none", "full"), zero=(0, 1), micro_batches=(1, 2)))
    known = set(cands)
    two = [c for c in cands if c.schedule == "dualpipe" and replace(c, schedule="dualpipev") in known]
    assert len(two) > 20
    for c in two:
        a, b = bound(base, c), bound(base, replace(c, schedule="dualpipev"))
        assert a.peak_memory_bytes is not None and b.peak_memory_bytes is not None
        assert a.peak_memory_bytes >= b.peak_memory_bytes * (1 - 1e-12), c
    with local(base, 1) as ex:
        searched = _bounded(ex, cands, None)
    assert [e.fits for e in searched] == [bound(base, c).fits for c in cands]
    assert any(e.fits for e in searched) and not all(e.fits for e in searched)


def test_every_lighter_twin_the_search_skips_by_holds_no_more_memory() -> None:
    """Each rule of ``_lighter_twin`` over the small dense search (ZeRO-1 twins of ZeRO-0 plans):
    the plan needs at least its twin's peak memory on the same partition, and the search, skipping
    a plan whose twin does not fit, finds the same plans fit as bounding every one would."""
    from ppsim.search.tune.evaluate import bound
    from ppsim.search.tune.prune import _bounded, _lighter_twin

    base, cands, evaluated = small_search()
    index = {c: i for i, c in enumerate(cands)}
    twins = {i: j for i, c in enumerate(cands) if (j := _lighter_twin(c, index)) is not None}
    assert len(twins) > 20 and all(cands[i].zero_stage == 0 and cands[j].zero_stage == 1 for i, j in twins.items())
    for i, j in twins.items():
        heavy, light = evaluated[i], evaluated[j]
        assert heavy.peak_memory_bytes >= light.peak_memory_bytes * (1 - 1e-12)
        partitions = [build(parse_scenario(apply(base, cands[k]))).workload.partition for k in (i, j)]
        assert partitions[0] == partitions[1]
    with local(base, 1) as ex:
        searched = _bounded(ex, cands, None)
    assert [e.fits for e in searched] == [bound(base, c).fits for c in cands]


def test_the_search_starts_from_the_scenarios_own_plan() -> None:
    """The user's plan, as ppsim run predicts it, beside the best: how much faster and what differs."""
    from ppsim.search.tune.run import TuneRequest, search_plans
    from ppsim.trace.metrics import summarize

    s = parse_scenario(small_base())
    result = search_plans(s, TuneRequest(gpus=s.devices, schedules=("1f1b", "zb-h1"), micro_batches=(1, 2), jobs=1))
    own = result.own
    assert own is not None and own.fits and own.simulated
    assert own.step_time_ms == summarize(predict(s).trace).step_time_ms
    assert (own.candidate.stages, own.candidate.schedule) == (s.pipeline.stages, s.pipeline.schedule)
    doc = result.to_json_dict(3)
    best = result.ranked[0]
    ratio = best.throughput_samples_per_s / own.throughput_samples_per_s
    assert doc["own"]["step_time_ms"] == own.step_time_ms
    assert doc["versus_own"].startswith(f"yours ({own.candidate.label()}): ") and f"the best is {ratio:.2f}x" in doc["versus_own"]
    elsewhere = search_plans(s, TuneRequest(gpus=2 * s.devices, schedules=("1f1b",), micro_batches=(1,), jobs=1))
    assert elsewhere.own is None  # not the scenario's devices: its plan is not one of the search's


def test_a_step_ratio_is_its_compute_times_its_bubble() -> None:
    """On the same devices a step is compute / (devices x (1 - bubble)), so the two factors the why
    lines give multiply to the ratio of the steps exactly."""
    from ppsim.search.tune.rank import step_factors

    _, _, evals = small_search()
    ranked = ranking(evals)
    best = ranked[0]
    for e in ranked:
        compute, bubble = step_factors(e, best)
        assert compute * bubble == pytest.approx(e.step_time_ms / best.step_time_ms, rel=1e-9)


def test_every_why_line_names_its_reason() -> None:
    _, _, evals = small_search()
    best = ranking(evals)[0]
    reasons = ("compute", "bubble", "the same compute and bubble within 1 %", "nothing fits", "no such plan")
    for line in explain(evals, best):
        assert any(r in line for r in reasons), line
        if " compute (" in line:  # a compute difference says what makes it
            assert line.split(" compute (")[1].split(")")[0], line


def test_dualpipes_gradient_sum_is_named_as_the_optimizer_steps() -> None:
    from ppsim.search.tune.rank import compute_causes, step_causes

    def ev(schedule: str, compute: float, optimizer: float, bubble: float) -> Evaluation:
        c = Candidate(4, 2, 1, 1, 16, schedule, 2, "none", 1)
        return Evaluation(c, fits=True, simulated=True, step_time_ms=1.0, throughput_samples_per_s=1.0,
                          bubble_fraction=bubble, device_compute_ms=compute, device_optimizer_ms=optimizer)

    dualpipe, dualpipev = ev("dualpipe", 1070.0, 90.0, 0.05), ev("dualpipev", 1000.0, 20.0, 0.08)
    assert compute_causes(dualpipe, dualpipev) == ["optimizer steps +350%: DualPipe sums the two copies' gradients"]
    lines = step_causes(dualpipe, dualpipev, "vs")
    assert lines[0].startswith("+7% compute (optimizer steps") and lines[1] == "bubble 5.0% vs 8.0%"
    # the same compute but in the passes: no optimizer cause, the stage counts equal: nothing named
    assert compute_causes(ev("zb-v", 1070.0, 20.0, 0.05), dualpipev) == []


def test_a_schedule_is_priced_with_its_own_memory_rules_after_another_of_its_placement() -> None:
    """V-Half (no torch class: its overlaps, were there any, layer by layer) and DualPipeV (torch's
    runtime: one pass after the other) share a placement; each candidate's peak is the one ppsim
    run finds for it, whichever the search priced first."""
    base = small_base()
    common = dict(stages=4, data_parallel=1, tensor_parallel=1, micro_batch=1, microbatches=8, chunks=2,
                  recompute="none", zero_stage=0)
    for first, second in (("v-half", "dualpipev"), ("dualpipev", "v-half")):
        evaluate(base, Candidate(schedule=first, **common))  # type: ignore[arg-type]
        ev = evaluate(base, Candidate(schedule=second, **common))  # type: ignore[arg-type]
        alone = parse_scenario(apply(base, Candidate(schedule=second, **common)))  # type: ignore[arg-type]
        peak = max(r.peak_memory_bytes or 0.0 for r in summarize(predict(alone).trace).per_rank)
        assert ev.peak_memory_bytes == pytest.approx(peak)


def test_one_stage_plans_include_the_schedules_that_overlap() -> None:
    """On one stage every schedule is gradient accumulation but combined 1F1B, which hides one
    micro-batch's all-to-alls under another's compute: the search tries it there (one chunk: a
    single stage has no virtual stages), and keeps the scenario's delayed weight grads only on the
    plans that still run it with experts over devices."""
    s, data = _small_mixtral(8, stages=1, chunks=1, schedule="combined-1f1b")
    data["training"]["delay_wgrad"] = True
    s = parse_scenario(data)
    cands = candidates(s, SearchSpace(gpus=8, max_stages=1, schedules=("1f1b", "interleaved-1f1b", "combined-1f1b",
                                                                        "dualpipev"),
                                      recompute=("none",), zero=(1,)))
    assert {(c.schedule, c.chunks) for c in cands} == {("1f1b", 1), ("combined-1f1b", 1)}
    for c in cands:
        built = parse_scenario(apply(data, c))  # each a valid scenario: the flag follows the schedule
        spread = built.expert_parallel * built.expert_tensor > 1
        assert built.training.delay_wgrad == (c.schedule == "combined-1f1b" and spread)
    steps = {(c.schedule, c.tensor_parallel, c.expert_parallel, c.micro_batch): evaluate(data, c).step_time_ms
             for c in cands if c.tensor_parallel == 1 and c.expert_parallel > 1}
    paired = [plan for (schedule, *plan), ms in steps.items()
              if schedule == "combined-1f1b" and ms and steps.get(("1f1b", *plan))]
    assert len(paired) >= 3
    for plan in paired:  # hiding the all-to-alls never costs time
        assert steps[("combined-1f1b", *plan)] < steps[("1f1b", *plan)]
