"""Every schedule CSV torch's own tests keep (tests/data/torch-artifacts, each version that folder
has held: SOURCE.md) reads, in either of torch's namings of the backward, and simulates; the
files before and after torch's rename are the same plan; and where torch can load the file its
own parser reads the same actions ppsim does."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import gpt
from ppsim.plan import Kind
from ppsim.plan.schedules.from_file import before_rename, read_plan
from ppsim.prediction import predict
from ppsim.trace.metrics import step_time_ms

ARTIFACTS = Path(__file__).parent.parent / "data" / "torch-artifacts"
FILES = sorted(ARTIFACTS.glob("*.csv"))


def test_the_folder_holds_every_artifact_and_its_source() -> None:
    assert len(FILES) == 5
    source = (ARTIFACTS / "SOURCE.md").read_text()
    assert all(f"`{f.name}`" in source for f in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_artifact_reads_and_simulates(path: Path) -> None:
    plan = read_plan(path)
    assert plan.num_microbatches in (8, 10) and plan.chunks == 2
    s = gpt().with_overrides(stages=plan.num_ranks, microbatches=plan.num_microbatches, chunks=plan.chunks)
    result = predict(s.with_overrides(schedule=f"file:{path}"))
    done = {(x.stage, x.microbatch) for sp in result.trace.spans if sp.lane == "compute"
            for x in sp.action.parts if x.kind in (Kind.B, Kind.W)}
    assert step_time_ms(result.trace) > 0
    # every stage's every micro-batch finishes its backward (whole, or its weight-grad half)
    assert {(st, mb) for st in range(plan.num_stages) for mb in range(plan.num_microbatches)} <= done


@pytest.mark.parametrize("name", ["zb1p_2rank_2stagep_compute", "zb1p_2rank_2stagep_comms"])
def test_the_files_before_and_after_torchs_rename_are_one_plan(name: str) -> None:
    old, new = ARTIFACTS / f"{name}.before-rename.csv", ARTIFACTS / f"{name}.csv"
    assert before_rename(old.read_text().replace("\n", ",").split(","))
    assert not before_rename(new.read_text().replace("\n", ",").split(","))
    assert read_plan(old).actions == read_plan(new).actions
    kinds = {a.kind for r in read_plan(new).actions for a in r}
    assert Kind.I in kinds and Kind.W in kinds  # the halves stay halves
    if "comms" in name:
        assert Kind.B in kinds  # and stages 0 and 2 run whole backwards (BW before the rename)


@pytest.mark.parametrize("path", [f for f in FILES if "before-rename" not in f.name], ids=lambda p: p.name)
def test_torchs_own_parser_reads_the_actions_ppsim_reads(path: Path) -> None:
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import _Action

    theirs = [[str(_Action.from_str(c)) for c in row.split(",") if c.strip()]
              for row in path.read_text().splitlines()]
    compute = {"F", "I", "W", "B"}
    theirs_compute = [[c for c in row if c.lstrip("0123456789").rstrip("0123456789") in compute
                       or c.startswith("(")] for row in theirs]
    ours = [[str(a) for a in r] for r in read_plan(path).actions]
    assert ours == theirs_compute


def test_ppsim_plan_prints_a_torch_csv() -> None:
    from typer.testing import CliRunner

    from ppsim.cli import app

    path = ARTIFACTS / "zb1p_2rank_2stagep_comms.before-rename.csv"
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"file:{path}: 2 ranks, 8 micro-batches, 2 chunk(s) per rank, 80 actions")
    assert "2B0" in result.output and "3I0" in result.output  # BW read as B, B as I
    refused = CliRunner().invoke(app, ["plan", str(path), "--stages", "4"])
    assert refused.exit_code == 2 and "plan options need a scenario" in refused.output


@pytest.mark.parametrize("name, ranks, microbatches", [("zb1p_2rank_2stagep_compute.csv", 2, 8),
                                                        ("dualpipev_4rank_10mb.csv", 4, 10)])
def test_torch_runs_the_artifacts_its_runtime_loads(name: str, ranks: int, microbatches: int) -> None:
    """The compute-only artifacts of today's naming, loaded by torch's own runtime as torchtitan loads
    a CSV, train a step whose gradients are one process's (the older naming torch no longer parses;
    the comms files need its compute_comms loader, which torchtitan never uses)."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    runner = Path(__file__).parent.parent / "frameworks" / "run_torch_csv.py"
    run = subprocess.run([sys.executable, str(runner), str(ranks), str(microbatches), str(ARTIFACTS / name)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(rows) == ranks and all(r["grad_gap"] < 1e-12 and r["loss_gap"] < 1e-9 for r in rows)
