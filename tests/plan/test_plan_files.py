"""``schedule: file:PATH``: a plan read from a ppsim plan JSON or torch's schedule CSV is validated,
simulated and prepared for a run like any registered schedule; bad files are one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import GPT_YAML, SCENARIOS, gpt, invoke
from ppsim.cli import app
from ppsim.errors import PpsimError
from ppsim.plan import schedules
from ppsim.prediction import predict


def test_a_saved_plan_json_predicts_what_its_schedule_does(tmp_path: Path) -> None:
    s = gpt().with_overrides(schedule="zb-h1", stages=4, microbatches=8)
    direct = predict(s)
    path = tmp_path / "plan.json"
    path.write_text(direct.plan.to_json())  # lowered: its messages are placed again on reading
    from_file = predict(s.with_overrides(schedule=f"file:{path}"))
    assert from_file.plan.schedule == f"file:{path}"
    assert from_file.trace.meta["stage_to_rank"] == direct.trace.meta["stage_to_rank"]
    assert [(s.rank, s.action, s.start, s.end) for s in from_file.trace.spans] == [
        (s.rank, s.action, s.start, s.end) for s in direct.trace.spans]


@pytest.mark.parametrize("with_comms", [False, True])
def test_torchs_csv_with_bubbles_or_its_own_messages_is_read(tmp_path: Path, with_comms: bool) -> None:
    pytest.importorskip("torch")
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ops = get_schedule_ops("ZBVZeroBubble", 4, 8, num_stages_per_rank=2, with_comms=with_comms)
    if with_comms:  # torch's lowering: its sends and receives are placed again by ppsim's
        assert any("SEND_F" in str(a) for r in ops for a in r)
    else:  # torch's bubbles: empty cells
        assert any(a is None for r in ops for a in r)
    path = tmp_path / "zbv.csv"
    path.write_text("\n".join(",".join("" if a is None else str(a) for a in r) for r in ops) + "\n")
    s = gpt().with_overrides(stages=4, microbatches=8, chunks=2)
    mine = predict(s.with_overrides(schedule=f"file:{path}"))
    ours = predict(s.with_overrides(schedule="zb-v"))
    assert mine.plan.stage_to_rank == ours.plan.stage_to_rank == (0, 1, 2, 3, 3, 2, 1, 0)
    assert [(x.rank, x.action, x.start, x.end) for x in mine.trace.spans] == [
        (x.rank, x.action, x.start, x.end) for x in ours.trace.spans]


def test_torchs_dualpipev_csv_reads_as_ppsims_dualpipev(tmp_path: Path) -> None:
    """Overlapped actions in a file: placement and sizes come from every part of them."""
    pytest.importorskip("torch")
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    ops = get_schedule_ops("DualPipeV", 2, 4, num_stages_per_rank=2)
    path = tmp_path / "dualpipev.csv"
    path.write_text("\n".join(",".join("" if a is None else str(a) for a in r) for r in ops) + "\n")
    info = schedules.get(f"file:{path}")
    assert info.overlaps and info.splits_backward and info.training
    s = gpt().with_overrides(stages=2, microbatches=4, chunks=2)
    mine = predict(s.with_overrides(schedule=f"file:{path}"))
    ours = predict(s.with_overrides(schedule="dualpipev"))
    assert mine.plan.stage_to_rank == ours.plan.stage_to_rank == (0, 1, 1, 0)
    assert [(x.rank, x.action, x.start, x.end) for x in mine.trace.spans] == [
        (x.rank, x.action, x.start, x.end) for x in ours.trace.spans]


def test_a_plan_file_runs_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(schedules.build("1f1b", 4, 8).to_csv())
    res = invoke(app, "run", GPT_YAML, "--stages", "4", "--microbatches", "8", "--schedule", f"file:{path}")
    assert res.exit_code == 0, res.output
    assert "file:" in res.stdout


def _write(tmp_path: Path, rows: list[list[str]]) -> Path:
    path = tmp_path / "plan.csv"
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    return path


def test_a_plan_that_cannot_finish_is_refused_with_the_grid(tmp_path: Path) -> None:
    # rank 1 waits for micro-batch 1's forward, which rank 0 runs only after micro-batch 0's
    # backward, which needs rank 1's: a cycle
    path = _write(tmp_path, [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1F0", "1B0", "1B1"]])
    res = invoke(app, "run", GPT_YAML, "--stages", "2", "--microbatches", "2", "--schedule", f"file:{path}")
    assert res.exit_code == 1
    assert "cannot finish" in res.output and "rank 0" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("rows, expected", [
    ([["0F0", "0B0"], ["0F1", "1F0", "1B0"]], "stage 0 has actions on rank 0 and rank 1"),
    ([["0F0", "0B0", "0X0"]], "unknown kind 'X'"),
    ([[""], [""]], "holds no actions"),
])
def test_malformed_csv_is_one_line_naming_the_problem(tmp_path: Path, rows: list[list[str]], expected: str) -> None:
    path = _write(tmp_path, rows)
    with pytest.raises(PpsimError, match=expected):
        schedules.get(f"file:{path}")


def test_sizes_that_do_not_match_the_file_name_the_field_to_set(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(schedules.build("gpipe", 4, 8).to_csv())
    res = invoke(app, "run", GPT_YAML, "--stages", "2", "--microbatches", "8", "--schedule", f"file:{path}")
    assert res.exit_code == 1 and "set stages: 4" in res.output
    res = invoke(app, "run", GPT_YAML, "--stages", "4", "--microbatches", "6", "--schedule", f"file:{path}")
    assert res.exit_code == 1 and "pipeline.microbatches" in res.output and "use 8" in res.output
    res = invoke(app, "run", GPT_YAML, "--stages", "4", "--schedule", f"file:{tmp_path / 'nope.csv'}")
    assert res.exit_code == 1 and "nope.csv'" in res.output and "does not exist" in res.output  # a long path is shortened


def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(schedules.build("gpipe", 2, 4).to_csv())
    assert not schedules.get(f"file:{path}").splits_backward
    path.write_text(schedules.build("zb-h1", 2, 4).to_csv() + "\n")
    assert schedules.get(f"file:{path}").splits_backward


def test_ppexec_prepares_a_plan_file_for_the_torch_runtime(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from ppexec.launch.prepare import prepare
    from ppsim.inputs.scenario import load

    path = tmp_path / "v.csv"
    path.write_text(schedules.build("zb-v", 2, 4).to_csv())
    s = load(SCENARIOS / "tiny-cpu.yaml").with_overrides(schedule=f"file:{path}", chunks=2)
    prepared = prepare(s)
    assert prepared.runtime == "torch" and prepared.plan.stage_to_rank == (0, 1, 1, 0)
    direct = prepare(s.with_overrides(schedule="zb-v"))
    assert prepared.plan.actions == direct.plan.actions
