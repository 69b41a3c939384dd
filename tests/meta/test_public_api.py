"""``import ppsim``: the public API a script or notebook uses, end to end, and light to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ppsim
from conftest import DATA, GPT_YAML, ROOT, SCENARIOS
from ppsim.errors import ScenarioError


def test_the_documented_session_runs(tmp_path: Path) -> None:
    s = ppsim.load_scenario(GPT_YAML, schedule="zb-h1", stages=4, microbatches=8)
    assert (s.pipeline.schedule, s.pipeline.stages, s.microbatches) == ("zb-h1", 4, 8)
    plan = ppsim.build_plan(s)
    compute = ppsim.build_plan(s, lowered=False)
    assert plan.lowered and not compute.lowered
    assert [[a for a in r if a.kind.value in ("F", "I", "W")] for r in plan.actions] == [list(r) for r in compute.actions]
    prediction = ppsim.predict(s)
    assert prediction.plan == plan
    summary = ppsim.summarize(prediction.trace)
    assert summary.step_time_ms > 0 and len(summary.per_rank) == 4
    path = tmp_path / "p.trace.json"
    prediction.trace.save(path)
    again = ppsim.load_trace(path)
    comparison = ppsim.compare(prediction.trace, again)
    assert comparison.step_time_error == pytest.approx(0.0)


def test_a_profile_and_a_measured_run_through_the_api() -> None:
    s = ppsim.load_scenario(SCENARIOS / "tiny-cpu.yaml")
    profile = ppsim.load_profile(DATA / "tiny-cpu.profile.yaml")
    predicted = ppsim.predict(s, profile).trace
    measured = ppsim.load_trace(DATA / "tiny-1f1b.measured.trace.json")
    assert ppsim.compare(predicted, measured).matched > 0


def test_bad_input_raises_the_named_error() -> None:
    with pytest.raises(ScenarioError, match="pipeline.stages"):
        ppsim.load_scenario(GPT_YAML, stages=0)


def test_importing_ppsim_pulls_in_nothing_heavy() -> None:
    code = ("import sys, ppsim; heavy = [m for m in ('torch', 'deepspeed', 'plotly', 'textual', 'pydantic', 'simpy') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_a_plan_without_a_profile_never_reads_one() -> None:
    """`ppsim run` of a scenario imports neither a profile's reader nor a page's renderer (each costs
    every run's start; issue 33's run target is a whole process)."""
    code = ("import sys; from ppsim.cli import main; sys.argv = ['ppsim', 'run', 'scenarios/moe-cpu.yaml', '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('ppsim.inputs.profile', 'ppsim.costs.profiled', 'plotly') if m in sys.modules], "
            "file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stderr.strip() == "[]", out.stderr
