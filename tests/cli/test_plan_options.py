"""The plan options every command shares (issue 20): data and tensor parallelism, micro-batch size,
recompute and ZeRO next to the pipeline's, applied by one function; the chunks a schedule runs by
default; sweep's two modes; the TUI's stage keys saying how the GPU count changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml

from conftest import GPT_YAML, gpt, invoke
from ppexec.cli import app as ppexec_app
from ppsim.cli import app
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize
from ppsim.views.tui.state import TuiState

NEW = {"--data-parallel", "--tensor-parallel", "--micro-batch-size", "--recompute", "--zero-stage"}


def options_of(typer_app: typer.Typer, command: str) -> set[str]:
    return {o for p in typer.main.get_command(typer_app).commands[command].params for o in p.opts}


@pytest.mark.parametrize("typer_app, command", [(app, "run"), (app, "tui"), (app, "sweep"), (app, "compare-schedules"),
                                                (ppexec_app, "run"), (ppexec_app, "prepare"),
                                                (ppexec_app, "validate")])
def test_every_command_that_takes_a_plan_takes_the_same_options(typer_app: typer.Typer, command: str) -> None:
    assert NEW <= options_of(typer_app, command)


def run_json(*args: str | Path) -> dict:
    res = invoke(app, "run", *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def scenario_file(tmp_path: Path, **changes: dict) -> Path:
    """gpt.yaml with sections updated as given (top-level values replace, mappings update)."""
    data = yaml.safe_load(GPT_YAML.read_text())
    for key, value in changes.items():
        if isinstance(value, dict):
            data.setdefault(key, {}).update(value)
        else:
            data[key] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_options_predict_what_the_same_keys_in_the_file_predict(tmp_path: Path) -> None:
    given = run_json(GPT_YAML, "--stages", "4", "--data-parallel", "8", "--tensor-parallel", "2",
                     "--micro-batch-size", "2", "--recompute", "selective", "--zero-stage", "1")
    f = scenario_file(tmp_path, pipeline={"stages": 4}, data_parallel=8, tensor_parallel=2,
                      training={"micro_batch": 2, "recompute": "selective", "zero_stage": 1})
    written = run_json(f)
    assert given["step_time_ms"] == pytest.approx(written["step_time_ms"], rel=1e-12)
    assert given["ranks"][0]["peak_memory_bytes"] == written["ranks"][0]["peak_memory_bytes"]
    # the global batch (1024) holds: 1024 / (2 x 8) micro-batches
    assert given["microbatches"] == 64 and given["samples_per_step"] == 1024


def test_data_parallel_keeps_the_global_batch_and_says_when_it_changes() -> None:
    doc = run_json(GPT_YAML, "--data-parallel", "4")
    assert (doc["data_parallel"], doc["microbatches"], doc["samples_per_step"]) == (4, 256, 1024)
    res = invoke(app, "run", GPT_YAML, "--microbatches", "64", "--json")
    assert json.loads(res.stdout)["samples_per_step"] == 512
    assert "global batch 1024 -> 512" in res.stderr


@pytest.mark.parametrize("args, code, says", [
    (["--data-parallel", "3"], 1, "training.global_batch"),  # 1024 is not a multiple of 3
    (["--zero-stage", "2"], 1, "zero"),
    (["--recompute", "sometimes"], 2, "--recompute"),
    (["--tensor-parallel", "3"], 1, "tensor"),  # 40 heads
])
def test_bad_plan_options_are_one_clear_line(args: list[str], code: int, says: str) -> None:
    res = invoke(app, "run", GPT_YAML, *args)
    assert res.exit_code == code, res.output
    assert says in res.output and "Traceback" not in res.output


def test_an_interleaved_scenario_without_chunks_runs_its_default_and_says_so(tmp_path: Path) -> None:
    data = yaml.safe_load(GPT_YAML.read_text())
    data["pipeline"]["schedule"] = "interleaved-1f1b"
    del data["pipeline"]["chunks"]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    res = invoke(app, "run", f, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["chunks"] == 2
    assert "schedule interleaved-1f1b runs 2 chunks per rank (the scenario has none); --chunks chooses" in res.stderr
    assert json.loads(invoke(app, "run", f, "--chunks", "1", "--json").stdout)["chunks"] == 1  # stated: kept


# ----- sweep -------------------------------------------------------------------------------------
def predicted(**changes: object) -> float:
    """The step time of gpt.yaml with keys changed (``stages``, ``microbatches`` in the pipeline)."""
    data = gpt().model_dump(exclude_none=True)
    for k in ("stages", "microbatches"):
        if k in changes:
            data["pipeline"][k] = changes.pop(k)
    data["training"].update({k: changes.pop(k) for k in ("micro_batch", "global_batch") if k in changes})
    data.update(changes)
    return summarize(predict(parse_scenario(data)).trace).step_time_ms


def sweep_json(*args: str) -> dict:
    res = invoke(app, "sweep", GPT_YAML, *args, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_sweep_holds_the_gpus_and_the_global_batch_by_default() -> None:
    doc = sweep_json("--stages", "4,8")
    assert (doc["fixed"], doc["gpus"], doc["global_batch"]) == ("gpus", 64, 1024)
    points = doc["points"]
    # 64 GPUs: 4 stages x 16 replicas of 64 micro-batches, 8 x 8 of 128
    assert [(p["stages"], p["data_parallel"], p["micro_batch"], p["microbatches"]) for p in points] == [
        (4, 16, 1, 64), (8, 8, 1, 128)]
    assert all(p["gpus"] == 64 and p["global_batch"] == 1024 for p in points)
    assert points[0]["step_time_ms"] == pytest.approx(predicted(stages=4, data_parallel=16, microbatches=64))
    assert points[1]["step_time_ms"] == pytest.approx(predicted())
    assert points[0]["fits"] is False and points[1]["fits"] is True  # 4 stages of 13B: 95.6 GiB


def test_sweeping_micro_batches_at_fixed_gpus_changes_their_size() -> None:
    points = sweep_json("--microbatches", "64,128")["points"]
    assert [(p["microbatches"], p["micro_batch"], p["global_batch"]) for p in points] == [(64, 2, 1024), (128, 1, 1024)]
    assert points[0]["step_time_ms"] == pytest.approx(predicted(micro_batch=2, microbatches=64))


def test_sweep_with_a_fixed_replica_changes_the_gpus_and_the_batch() -> None:
    points = sweep_json("--stages", "4,8", "--microbatches", "64", "--fixed", "replica")["points"]
    assert [(p["stages"], p["data_parallel"], p["gpus"], p["global_batch"]) for p in points] == [
        (4, 8, 32, 512), (8, 8, 64, 512)]
    assert points[0]["step_time_ms"] == pytest.approx(predicted(stages=4, microbatches=64, global_batch=512))


def test_the_sweep_table_shows_gpus_batch_and_what_does_not_fit() -> None:
    res = invoke(app, "sweep", GPT_YAML, "--stages", "4,8")
    assert res.exit_code == 0, res.output
    header = next(line for line in res.stdout.splitlines() if "stages" in line and "step ms" in line)
    assert "GPUs" in header and "global batch" in header
    assert "64 GPUs and a global batch of 1024 held" in " ".join(res.stdout.split())
    rows = [line.split("│")[1:-1] for line in res.stdout.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in r[:6]] + [r[-1].strip()] for r in rows] == [
        ["4", "64", "16", "1", "64", "1024", "no"], ["8", "128", "8", "1", "64", "1024", "yes"]]
    assert "does not fit in 80 GiB per device (its fullest rank): stages 4 (95.6 GiB)" in " ".join(res.stderr.split())


def test_a_sweep_point_that_cannot_keep_the_gpus_names_why() -> None:
    res = invoke(app, "sweep", GPT_YAML, "--stages", "3")
    assert res.exit_code == 1 and "3 stages do not divide 64 GPUs" in " ".join(res.stderr.split())
    assert sweep_json("--stages", "3,8", "--fixed", "gpus")["points"][0]["error"]


@pytest.mark.parametrize("fixed", ["nope"])
def test_an_unknown_sweep_mode_is_bad_usage(fixed: str) -> None:
    res = invoke(app, "sweep", GPT_YAML, "--stages", "4", "--fixed", fixed)
    assert res.exit_code == 2 and "--fixed" in res.output


# ----- the TUI's stage keys ------------------------------------------------------------------------
def test_the_stage_keys_say_how_the_gpu_count_changes() -> None:
    s = gpt().with_overrides(stages=4, microbatches=8)
    state = TuiState.from_scenario(s, lambda x: predict(x).trace)
    state.change_stages(+1)
    assert state.scenario.pipeline.stages == 5
    assert "stages 4 -> 5: GPUs 32 -> 40 (5 stages x 8 replicas)" in state.message
    state.change_stages(-1)
    assert "GPUs 40 -> 32" in state.message


# ----- one override function, whichever way the overrides come in ----------------------------------
WAYS_IN = [
    {"schedule": "interleaved-1f1b", "microbatches": 16},  # no chunks given: the schedule's 2, not 1F1B in disguise
    {"stages": 4, "microbatches": 8},
    {"data_parallel": 16},  # the global batch holds: the micro-batch count follows
    {"micro_batch": 2, "recompute": "selective", "zero_stage": 1},
    {"schedule": "zb-v", "stages": 4, "microbatches": 8},
    {"context_parallel": 2},  # a sequence's tokens over 2 devices: the global batch holds
]


@pytest.mark.parametrize("overrides", WAYS_IN, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_the_same_overrides_give_the_same_scenario_every_way_in(overrides: dict) -> None:
    """The public API, Scenario.with_overrides, the command line, the TUI's keys, sweep's points and
    a tuned scenario file lay the same overrides over a scenario by one function, to the same scenario."""
    import ppsim
    from ppsim.cli.common import scenario_with
    from ppsim.inputs.overrides import PlanOverrides, apply_overrides, plan_mapping
    from ppsim.search.sweep import grid_point

    base = gpt()
    expected = apply_overrides(base, PlanOverrides(**overrides))[0]
    if "schedule" in overrides and "chunks" not in overrides:
        assert expected.pipeline.chunks == 2  # interleaved and V schedules on their chunks
    ways = {
        "ppsim.load_scenario": ppsim.load_scenario(GPT_YAML, **overrides),
        "Scenario.with_overrides": base.with_overrides(**overrides),
        "command line": scenario_with(GPT_YAML, PlanOverrides(**overrides)),
        "tuned file": parse_scenario(plan_mapping(base.model_dump(exclude_none=True),
                                                  PlanOverrides(**{**overrides, "chunks": expected.pipeline.chunks}))),
    }
    if set(overrides) <= {"stages", "microbatches"}:
        ways["sweep (replica held)"] = grid_point(base, overrides.get("stages"), overrides.get("microbatches"), "replica")
    tui = TuiState.from_scenario(base, lambda s: predict(s.with_overrides(microbatches=8, stages=2)).trace)
    assert tui._apply(overrides)
    ways["TUI"] = tui.scenario
    for way, s in ways.items():
        assert s.model_dump() == expected.model_dump(), way


def test_the_stage_keys_go_to_the_next_stage_count_that_runs_and_say_which_they_skipped() -> None:
    """GPT-3 175B's published layout (16 stages x 2 chunks of 96 layers, uniform, on a cluster of
    1,024 GPUs): 15 to 13 stages do not divide the layers, 12 do; every count above 16 either does
    not divide them or needs more GPUs than the cluster has."""
    from conftest import SCENARIOS
    from ppsim.inputs.scenario import load

    s = load(SCENARIOS / "megatron-gpt3-175b.yaml")
    assert s.pipeline.partition == "uniform" and s.pipeline.stages == 16
    state = TuiState.from_scenario(s, lambda x: predict(x).trace)
    state.change_stages(-1)
    assert state.scenario.pipeline.stages == 12
    assert "stages 16 -> 12" in state.message and "; 13 to 15 cannot run (pipeline.partition: " in state.message
    state.change_stages(+1)
    assert state.scenario.pipeline.stages == 16
    state.change_stages(+1)
    assert state.scenario.pipeline.stages == 16 and state.message.startswith("stages stay at 16: no count above it runs")
    assert "17: pipeline.partition" in state.message and "cluster" in state.message
