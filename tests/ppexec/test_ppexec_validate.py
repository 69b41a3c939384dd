"""ppexec profile / validate and bench/accuracy.py, end to end on the tiny scenario (2 CPU ranks)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from typer.testing import CliRunner  # noqa: E402

from conftest import ROOT, SCENARIOS  # noqa: E402
from ppexec.cli import app  # noqa: E402
from ppsim.inputs.profile import load_profile  # noqa: E402
from ppsim.inputs.scenario import load  # noqa: E402
from ppsim.trace import Trace  # noqa: E402

pytestmark = pytest.mark.slow  # profiles and runs DeepSpeed

TINY = SCENARIOS / "tiny-cpu.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "tiny.profile.yaml"
    res = runner.invoke(app, ["profile", str(TINY), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_profile_measures_what_ppsim_needs(profile_file: Path) -> None:
    p = load_profile(profile_file)
    p.check_applies(load(TINY))
    assert p.block.forward_ms > 0 and p.block.backward_ms > p.block.forward_ms
    assert 0 < p.block.weight_grad_ms < p.block.backward_ms
    assert p.embedding.params > 0 and p.head.params > 0
    assert p.machine["profiling_partitions"] == [[1, 3], [3, 1], [3, 1], [1, 3]]  # A B B A: linear drift cancels
    assert len(p.machine["profiling_block_alone_ms"]) == 4 and len(p.machine["load_average"]) == 2
    assert p.link.latency_us >= 0 and p.link.bandwidth_gb_s > 0 and len(p.link.samples) == 5
    assert p.clip_allreduce_us > 0


def test_validate_writes_the_loop_and_compares_the_same_plan(profile_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "val"
    res = runner.invoke(app, ["validate", str(TINY), "--out", str(out), "--profile", str(profile_file),
                              "--steps", "3", "--warmup", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # progress went to stderr: stdout is one JSON document
    for key in ("predicted_step_time_ms", "measured_step_time_ms", "step_time_error", "ranks", "worst"):
        assert key in doc
    assert doc["step_time_error"] == pytest.approx(
        (doc["predicted_step_time_ms"] - doc["measured_step_time_ms"]) / doc["measured_step_time_ms"])
    for name in ("predicted.trace.json", "comparison.json", "comparison.html", "run/trace.json", "run/summary.json"):
        assert (out / name).is_file(), name
    pred, meas = Trace.load(out / "predicted.trace.json"), Trace.load(out / "run" / "trace.json")
    # one plan: the very same actions on every rank, gradient clipping included
    assert sorted((s.rank, str(s.action)) for s in pred.spans) == sorted((s.rank, str(s.action)) for s in meas.spans)
    assert any(s.action.kind.value == "CLIP" for s in meas.spans)
    assert pred.meta["costs_from"] == "profile"
    assert "2/3 predicting and running 1 warm-up and 3 recorded steps" in res.stderr
    assert doc["causes"] and not doc["hints"]  # calibrated: what differs most, and no datasheet hint


def test_validate_refuses_a_folder_of_user_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["validate", str(TINY), "--out", str(tmp_path)])
    assert res.exit_code == 1 and "error:" in res.output and "Traceback" not in res.output
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_refused_validation_leaves_no_folder_behind(tmp_path: Path) -> None:
    """A plan the runtimes cannot run (DualPipe's two copies) is refused before anything runs: the
    --out folder, and the parents it would have made, are not left empty behind."""
    out = tmp_path / "val" / "x"
    res = runner.invoke(app, ["validate", str(TINY), "--out", str(out), "--schedule", "dualpipe"])
    assert res.exit_code == 1 and "dualpipe" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "val").exists()


def test_profile_never_overwrites_a_user_file(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("my: notes\n")
    res = runner.invoke(app, ["profile", str(TINY), "--out", str(mine)])
    assert res.exit_code == 1 and "--force" in res.output
    assert mine.read_text() == "my: notes\n"


def test_profile_needs_a_model_with_two_layers(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(TINY.read_text().replace("layers: 4", "layers: 1").replace("stages: 2", "stages: 1"))
    res = runner.invoke(app, ["profile", str(one), "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "model.layers" in res.output


def test_accuracy_bench_runs() -> None:
    """bench/accuracy.py end to end with the smallest matrix (the figures themselves are not checked)."""
    cmd = [sys.executable, str(ROOT / "bench" / "accuracy.py"), "--runtimes", "torch", "--models", "tiny",
           "--schedules", "zb-h1", "--microbatches", "2", "--partitions", "balanced", "--steps", "2", "--warmup", "0",
           "--repeats", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "median |step-time error|" in res.stdout and "max per-stage bubble error" in res.stdout
    # the balanced split follows the measured times, which a loaded machine can tip (2/2 or 1/3)
    assert re.search(r"^torch +tiny +zb-h1 +2 balanced +\d/\d ", res.stdout, re.M), res.stdout
    assert re.search(r"^  torch +zb-h1 +ep1 +1 ", res.stdout, re.M), res.stdout  # the per-schedule summary
