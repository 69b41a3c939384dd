"""`ppsim show`: a saved or measured step's figures and pages from the command line (issue 34: `ppsim
run runs/tiny --html` was refused and only the TUI's `e` drew a measured run's page)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import DATA, invoke
from ppsim.cli import app
from ppsim.formats import HTML_MARKER
from ppsim.trace.chrome import from_chrome_trace
from ppsim.trace.load import load_trace
from ppsim.trace.metrics import summarize

MEASURED = DATA / "tiny-1f1b.measured.trace.json"


def test_a_measured_run_folder_prints_its_figures_and_draws_its_pages(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    shutil.copy(MEASURED, run / "trace.json")
    res = invoke(app, "show", run, "--html", tmp_path / "run.html", "--trace", tmp_path / "run.chrome.json")
    assert res.exit_code == 0, res.output
    s = summarize(load_trace(MEASURED))
    assert "(measured)" in res.stdout and f"{s.step_time_ms:,.3f} ms" in res.stdout
    assert "critical path" in res.stdout and "per rank" in res.stdout
    assert (tmp_path / "run.html").read_text().startswith(HTML_MARKER)
    chrome = json.loads((tmp_path / "run.chrome.json").read_text())
    assert from_chrome_trace(chrome).spans == load_trace(MEASURED).spans
    assert "wrote" in res.output


def test_json_is_the_summary_of_the_trace() -> None:
    res = invoke(app, "show", MEASURED, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc == json.loads(json.dumps(summarize(load_trace(MEASURED)).to_json_dict()))
    assert doc["source"] == "measured"


def test_run_given_a_saved_step_points_to_show(tmp_path: Path) -> None:
    res = invoke(app, "run", MEASURED, "--html", tmp_path / "x.html")
    assert res.exit_code == 1
    assert f"`ppsim show {MEASURED}`" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x.html").exists()


def test_a_missing_trace_is_one_line_naming_what_to_give(tmp_path: Path) -> None:
    res = invoke(app, "show", tmp_path / "nothing.json")
    assert res.exit_code == 1 and "does not exist" in res.output and "Traceback" not in res.output


def test_a_json_scenario_still_runs_and_a_plain_folder_is_not_called_a_saved_step(tmp_path: Path) -> None:
    import yaml

    from conftest import GPT_YAML

    scenario = tmp_path / "gpt.json"
    scenario.write_text(json.dumps(yaml.safe_load(GPT_YAML.read_text())))
    res = invoke(app, "run", scenario, "--stages", "4", "--microbatches", "8")
    assert res.exit_code == 0, res.output
    folder = tmp_path / "scenarios"
    folder.mkdir()
    res = invoke(app, "run", folder)
    assert res.exit_code == 1 and "saved step" not in res.output and "Traceback" not in res.output
