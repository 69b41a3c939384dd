"""The ppsim command: outputs, overrides, exit codes, and never a traceback on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, GPT_YAML, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.trace import Trace

GPT = str(GPT_YAML)
SMALL = ["--microbatches", "16"]  # keeps exports small and fast


def test_run_prints_the_summary() -> None:
    res = invoke(app, "run", GPT, *SMALL)
    assert res.exit_code == 0, res.output
    for words in ("step time", "throughput", "tokens/s", "MFU", "bubble", "1f1b", "per rank", "micro-batches held"):
        assert words in res.output


def test_run_json_has_the_documented_keys() -> None:
    res = invoke(app, "run", GPT, "--json", *SMALL)
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    for key in ("step_time_ms", "bubble_fraction", "throughput_samples_per_s", "tokens_per_s", "mfu", "ranks"):
        assert key in doc
    assert len(doc["ranks"]) == doc["num_ranks"] == doc["num_stages"] == 8
    for r, st in enumerate(doc["ranks"]):
        assert {"rank", "stages", "busy_ms", "bubble_fraction", "peak_activation_microbatches"} <= set(st)
        assert (st["rank"], st["stages"]) == (r, [r])
    assert doc["microbatches"] == 16


def test_overrides_change_the_plan() -> None:
    res = invoke(app, "run", str(SCENARIOS / "zero-bubble-costs.yaml"), "--json", "--schedule", "1f1b")
    one = json.loads(res.stdout)
    res = invoke(app, "run", str(SCENARIOS / "zero-bubble-costs.yaml"), "--json")
    zb = json.loads(res.stdout)
    assert one["schedule"] == "1f1b" and zb["schedule"] == "zb-h1"
    assert one["step_time_ms"] == pytest.approx(33.0) and zb["step_time_ms"] == pytest.approx(27.0)
    res = invoke(app, "run", GPT, "--json", "--stages", "4", "--schedule", "interleaved-1f1b", "--chunks", "2",
                 "--microbatches", "8", "--partition", "uniform", "--comm", "rendezvous")
    doc = json.loads(res.stdout)
    assert (doc["num_ranks"], doc["num_stages"], doc["chunks"], doc["microbatches"], doc["comm"]) == (4, 8, 2, 8, "rendezvous")
    assert [r["stages"] for r in doc["ranks"]] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert doc["partition"] == [5] * 8


def test_outputs_are_written_and_read_back(tmp_path: Path) -> None:
    html, chrome, own = tmp_path / "t.html", tmp_path / "t.chrome.json", tmp_path / "t.trace.json"
    res = invoke(app, "run", GPT, *SMALL, "--html", str(html), "--trace", str(chrome), "--save-trace", str(own))
    assert res.exit_code == 0, res.output
    assert "<html" in html.read_text()[:2000]
    assert "traceEvents" in json.loads(chrome.read_text())
    trace = Trace.load(own)
    assert trace.meta["schedule"] == "1f1b" and trace.spans
    # running again overwrites ppsim's own files without --force
    assert invoke(app, "run", GPT, *SMALL, "--html", str(html), "--save-trace", str(own)).exit_code == 0


def test_the_experts_all_to_alls_reach_every_output_that_draws_them(tmp_path: Path) -> None:
    """run works out where a MoE step's all-to-alls fall only for an output that draws them; the
    figures printed are the same either way."""
    moe = str(SCENARIOS / "moe-cpu.yaml")
    chrome, own = tmp_path / "m.chrome.json", tmp_path / "m.trace.json"
    res = invoke(app, "run", moe, "--json", "--trace", str(chrome), "--save-trace", str(own))
    assert res.exit_code == 0, res.output
    spans = Trace.load(own).meta["alltoall_spans"]
    assert spans and all(spans)  # every pipeline rank exchanges its experts' tokens
    slices = [e for e in json.loads(chrome.read_text())["traceEvents"] if e.get("cat") == "alltoall"]
    assert len(slices) == sum(len(r) for r in spans)
    alone = invoke(app, "run", moe, "--json")
    assert alone.exit_code == 0 and json.loads(alone.stdout) == json.loads(res.stdout)


def test_outputs_never_clobber_user_files(tmp_path: Path) -> None:
    mine = tmp_path / "notes.json"
    mine.write_text('{"my": "notes"}')
    res = invoke(app, "run", GPT, *SMALL, "--save-trace", str(mine))
    assert res.exit_code == 1
    assert "not written by ppsim" in res.output and "--force" in res.output
    assert mine.read_text() == '{"my": "notes"}'
    res = invoke(app, "run", GPT, *SMALL, "--html", GPT)
    assert res.exit_code == 1 and "input of this command" in res.output
    res = invoke(app, "run", GPT, *SMALL, "--trace", str(tmp_path / "missing" / "t.json"))
    assert res.exit_code == 1 and "does not exist" in res.output
    assert invoke(app, "run", GPT, *SMALL, "--save-trace", str(mine), "--force").exit_code == 0


def test_schedules_lists_one_line_each_with_its_capabilities() -> None:
    from ppsim.plan.schedules import SCHEDULES

    res = invoke(app, "schedules")
    lines = res.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["schedule", "chunks", "placement"]
    rows = {line.split()[0]: line.split() for line in lines[1:len(SCHEDULES) + 1]}
    assert list(rows) == list(SCHEDULES)
    assert rows["zb-v"][1:4] == ["2", "v", "I"] and rows["1f1b"][1:4] == ["1", "loop", "B"]
    assert "file:PATH" in res.stdout


def test_plan_prints_the_grid(tmp_path: Path) -> None:
    res = invoke(app, "plan", GPT, "--stages", "4", "--microbatches", "6")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[1].split() == ["step", "rank", "0", "rank", "1", "rank", "2", "rank", "3"]
    assert lines[2].split() == ["0", "0F0"]
    assert lines[5].split() == ["3", "0F3", "1F2", "2F1", "3F0"]
    res = invoke(app, "plan", GPT, "--stages", "2", "--microbatches", "2", "--comms")
    assert "SEND_F" in res.stdout and "RECV_B" in res.stdout and "OPT" in res.stdout
    saved = tmp_path / "plan.json"
    assert invoke(app, "plan", GPT, "--stages", "2", "--microbatches", "2", "--save", str(saved)).exit_code == 0
    again = invoke(app, "plan", str(saved))
    assert again.exit_code == 0 and "0F0" in again.stdout
    csv = invoke(app, "plan", str(saved), "--csv")
    assert csv.stdout.splitlines()[0] == "0F0,0F1,0B0,0B1"


def test_plan_file_with_a_bad_plan_shows_the_grid(tmp_path: Path) -> None:
    bad = {"format": "ppsim-plan", "schedule": "x", "num_ranks": 2, "num_microbatches": 1, "chunks": 1,
           "stage_to_rank": [0, 1], "actions": [["0B0", "0F0"], ["1F0", "1B0"]]}
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    res = invoke(app, "plan", str(f))
    assert res.exit_code == 1
    assert "runs before its forward" in res.output and ">>0B0<<" in res.output


@pytest.mark.parametrize(
    "args,code,words",
    [
        (["run", "missing.yaml"], 1, "does not exist"),
        (["run", GPT, "--schedule", "nope"], 2, "unknown schedule"),  # an option's value: bad usage
        (["run", GPT, "--stages", "0"], 2, "--stages"),
        (["run", GPT, "--partition", "weird"], 2, "--partition"),
        (["run", GPT, "--comm", "carrier-pigeon"], 2, "--comm"),
        (["plan", GPT, "--schedule", "nope"], 2, "unknown schedule"),
        (["sweep", GPT, "--microbatches", "4,x"], 2, "--microbatches"),
        (["sweep", GPT, "--stages", "4,,8"], 2, "lists an empty value"),
        (["compare-schedules", GPT, "--schedules", "1f1b,nope"], 2, "--schedules"),
        (["tui", GPT, GPT], 2, "one scenario"),
        (["run", GPT, "--bogus"], 2, "No such option"),
        (["frobnicate"], 2, "No such command"),
    ],
)
def test_exit_codes(args: list[str], code: int, words: str) -> None:
    res = invoke(app, *args)
    assert res.exit_code == code, res.output
    assert words in res.output
    assert "Traceback" not in res.output


def test_console_script_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {layers: 8, hidden: 256, heads: 4, seq_len: 128, vocab: 1000}\npipeline: {stages: four}\n")
    proc = subprocess.run([sys.executable, "-m", "ppsim.cli", "run", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[0].startswith("error: pipeline.stages")
    assert proc.stdout == ""


def test_outputs_are_ordinary_files(tmp_path: Path) -> None:
    import os
    import stat

    out = tmp_path / "t.json"
    assert invoke(app, "run", GPT, *SMALL, "--save-trace", str(out)).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_error_text_is_printed_verbatim(capsys: pytest.CaptureFixture[str]) -> None:
    """Square brackets in a message (extras, paths) are not eaten as markup."""
    import typer

    from ppsim.cli.common import fail
    from ppsim.errors import PpsimError

    with pytest.raises(typer.Exit) as exit_info:
        fail(PpsimError("install it with: pip install 'ppsim[tui]' (see out[1]/[bold]x[/])"))
    assert exit_info.value.exit_code == 1
    assert "pip install 'ppsim[tui]' (see out[1]/[bold]x[/])" in capsys.readouterr().err


def test_tune_ray_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    res = invoke(app, "tune", GPT, "--gpus", "8", "--executor", "ray", "--max-stages", "2")
    assert res.exit_code == 1
    assert "pip install 'ppsim[ray]'" in res.output and "Traceback" not in res.output


def test_an_unknown_schedule_in_the_scenario_file_is_bad_input(tmp_path: Path) -> None:
    """In the file it is input (exit 1, naming the key); on the command line it is usage (exit 2)."""
    f = tmp_path / "s.yaml"
    f.write_text(Path(GPT).read_text().replace("schedule: 1f1b", "schedule: nope"))
    res = invoke(app, "run", str(f))
    assert res.exit_code == 1, res.output
    assert "pipeline.schedule: unknown schedule 'nope'" in " ".join(res.output.split())


@pytest.mark.parametrize("schedule, scenario, chunks, balanced", [
    ("zb-v", GPT, 2, False),  # takes 2 chunks only
    ("interleaved-1f1b", GPT, 2, False),  # 1 chunk would be plain 1F1B: its default, as the TUI picks
    ("zb-v", str(SCENARIOS / "llama3-405b.yaml"), 2, True),  # 8 chunks and 128 layer counts given
    ("1f1b", str(SCENARIOS / "llama3-405b.yaml"), 1, True),
])
def test_a_schedule_without_chunks_runs_its_own_and_says_so(schedule: str, scenario: str, chunks: int,
                                                            balanced: bool) -> None:
    res = invoke(app, "run", scenario, "--schedule", schedule, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["chunks"] == chunks
    note = " ".join(res.stderr.split())
    assert f"schedule {schedule} runs {chunks} chunk" in note and "--chunks chooses" in note
    assert ("partition is balanced" in note) == balanced


def test_the_scenarios_own_chunks_stay_when_the_schedule_takes_them() -> None:
    res = invoke(app, "run", str(SCENARIOS / "llama3-405b.yaml"), "--schedule", "interleaved-zb", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["chunks"] == 8 and "chunk" not in res.stderr


# ----- progress on stderr -----------------------------------------------------------------------
def test_sweep_shows_a_progress_bar_on_a_terminal_and_keeps_json_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import ppsim.cli.common as common

    screen = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=screen, force_terminal=True, width=160))
    res = invoke(app, "sweep", GPT, "--microbatches", "8,16", "--stages", "4,8", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # the bar never reaches stdout
    assert len(doc["points"]) == 4
    drawn = screen.getvalue()
    for words in ("sweeping", "0/4", "stages 8, micro-batches 16", "4/4", "elapsed", "left"):
        assert words in drawn, words


def test_sweep_draws_no_bar_when_stderr_is_not_a_terminal() -> None:
    res = invoke(app, "sweep", GPT, "--microbatches", "8,16", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["points"] and "elapsed" not in res.stderr


def test_the_plan_line_names_every_choice_of_the_plan() -> None:
    """Tensor parallelism, the device count, recomputation and ZeRO are part of the plan `tune`
    chooses, so `run` says them (it said only the schedule, ranks, micro-batches and replicas)."""
    res = invoke(app, "run", SCENARIOS / "megatron-gpt3-175b.yaml", "--zero-stage", "1")
    words = " ".join(res.output.split())  # the row may wrap in a narrow terminal
    plan = words[words.index("plan "):words.index(" partition ")]
    for part in ("data parallel 8", "tensor parallel 8", "(1,024 devices)", "recompute full", "ZeRO-1"):
        assert part in plan, (part, plan)


@pytest.mark.parametrize("program", ["ppsim", "ppexec"])
def test_version_prints_the_installed_distributions_version(program: str) -> None:
    """``--version`` answers before any command (and needs no torch for ppexec's)."""
    import importlib
    import importlib.metadata

    cli = importlib.import_module(f"{program}.cli")
    res = invoke(cli.app, "--version")
    assert res.exit_code == 0, res.output
    assert res.output == f"{program} {importlib.metadata.version('ppsim')}\n"


@pytest.mark.parametrize("args", [
    ("run", str(SCENARIOS / "megatron-gpt3-175b.yaml")),
    ("compare-schedules", GPT, "--schedules", "all", "--microbatches", "16"),
    ("sweep", GPT, "--stages", "2,4,8", "--microbatches", "16,32"),
    ("schedules",),
], ids=lambda a: a[0])
def test_output_that_is_not_a_terminal_cuts_no_figure(args: tuple[str, ...]) -> None:
    """A pipe, a file or a CI log gets the tables at their natural width, not cut to 80 columns."""
    res = invoke(app, *args)
    assert res.exit_code == 0, res.output
    assert "…" not in res.output
    if args[0] == "run":
        doc = json.loads(invoke(app, *args, "--json").stdout)
        for r in doc["ranks"]:
            assert f"{r['busy_ms']:,.3f}" in res.output
        assert f"{doc['step_time_ms']:,.3f} ms" in res.output


def _fast_profile(tmp_path: Path, by: float) -> Path:
    """tests/data/tiny-cpu.profile.yaml with every layer's times and overheads divided by ``by``."""
    import yaml

    doc = yaml.safe_load((DATA / "tiny-cpu.profile.yaml").read_text())
    for part in (doc["embedding"], doc["block"], doc["head"], *doc["overheads"].values()):
        for key in part:
            if key.endswith("_ms"):
                part[key] /= by
    path = tmp_path / "fast.profile.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("extra", "costs_from", "words"), [
    ((), "model", "datasheet: cpu's 0.05 TFLOP/s fp32 peak at 50 % efficiency (the device's)"),
    (("--profile", "PROFILE"), "profile", "measured: profile PROFILE (on vm, x86_64, gloo, 2 ranks)"),
])
def test_the_summary_says_where_the_costs_come_from(tmp_path: Path, extra: tuple[str, ...], costs_from: str,
                                                    words: str) -> None:
    profile = str(_fast_profile(tmp_path, 1.0))
    args = [a.replace("PROFILE", profile) for a in extra]
    res = invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"), *args)
    assert res.exit_code == 0, res.output
    assert f"costs          {words.replace('PROFILE', profile)}" in res.output
    doc = json.loads(invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"), *args, "--json").stdout)
    assert doc["costs_from"] == costs_from and doc["costs_source"] == words.replace("PROFILE", profile)
    assert doc["mfu_above_peak"] is None and doc["mfu"] < 1


def test_explicit_costs_are_named_as_such() -> None:
    res = invoke(app, "run", str(SCENARIOS / "zero-bubble-costs.yaml"))
    assert "costs          explicit: the scenario's costs section" in res.output


def test_mfu_above_100_percent_names_the_nominal_peak_as_the_reason(tmp_path: Path) -> None:
    """Measured costs faster than the catalogue's nominal peak (a CPU's figure is a guess) give an
    MFU over 100 %: said, with the figures and the fix, never printed bare."""
    fast = _fast_profile(tmp_path, 100.0)
    doc = json.loads(invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"), "--profile", fast, "--json").stdout)
    assert doc["mfu"] > 1
    achieved = doc["mfu"] * 0.05
    assert doc["mfu_above_peak"] == (f"the profile's measured times imply {achieved:,.3g} TFLOP/s per device, above "
                                     "cpu's nominal 0.05 TFLOP/s fp32 peak: that peak is below what this machine does; "
                                     "give its real peak in a device file (hardware.device_file)")
    res = invoke(app, "run", str(SCENARIOS / "tiny-cpu.yaml"), "--profile", fast)
    mfu_line = next(line for line in res.output.splitlines() if line.startswith("MFU"))
    assert f"{100 * doc['mfu']:.1f} %  above 100 %: the profile's measured times imply" in mfu_line


def test_a_precision_the_device_lacks_is_the_error_before_any_pricing_note(tmp_path: Path) -> None:
    """FP8 on an A100 with HybridEP's dispatch (which the A100 has no measured share for): the error
    alone, not a note on how the dispatch would have been priced first."""
    import yaml

    from ppsim.inputs.scenario import load

    data = load(SCENARIOS / "qwen3-30b-a3b.yaml").model_dump(exclude_none=True)
    data["hardware"]["device"] = "a100-80g"
    path = tmp_path / "a100.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke(app, "run", path)
    assert result.exit_code == 1 and "note:" not in result.output
    assert "training.fp8 needs a device with FP8 Tensor Cores; a100-80g has none" in result.output
