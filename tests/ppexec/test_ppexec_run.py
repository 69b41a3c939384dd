"""ppexec end to end: the measured trace is a ppsim Trace of the plan; faults end cleanly."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from typer.testing import CliRunner  # noqa: E402

from conftest import GPT_YAML, SCENARIOS  # noqa: E402
from ppexec.cli import app  # noqa: E402
from ppexec.launch.prepare import RunOptions  # noqa: E402
from ppexec.launch.watch import RunFailed  # noqa: E402
from ppexec.results.collect import execute  # noqa: E402
from ppexec.worker.events import Done, Event, Failure, Ready, encode  # noqa: E402
from ppsim.errors import PpsimError  # noqa: E402
from ppsim.inputs.scenario import load, parse_scenario  # noqa: E402
from ppsim.plan import Plan  # noqa: E402
from ppsim.trace import Trace, TraceMeta  # noqa: E402
from ppsim.trace.chrome import validate_chrome_trace  # noqa: E402
from ppsim.trace.metrics import summarize  # noqa: E402

TINY = SCENARIOS / "tiny-cpu.yaml"
runner = CliRunner()


def _no_workers_left(run_dir: Path) -> bool:
    """No worker of this run is alive (other tests may run workers of their own meanwhile)."""
    out = subprocess.run(["pgrep", "-f", f"ppexec.worker {run_dir}"], capture_output=True, text=True)
    return out.stdout.strip() == ""


RUN_OUTPUT: dict[str, str] = {}  #: what `ppexec run` printed for the tiny_run fixture: stdout, stderr


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    res = runner.invoke(app, ["run", str(TINY), "--out", str(out), "--steps", "2", "--warmup", "1", "--json"])
    assert res.exit_code == 0, res.output
    RUN_OUTPUT.update(stdout=res.stdout, stderr=res.stderr)
    return out


@pytest.mark.slow  # starts ranks
def test_progress_counts_the_steps_asked_for_and_names_the_warmup(tiny_run: Path) -> None:
    lines = RUN_OUTPUT["stderr"].splitlines()
    assert "2 ranks ready: 1 warm-up step (not recorded), then 2 recorded steps" in lines
    steps = [line.split("  loss")[0] for line in lines if line.startswith("step ")]
    assert steps == ["step 1/2 recorded", "step 2/2 recorded"]
    assert json.loads(RUN_OUTPUT["stdout"])["losses"]  # the lines went to stderr: --json stays one document


def _states(world: int, ready: int, steps: int, done: bool = False) -> list:
    """Fake launcher states: ``ready`` ranks set up, every rank with ``steps`` recorded steps."""
    from ppexec.worker.events import RankState, Step

    out = []
    for r in range(world):
        st = RankState(r, ready=Ready(rank=r, pipe_rank=r, replica=0, tp_rank=0, host="host", clock_ns=0, pid=1,
                                      backend="gloo", runtime="torch") if r < ready else None)
        st.steps = [Step(step=k, loss=5.0 - k if r == world - 1 else None, spans=[("0F0", 0, 1)]) for k in range(steps)]
        st.done = done
        out.append(st)
    return out


def test_step_lines_count_recorded_steps_even_when_several_arrive_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import ppexec.cli as cli

    screen = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=screen, width=200))
    progress = cli._Progress(steps=3, warmup=2)
    for states in (_states(2, 1, 0), _states(2, 2, 0), _states(2, 2, 0), _states(2, 2, 2), _states(2, 2, 3)):
        progress(states)
    assert screen.getvalue().splitlines() == [
        "starting 2 ranks (Python, torch, the model, the process group) ...",
        "2 ranks ready: 2 warm-up steps (not recorded), then 3 recorded steps",
        "step 1/3 recorded  loss 5.0000", "step 2/3 recorded  loss 4.0000", "step 3/3 recorded  loss 3.0000"]


def test_run_units_follow_the_slowest_rank_to_the_total() -> None:
    from ppexec.launch.progress import RunUnits

    units = RunUnits(steps=3, warmup=2)
    seen = [units.done(s) for s in (_states(2, 0, 0), _states(2, 1, 0), _states(2, 2, 0), _states(2, 2, 1),
                                     _states(2, 2, 3), _states(2, 2, 3, done=True))]
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[0] == 0 and done[-1] == units.total
    assert [w for _, w in seen] == ["starting the ranks", "starting the ranks", "warm-up (2 steps, not recorded)",
                                    "step 2/3", "finishing", "done"]
    assert done[3] == units.setup + 2 + 1  # the first recorded step: the warm-up is behind it


@pytest.mark.slow  # starts ranks
def test_cli_writes_the_run_folder(tiny_run: Path) -> None:
    for name in ("trace.json", "trace.chrome.json", "summary.json", "plan.json", "run.json",
                 "steps/step-0.trace.json", "steps/step-1.trace.json", "logs/rank-0.log"):
        assert (tiny_run / name).exists(), name
    summary = json.loads((tiny_run / "summary.json").read_text())
    for key in ("step_time_ms", "bubble_fraction", "throughput_samples_per_s", "ranks", "losses"):
        assert key in summary
    assert summary["source"] == "measured" and len(summary["losses"]) == 2


@pytest.mark.slow  # starts ranks
def test_measured_trace_is_the_plans_actions(tiny_run: Path) -> None:
    trace = Trace.load(tiny_run / "trace.json")
    plan = Plan.from_dict(json.loads((tiny_run / "plan.json").read_text()))
    assert trace.meta["source"] == "measured"
    assert set(trace.meta) <= set(get_type_hints(TraceMeta))  # every key ppexec writes is declared
    assert [list(map(str, r)) for r in trace.actions_by_rank()] == [list(map(str, r)) for r in plan.actions]
    # the same actions as the prediction of the same scenario, action by action
    from ppexec.launch.prepare import prepare

    assert prepare(load(TINY)).plan == plan


@pytest.mark.slow  # starts ranks
def test_measured_trace_works_with_ppsims_metrics_and_exports(tiny_run: Path) -> None:
    trace = Trace.load(tiny_run / "trace.json")
    s = summarize(trace)
    assert s.step_time_ms > 0 and 0 <= s.bubble_fraction < 1
    assert s.throughput_samples_per_s and s.tokens_per_s
    assert [st.peak_activation_microbatches for st in s.per_rank] == [2, 1]  # 1F1B on 2 stages
    for span in trace.spans:
        assert span.end >= span.start >= 0
    assert validate_chrome_trace(json.loads((tiny_run / "trace.chrome.json").read_text())) == []
    from ppsim.views.render.gantt import write_html

    write_html(trace, tiny_run / "t.html")
    assert (tiny_run / "t.html").stat().st_size > 100_000


@pytest.mark.slow  # starts ranks
def test_measured_trace_has_a_memory_track_per_rank(tiny_run: Path) -> None:
    trace = Trace.load(tiny_run / "trace.json")
    assert trace.meta["memory_measured"] == "rss"  # CPU ranks: the process's resident memory
    memory = sorted((c for c in trace.counters if c.name == "memory_bytes"), key=lambda c: c.rank)
    assert [c.rank for c in memory] == [0, 1]
    for c in memory:
        ends = sorted(s.end for s in trace.spans if s.rank == c.rank)
        assert [t for t, _ in c.points] == pytest.approx(ends)  # one reading as each action ends
        assert all(10 * 2**20 < v < 8 * 2**30 for _, v in c.points)  # a Python process with torch loaded
    s = summarize(trace)
    assert all(st.peak_memory_bytes == max(v for _, v in c.points) for st, c in zip(s.per_rank, memory))
    doc = json.loads((tiny_run / "trace.chrome.json").read_text())
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "memory_bytes"} == {1, 2}


@pytest.mark.parametrize("args, words", [
    (["--schedule", "zb-h1", "--runtime", "deepspeed"], "splits the backward into input grad and weight grad"),
    (["--schedule", "interleaved-1f1b", "--chunks", "2", "--runtime", "deepspeed"], "2 stages on each rank"),
    (["--schedule", "inference"], "no runtime can run this plan"),  # auto: neither runs it, both say why
])
def test_a_plan_a_runtime_cannot_run_is_one_line_naming_why(tmp_path: Path, args: list[str], words: str) -> None:
    res = runner.invoke(app, ["run", str(TINY), "--out", str(tmp_path / "x"), *args])
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and words in text and "Traceback" not in res.output, res.output
    assert text.count("error:") == 1
    assert not (tmp_path / "x" / "ranks").exists() or not any((tmp_path / "x" / "ranks").iterdir())


def test_tensor_parallelism_is_refused_by_the_torch_runtime_by_name(tmp_path: Path) -> None:
    data = load(TINY).model_dump(exclude_none=True)
    data["tensor_parallel"] = 2
    s = parse_scenario(data)
    from ppexec.launch.prepare import prepare

    with pytest.raises(PpsimError, match="tensor parallelism runs in the DeepSpeed runtime only"):
        prepare(s, runtime="torch")
    assert prepare(s).runtime == "deepspeed"


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", str(GPT_YAML), "--out", str(tmp_path / "big")])
    assert res.exit_code == 1 and "GiB" in res.output  # GPT-3 13B does not fit on this machine
    res = runner.invoke(app, ["run", str(SCENARIOS / "zero-bubble-costs.yaml"), "--out", str(tmp_path / "c")])
    assert res.exit_code == 1 and "needs a 'model' section" in res.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    res = runner.invoke(app, ["run", str(TINY), "--out", str(mine)])
    assert res.exit_code == 1 and "not a ppexec run" in res.output
    assert (mine / "notes.txt").read_text() == "keep me"
    assert "Traceback" not in res.output


@pytest.mark.parametrize("args, says", [
    (["--launcher", "deepspeed"], "--hostfile"),  # the deepspeed launcher needs a hostfile
    (["--launcher", "mpirun"], "--launcher"),
    (["--partition", "weird"], "--partition"),
    (["--schedule", "nope"], "unknown schedule"),
])
def test_bad_usage_is_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    res = runner.invoke(app, ["run", str(TINY), "--out", str(tmp_path / "x"), *args])
    assert res.exit_code == 2 and says in res.output, res.output
    assert not (tmp_path / "x").exists(), "nothing is written on bad usage"


def test_prepare_refuses_an_unknown_backend(tmp_path: Path) -> None:
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(tmp_path / "x"), "--backend", "mpi"])
    assert res.exit_code == 2 and "--backend" in res.output


def test_missing_deepspeed_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    res = runner.invoke(app, ["run", str(TINY), "--out", str(tmp_path / "r")])
    assert res.exit_code == 1 and "deepspeed is not installed" in res.output


@pytest.mark.slow  # starts ranks
def test_worker_refuses_a_world_size_that_does_not_fit_the_plan(tmp_path: Path) -> None:
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(tmp_path), "--backend", "gloo"])
    assert res.exit_code == 0, res.output
    env = dict(os.environ, RANK="0", WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    proc = subprocess.run([sys.executable, "-m", "ppexec.worker", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    event = json.loads((tmp_path / "ranks" / "rank-0.jsonl").read_text().splitlines()[-1])
    assert event["type"] == "error" and "stages x data_parallel x tensor_parallel = 2 x 1 x 1 = 2" in event["error"]


@pytest.mark.slow  # starts ranks
def test_a_plan_that_deadlocks_ends_within_the_timeout(tmp_path: Path) -> None:
    # the non-blocking order of 1F1B: both stages send before they receive, which deadlocks on gloo
    from ppexec.launch import prepare as prepare_mod
    from ppsim.plan import lower, schedules

    s = load(TINY).with_overrides(microbatches=2)
    real_prepare = prepare_mod.prepare

    def deadlocking(scenario, profile=None, runtime="auto"):
        prepared = real_prepare(scenario, profile, runtime)
        bad = lower(schedules.build("1f1b", 2, 2), 1, rendezvous=False)
        return dataclasses.replace(prepared, plan=bad)

    prepare_mod.prepare = deadlocking
    try:
        with pytest.raises(RunFailed, match=r"rank \d failed in action \dSEND_\w\d") as exc:
            execute(s, RunOptions(out=tmp_path, steps=1, warmup=0, timeout_s=8))
    finally:
        prepare_mod.prepare = real_prepare
    assert "log:" in str(exc.value)
    assert _no_workers_left(tmp_path)


def _kill_after_a_step(rank: int) -> Callable[[Any], None]:
    """A watcher that kills ``rank`` (SIGKILL) once, after it has reported a step."""
    killed: list[int] = []

    def watch(states: Any) -> None:
        st = states[rank]
        if st.steps and not killed and st.ready:
            os.kill(st.ready.pid, signal.SIGKILL)
            killed.append(st.ready.pid)

    return watch


@pytest.mark.slow  # starts ranks
def test_a_crashed_rank_stops_the_run_and_keeps_what_was_recorded(tmp_path: Path) -> None:
    kill_rank1_after_first_step = _kill_after_a_step(1)

    with pytest.raises(RunFailed, match=r"rank 1 exited with code -9 after step \d+ \(last action 1\w+\)") as exc:
        execute(load(TINY), RunOptions(out=tmp_path, steps=20, warmup=0, timeout_s=20), kill_rank1_after_first_step)
    assert "without reporting an error" in str(exc.value)
    assert _no_workers_left(tmp_path)
    lines = (tmp_path / "ranks" / "rank-1.jsonl").read_text().splitlines()
    assert any(json.loads(line)["type"] == "step" for line in lines)  # the recorded step is kept


class _Exited:
    """A process that has already exited with ``code``."""

    def __init__(self, code: int) -> None:
        self.code, self.pid = code, -1

    def poll(self) -> int:
        return self.code

    def wait(self, timeout: float | None = None) -> int:
        return self.code


def _events(tmp_path: Path, rank: int, *events: Event) -> None:
    (tmp_path / "ranks").mkdir(exist_ok=True)
    (tmp_path / "ranks" / f"rank-{rank}.jsonl").write_text("".join(encode(e) + "\n" for e in events))


def _ready(rank: int) -> Ready:
    return Ready(rank=rank, pipe_rank=rank, replica=0, tp_rank=0, host="h", clock_ns=0, pid=0, backend="gloo",
                 runtime="deepspeed")


def test_a_crash_after_done_is_a_teardown_not_a_failed_run(tmp_path: Path) -> None:
    """A rank that recorded everything and wrote "done" may still abort in the process teardown
    (gloo's threads): the run is complete and its measurements are kept."""
    from ppexec.launch.watch import teardown_notes, watch

    _events(tmp_path, 0, _ready(0), Done(rank=0))
    _events(tmp_path, 1, _ready(1), Done(rank=1))
    states = watch([_Exited(0), _Exited(-6)], tmp_path, 2, 5.0, None, per_rank=True)
    assert [st.done for st in states] == [True, True]
    assert [st.teardown_code for st in states] == [None, -6]
    assert teardown_notes(states) == [
        "rank 1 exited with code -6 in its teardown, after recording everything; the run is complete"]


def test_an_error_after_done_and_a_failed_launcher_after_done_are_teardowns(tmp_path: Path) -> None:
    """A rank whose peer left the final barrier reports a lost connection after its "done"; the
    DeepSpeed launcher then exits non-zero. Every rank recorded everything: the run stands."""
    from ppexec.launch.watch import teardown_notes, watch

    lost = Failure(rank=0, action=None, error="RuntimeError: Connection closed by peer")
    _events(tmp_path, 0, _ready(0), Done(rank=0), lost)
    _events(tmp_path, 1, _ready(1), Done(rank=1))
    states = watch([_Exited(1)], tmp_path, 2, 5.0, None, per_rank=False)
    assert states[0].error is None and states[0].teardown_error == lost
    assert teardown_notes(states) == ["rank 0 reported after recording everything: RuntimeError: Connection closed by peer"]


def test_a_crash_before_done_still_fails_the_run(tmp_path: Path) -> None:
    from ppexec.launch.watch import watch

    _events(tmp_path, 0, _ready(0), Done(rank=0))
    _events(tmp_path, 1, _ready(1))
    with pytest.raises(RunFailed, match="rank 1 exited with code -6 before its first recorded step"):
        watch([_Exited(0), _Exited(-6)], tmp_path, 2, 5.0, None, per_rank=True)


def test_cluster_launch_command_runs_the_same_worker(tmp_path: Path) -> None:
    from ppexec.launch.cluster import deepspeed_command

    cmd = deepspeed_command(tmp_path, Path("hosts.txt"), 29600)
    assert cmd[:3] == ["deepspeed", "--hostfile", "hosts.txt"]
    assert "--no_local_rank" in cmd  # the worker takes the run folder only, LOCAL_RANK comes from the env
    assert cmd[-3:] == ["--module", "ppexec.worker", str(tmp_path)]
    assert "--master_port" in cmd


def test_sequence_parallelism_is_refused_by_name() -> None:
    from ppexec.launch.prepare import prepare
    from ppsim.errors import PpsimError
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    data["tensor_parallel"] = 2
    data["training"]["sequence_parallel"] = True
    with pytest.raises(PpsimError, match="training.sequence_parallel: ppexec's tensor parallelism"):
        prepare(parse_scenario(data))


def test_zero_2_is_refused_even_with_one_stage() -> None:
    from ppexec.launch.prepare import prepare
    from ppsim.errors import PpsimError
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    data["pipeline"]["stages"] = 1
    data["training"]["zero_stage"] = 2
    with pytest.raises(PpsimError, match="training.zero_stage: pipelines run ZeRO stage 0 or 1.*refuses stage 2"):
        prepare(parse_scenario(data))


def test_fp16_on_the_cpu_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    fp16 = tmp_path / "fp16.yaml"
    fp16.write_text(TINY.read_text().replace("dtype: fp32", "dtype: fp16"))
    res = CliRunner().invoke(app, ["run", str(fp16), "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "model.dtype: fp16 does not train on a CPU" in " ".join(res.output.split())


@pytest.mark.parametrize("key, value", [("model.tie_embeddings", True), ("model.mtp_layers", 1),
                                        ("model.attention_window", 8)])
def test_model_features_ppexec_does_not_build_are_refused_by_name(key: str, value: object) -> None:
    from ppexec.launch.prepare import prepare
    from ppsim.errors import PpsimError
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    data["model"][key.split(".")[1]] = value
    with pytest.raises(PpsimError, match=f"{key}: ppexec builds GPT- and Llama-style blocks"):
        prepare(parse_scenario(data))


def test_llama_blocks_are_built_and_their_tensor_parallelism_refused() -> None:
    """SwiGLU, rotary positions and grouped-query attention build (the same parameters as ppsim
    counts); their tensor-parallel split is not ppexec's, refused by name."""
    from ppexec.launch.prepare import prepare
    from ppexec.runtimes.model import parameter_count, reference_model
    from ppsim.errors import PpsimError
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    data["model"].update(mlp="swiglu", positions="rope", kv_heads=2)
    s = parse_scenario(data)
    assert prepare(s).partition
    assert s.model is not None
    assert sum(p.numel() for p in reference_model(s.model, 0).parameters()) == parameter_count(s.model)
    data["tensor_parallel"] = 2
    with pytest.raises(PpsimError, match="tensor_parallel: ppexec's tensor parallelism splits GPT-style"):
        prepare(parse_scenario(data))


# ----- the torch runtime under other launchers, and its faults --------------------------------------
@pytest.mark.slow  # starts ranks
def test_torchrun_starts_the_torch_runtime_from_a_prepared_folder(tmp_path: Path) -> None:
    """`ppexec prepare --runtime torch`, any launcher (here torchrun) starting the worker on every
    rank, then `ppexec collect`: the same run folder as `ppexec run`."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["prepare", str(TINY), "--out", str(out), "--backend", "gloo", "--runtime", "torch",
                              "--schedule", "zb-h1", "--steps", "2", "--timeout", "30"])
    assert res.exit_code == 0 and "(torch runtime)" in res.output, res.output
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "ppexec.worker", str(out)], env=env, capture_output=True, text=True, timeout=300,
                          start_new_session=True)  # torchrun signals its process group when it ends
    assert done.returncode == 0, done.stderr[-2000:]
    res = runner.invoke(app, ["collect", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["runtime"], summary["schedule"], len(summary["losses"])) == ("torch", "zb-h1", 2)
    trace = Trace.load(out)
    plan = Plan.from_dict(json.loads((out / "run.json").read_text())["plan"])
    assert trace.actions_by_rank() == [list(r) for r in plan.actions]


@pytest.mark.slow  # starts ranks
def test_a_killed_torch_rank_stops_the_run_naming_it(tmp_path: Path) -> None:
    kill_rank0_after_a_step = _kill_after_a_step(0)

    s = load(TINY).with_overrides(schedule="interleaved-1f1b", chunks=2)
    with pytest.raises(RunFailed, match=r"rank 0 exited with code -9 after step \d+") as exc:
        execute(s, RunOptions(out=tmp_path, steps=40, warmup=0, timeout_s=20, runtime="torch"), kill_rank0_after_a_step)
    assert "without reporting an error" in str(exc.value)
    assert _no_workers_left(tmp_path)


@pytest.mark.slow  # starts ranks
def test_a_torch_plan_that_waits_forever_ends_within_the_timeout(tmp_path: Path) -> None:
    """A plan whose receive has no send (a hand-made plan gone wrong): the receiving rank's wait
    times out, the error names the action it was in, and no rank is left behind."""
    from ppexec.launch import prepare as prepare_mod

    real_prepare = prepare_mod.prepare

    def missing_send(scenario, profile=None, runtime="auto"):
        prepared = real_prepare(scenario, profile, runtime)
        plan = prepared.plan
        broken = [list(r) for r in plan.actions]
        broken[0] = [a for a in broken[0] if str(a) != "0SEND_F1"]
        return dataclasses.replace(prepared, plan=plan.with_actions(broken))

    prepare_mod.prepare = missing_send
    try:
        with pytest.raises(RunFailed, match=r"rank \d failed in action \d\w+: .*(Timed out|timed out|Connection)"):
            execute(load(TINY), RunOptions(out=tmp_path, steps=1, warmup=0, timeout_s=8, runtime="torch"))
    finally:
        prepare_mod.prepare = real_prepare
    assert _no_workers_left(tmp_path)


@pytest.mark.slow  # starts ranks
def test_the_launcher_stops_every_rank_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM to ppexec (a job scheduler's, `timeout`'s) stops every rank it started."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ppexec.cli", "run", str(TINY), "--out", str(out), "--steps", "500", "--runtime", "torch"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "ranks").glob("rank-*.jsonl")):
        time.sleep(0.5)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by signal SIGTERM" in stderr, stderr[-2000:]
    assert _no_workers_left(out)


def test_profile_and_validate_bars_say_the_phase_and_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import ppsim.cli.common as common
    from ppexec.cli import profile_progress, validate_progress
    from ppexec.measure.profile import profile_runs

    s = load(TINY)
    assert profile_runs(s) == 4  # the two uneven partitions of its 4 layers, A B B A
    screen = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=screen, force_terminal=True, width=200))
    with validate_progress(s, True, steps=3, warmup=1) as (on_profile, on_run):
        on_profile(0, _states(2, 2, 0))
        time.sleep(0.15)  # the bar redraws 10 times a second
        on_profile(3, _states(2, 2, 4))
        time.sleep(0.15)
        on_run(_states(2, 2, 3, done=True))
    drawn = screen.getvalue()
    for words in ("1/3 profiling run 1/4: warm-up (2 steps, not recorded)", "1/3 profiling run 4/4: step 5/10",
                  "2/3 the run: done", "elapsed", "left"):
        assert words in drawn, words
    screen.truncate(0)
    with profile_progress(s) as on_progress:
        on_progress(1, _states(2, 1, 0))
    assert "profiling run 2/4: starting the ranks" in screen.getvalue()


def test_a_weight_gradient_store_is_refused_by_the_torch_runtime_by_name() -> None:
    """torch's split backward keeps the autograd graph: a plan predicted through a store is not what it runs."""
    data = load(TINY).model_dump(exclude_none=True)
    data["pipeline"] = {**data["pipeline"], "schedule": "zb-h1", "split_backward": "store"}
    from ppexec.launch.prepare import prepare

    with pytest.raises(PpsimError, match="use pipeline.split_backward: autograd"):
        prepare(parse_scenario(data), runtime="torch")
