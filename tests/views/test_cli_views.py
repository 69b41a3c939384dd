"""`ppsim compare-schedules`, `ppsim sweep` and `--png`: tables, pages, figures that match the
predictions, exit codes, and never overwriting what the user wrote."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from browser import find_chromium

from conftest import GPT_YAML, SCENARIOS, invoke
from ppsim.cli import app
from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.search.sweep import grid_variants, schedule_variants
from ppsim.trace.metrics import summarize
from ppsim.views.render import png as png_module
from ppsim.views.render.schedules_html import schedules_figure
from ppsim.views.render.sweep_html import sweep_figure

GPT = str(GPT_YAML)
INTERLEAVED = str(SCENARIOS / "gpt-interleaved.yaml")
needs_browser = pytest.mark.skipif(find_chromium() is None, reason="no chromium: `make test` installs it")


# ----- compare-schedules ---------------------------------------------------------------------------
def test_compare_schedules_table_and_page(tmp_path: Path) -> None:
    page = tmp_path / "s.html"
    r = invoke(app, "compare-schedules", GPT, "--stages", "4", "--microbatches", "8", "--schedules", "gpipe,1f1b,zb-h1",
               "--html", str(page))
    assert r.exit_code == 0, r.output
    base = load(GPT).with_overrides(stages=4, microbatches=8)
    for name in ("gpipe", "1f1b", "zb-h1"):
        s = summarize(predict(base.with_overrides(schedule=name)).trace)
        row = next(line for line in r.stdout.splitlines() if f" {name} " in line)
        assert f"{s.step_time_ms:,.2f}" in row and f"{100 * s.bubble_fraction:.1f} %" in row
    assert page.read_text().startswith("<!-- ppsim -->")


def test_compare_schedules_figure_values_are_the_predictions() -> None:
    base = load(INTERLEAVED)
    variants = schedule_variants(base, ["1f1b", "interleaved-1f1b", "zb-h1"])
    assert variants[0].overrides == {"schedule": "1f1b", "chunks": 1} and variants[0].notes
    assert variants[1].overrides == {"schedule": "interleaved-1f1b"} and not variants[1].notes
    fig = schedules_figure(variants, base.name)
    step = next(d for d in fig.data if d.name == "step time")
    bubble = next(d for d in fig.data if d.name == "bubble")
    assert list(step.y) == ["1f1b", "interleaved-1f1b", "zb-h1"]
    assert list(step.x) == pytest.approx([v.summary.step_time_ms for v in variants])
    assert list(bubble.x) == pytest.approx([100 * v.summary.bubble_fraction for v in variants])
    # interleaving with 2 chunks shrinks the bubble against plain 1F1B on the same model and batch
    assert bubble.x[1] < bubble.x[0]
    timeline_bars = [d for d in fig.data if d.type == "bar" and d.orientation == "h"]
    # the small timelines draw each schedule's compute (the messages are on `ppsim run`'s page)
    assert sum(len(d.base) for d in timeline_bars) == sum(s.lane == "compute" for v in variants for s in v.trace.spans)
    assert sum(1 for d in timeline_bars if d.showlegend) == len({d.name for d in timeline_bars})


def test_a_schedule_that_cannot_run_is_named_and_the_others_still_run() -> None:
    r = invoke(app, "compare-schedules", INTERLEAVED, "--microbatches", "6")
    assert r.exit_code == 0, r.output
    assert "interleaved-1f1b cannot run the scenario" in r.stderr and "multiple of p" in r.stderr
    assert "cannot run" in next(line for line in r.stdout.splitlines() if "interleaved-1f1b" in line)
    assert all(any(f" {n} " in line for line in r.stdout.splitlines()) for n in ("gpipe", "1f1b", "zb-h1"))


def test_no_schedule_can_run_is_exit_1() -> None:
    r = invoke(app, "compare-schedules", INTERLEAVED, "--microbatches", "6", "--schedules", "interleaved-1f1b")
    assert r.exit_code == 1 and "no schedule can run" in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("schedules", ["gpipe,nope", "", "1f1b,1f1b"])
def test_bad_schedule_list_is_exit_2(schedules: str) -> None:
    r = invoke(app, "compare-schedules", GPT, "--schedules", schedules)
    assert r.exit_code == 2 and "--schedules" in r.output


# ----- sweep -------------------------------------------------------------------------------------
def test_sweep_table_and_figure_match_the_predictions() -> None:
    r = invoke(app, "sweep", GPT, "--microbatches", "8,16", "--stages", "4,8", "--fixed", "replica")
    assert r.exit_code == 0, r.output
    base = load(GPT)
    variants = grid_variants(base, [4, 8], [8, 16], fixed="replica")
    assert [(v.overrides["stages"], v.overrides["microbatches"]) for v in variants] == [
        (p, m) for p in (4, 8) for m in (8, 16)]
    for v in variants:
        s = summarize(predict(base.with_overrides(stages=v.overrides["stages"],
                                                  microbatches=v.overrides["microbatches"])).trace)
        assert v.summary.step_time_ms == pytest.approx(s.step_time_ms)
        assert any(f"{s.step_time_ms:,.2f}" in line and f"{100 * s.bubble_fraction:.1f} %" in line
                   for line in r.stdout.splitlines())
    fig = sweep_figure(variants, "microbatches", "stages", base.name)
    lines = {(d.name, d.yaxis): d for d in fig.data}
    assert list(lines[("stages 8", "y")].x) == [8, 16]
    assert list(lines[("stages 8", "y")].y) == pytest.approx([v.summary.throughput_samples_per_s for v in variants[2:]])
    assert list(lines[("stages 4", "y2")].y) == pytest.approx([100 * v.summary.bubble_fraction for v in variants[:2]])
    # more micro-batches: a smaller bubble (the FAQ this command answers)
    assert lines[("stages 4", "y2")].y[1] < lines[("stages 4", "y2")].y[0]


def test_a_skew_sweep_prices_each_skew_as_the_scenario_would() -> None:
    """--skew sets model.moe.skew point by point: each the prediction of the scenario with it, the
    step longer as the busiest expert rank carries more; as lines beside micro-batch counts."""
    mixtral = SCENARIOS / "mixtral-8x7b.yaml"
    r = invoke(app, "sweep", mixtral, "--skew", "1,1.5", "--json")
    assert r.exit_code == 0, r.output
    import json

    points = json.loads(r.stdout)["points"]
    assert [p["skew"] for p in points] == [1.0, 1.5]
    base = load(mixtral)
    assert base.model is not None and base.model.moe is not None
    for p in points:
        moe = base.model.moe.model_copy(update={"skew": p["skew"]})
        s = base.model_copy(update={"model": base.model.model_copy(update={"moe": moe})})
        assert p["step_time_ms"] == pytest.approx(summarize(predict(s).trace).step_time_ms)
    assert points[1]["step_time_ms"] > points[0]["step_time_ms"]
    variants = grid_variants(base, None, [8, 16], skews=[1.0, 2.0])
    fig = sweep_figure(variants, "microbatches", "skew", base.name)
    assert {d.name for d in fig.data} == {"skew 1.0", "skew 2.0"}


def test_a_skew_sweep_of_a_dense_model_says_it_has_no_experts() -> None:
    r = invoke(app, "sweep", GPT, "--skew", "1,2")
    assert r.exit_code == 1 and "--skew sets model.moe.skew" in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("args", [[], ["--microbatches", "4,x"], ["--stages", "0,2"], ["--microbatches", "4,4"],
                                  ["--skew", "0.5"], ["--skew", "1,1"], ["--skew", "a"],
                                  ["--skew", "1,2", "--stages", "2,4", "--microbatches", "8,16"]])
def test_sweep_bad_values_are_exit_2(args: list[str]) -> None:
    r = invoke(app, "sweep", GPT, *args)
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output


def test_sweep_where_nothing_runs_is_exit_1_naming_why() -> None:
    r = invoke(app, "sweep", GPT, "--stages", "1000")
    assert r.exit_code == 1 and "no point of the sweep can run" in r.stderr


def test_missing_scenario_is_exit_1(tmp_path: Path) -> None:
    for cmd in (["sweep", str(tmp_path / "no.yaml"), "--stages", "2"], ["compare-schedules", str(tmp_path / "no.yaml")]):
        r = invoke(app, *cmd)
        assert r.exit_code == 1 and "Traceback" not in r.output


@pytest.mark.parametrize("command", [["sweep", GPT, "--stages", "2,4"], ["compare-schedules", GPT]])
def test_pages_never_overwrite_a_user_file(tmp_path: Path, command: list[str]) -> None:
    mine = tmp_path / "mine.html"
    mine.write_text("my notes")
    r = invoke(app, *command, "--html", str(mine))
    assert r.exit_code == 1 and "--html" in r.stderr and "--force" in r.stderr
    assert mine.read_text() == "my notes"
    r = invoke(app, *command, "--html", str(tmp_path / "same.html"), "--png", str(tmp_path / "same.html"))
    assert r.exit_code == 1 and "same file" in r.stderr


# ----- --png ---------------------------------------------------------------------------------------
def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@needs_browser
@pytest.mark.slow  # draws PNGs in a browser
def test_png_of_each_view_is_written_marked_and_overwritable(tmp_path: Path) -> None:
    for cmd in (["run", GPT, "--stages", "4", "--microbatches", "8"], ["sweep", GPT, "--microbatches", "8,16"],
                ["compare-schedules", GPT, "--stages", "4", "--microbatches", "8", "--schedules", "1f1b,zb-h1"]):
        out = tmp_path / f"{cmd[0]}.png"
        for _ in range(2):  # the second run overwrites ppsim's own PNG without --force
            r = invoke(app, *cmd, "--png", str(out))
            assert r.exit_code == 0, r.output
        width, height = png_size(out)
        assert width == png_module.WIDTH and height > 300
        assert png_module.PNG_MARKER in out.read_bytes()[:200]


def test_png_without_a_browser_is_a_clear_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(png_module, "find_browser", lambda: None)
    out = tmp_path / "t.png"
    for cmd in (["run", GPT], ["sweep", GPT, "--stages", "2"], ["compare-schedules", GPT]):
        r = invoke(app, *cmd, "--png", str(out))
        assert r.exit_code == 1, r.output
        assert "--png: needs Chrome or Chromium" in r.stderr and "apt-get install chromium" in r.stderr
        assert not out.exists()


def test_png_with_a_browser_path_that_is_not_a_program(tmp_path: Path) -> None:
    r = invoke(app, "run", GPT, "--png", str(tmp_path / "t.png"), env={"BROWSER_PATH": str(tmp_path / "nothing")})
    assert r.exit_code == 1 and "BROWSER_PATH" in r.stderr


def test_a_drawing_that_never_ends_is_ended_with_what_it_started(tmp_path: Path) -> None:
    """A browser that never answers makes an error after the timeout, not a hang; the child and the
    process it started (the browser) are gone."""
    import sys
    import time

    pid_file = tmp_path / "grandchild.pid"
    hangs = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
             f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    start = time.monotonic()
    why = png_module.draw("{}", tmp_path / "t.png", 10, 10, 3.0, program=(sys.executable, "-c", hangs))
    assert why == "no answer in 3 s" and time.monotonic() - start < 30
    status = Path(f"/proc/{int(pid_file.read_text())}/status")
    for _ in range(50):  # killed: gone, or a zombie until whoever adopted it reaps it
        if not status.exists() or "\nState:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the drawing's own child outlived it")
    fails = (sys.executable, "-c", "import sys; sys.exit('kaleido: the browser closed')")
    assert png_module.draw("{}", tmp_path / "t.png", 10, 10, 30.0, program=fails) == "kaleido: the browser closed"


def test_a_browser_that_never_draws_is_a_clear_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(png_module, "draw", lambda *a, **k: calls.append(a) or "no answer in 180 s")
    out = tmp_path / "t.png"
    r = invoke(app, "run", GPT, "--png", str(out))
    assert r.exit_code == 1, r.output
    assert "--png: the browser could not draw the PNG (no answer in 180 s)" in r.stderr and not out.exists()
    assert len(calls) == 2  # tried again once


def test_mark_png_inserts_a_valid_text_chunk(tmp_path: Path) -> None:
    import zlib

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    chunk = lambda kind, body: struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))  # noqa: E731
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\x00")) + chunk(b"IEND", b"")
    path = tmp_path / "x.png"
    path.write_bytes(raw)
    png_module.mark_png(path)
    data = path.read_bytes()
    pos, kinds = 8, []
    while pos < len(data):  # walk the chunks: lengths and CRCs must all be right
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body)
        kinds.append(kind)
        pos += 12 + n
    assert kinds == [b"IHDR", b"tEXt", b"IDAT", b"IEND"]


def test_an_interleaved_schedule_gets_two_chunks_when_the_scenario_has_one() -> None:
    base = load(GPT).with_overrides(stages=4, microbatches=8)
    assert base.pipeline.chunks == 1
    one_f_one_b, interleaved = schedule_variants(base, ["1f1b", "interleaved-1f1b"])
    assert interleaved.overrides["chunks"] == 2 and interleaved.summary is not None
    assert interleaved.summary.chunks == 2 and "chunks 2" in interleaved.notes[0]
    assert interleaved.summary.step_time_ms != one_f_one_b.summary.step_time_ms
    # where two chunks cannot run (stages x 2 > layers), it falls back to one, and says why
    tiny = base.with_overrides(stages=32, microbatches=32)
    (fallback,) = schedule_variants(tiny, ["interleaved-1f1b"])
    assert "chunks" not in fallback.overrides and "chunks 2 cannot run here" in fallback.notes[0]
