"""``ppexec rank``: one rank of a plan run alone in plan order, its model states exact, its
measured trace read by ``ppsim compare`` and the TUI, the heaviest rank named as measured, and
bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from conftest import SCENARIOS, invoke  # noqa: E402
from ppexec.cli import app as ppexec_app  # noqa: E402
from ppexec.rank.check import TIGHT, check_rank, predicted_rank  # noqa: E402
from ppsim.api import predict  # noqa: E402
from ppsim.cli import app as ppsim_app  # noqa: E402
from ppsim.inputs.scenario import load  # noqa: E402

TINY = load(SCENARIOS / "tiny-cpu.yaml")
CPU = torch.device("cpu")


@pytest.mark.parametrize("plan", [
    {"schedule": "1f1b"},
    {"schedule": "interleaved-1f1b", "chunks": 2},
    {"schedule": "zb-h1"},
    {"schedule": "dualpipev", "chunks": 2},
    {"schedule": "gpipe", "recompute": "full"},
])
def test_each_rank_runs_the_plans_actions_in_order_with_exact_model_states(plan: dict[str, Any]) -> None:
    s = TINY.with_overrides(**plan)
    prediction = predict(s)
    for r in range(prediction.plan.num_ranks):
        c = check_rank(s, prediction, r, CPU, steps=1, waits=False)
        assert c.order_ok
        assert [str(sp.action) for sp in c.trace.spans] == [str(a) for a in prediction.plan.actions[r]]
        for name, (predicted, measured) in c.model_states.items():
            assert predicted == measured, (r, name)
        assert c.measured_peak_bytes > sum(m for _, m in c.model_states.values()) - c.model_states["gradients"][1]


def test_zero_one_steps_the_replicas_share_and_bf16_keeps_an_fp32_master() -> None:
    """ZeRO-1 over 2 replicas: the optimizer state of one replica's half; in bf16, 12 bytes a
    parameter of it (master, momentum, variance) against the weights' 2, as ppsim counts."""
    s = TINY.with_overrides(data_parallel=2, zero_stage=1)
    data = s.model_dump(exclude_none=True)
    data["model"]["dtype"] = "bf16"
    from ppsim.inputs.scenario import parse_scenario

    s = parse_scenario(data)
    prediction = predict(s)
    c = check_rank(s, prediction, 0, CPU, steps=1, waits=False)
    weights = c.model_states["weights"][1]
    assert c.model_states["optimizer"] == (c.model_states["optimizer"][0], c.model_states["optimizer"][0])
    assert c.model_states["optimizer"][1] == pytest.approx(weights / 2 * 12 / 2, rel=0.01)


def test_the_waits_feed_each_receive_no_sooner_than_predicted() -> None:
    s = TINY
    prediction = predict(s)
    c = check_rank(s, prediction, 1, CPU, steps=1, waits=True)
    arrivals = {str(sp.action): sp.end for sp in prediction.trace.spans if sp.rank == 1 and "RECV" in str(sp.action)}
    for sp in c.trace.spans:
        if str(sp.action) in arrivals:
            assert sp.end >= arrivals[str(sp.action)] - 1e-6


def test_the_measured_rank_reads_into_compare_and_the_tui(tmp_path: Path) -> None:
    result = invoke(ppexec_app, "rank", SCENARIOS / "tiny-cpu.yaml", "--rank", "1", "--steps", "1", "--no-waits",
                    "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert "actions in the plan's order: yes" in result.output and "(exact)" in result.output
    compared = invoke(ppsim_app, "compare", tmp_path / "rank1.predicted.json", tmp_path / "rank1.measured.json",
                      "--json")
    assert compared.exit_code == 0, compared.output
    assert json.loads(compared.output)["matched"] >= len(predict(TINY).plan.actions[1]) - 1
    from ppsim.trace.load import load_trace
    from ppsim.views.tui.state import TuiState

    state = TuiState.from_traces([(p.name, load_trace(p)) for p in
                                  (tmp_path / "rank1.predicted.json", tmp_path / "rank1.measured.json")])
    assert [sh.summary.source for sh in state.shown] == ["simulated", "measured"]


def test_the_heaviest_rank_of_an_uneven_plan_is_named_as_measured(tmp_path: Path) -> None:
    """Three of four blocks on rank 0: its activations and model states outweigh rank 1's."""
    import yaml

    data = TINY.model_dump(exclude_none=True)
    data["pipeline"]["partition"] = [3, 1]
    path = tmp_path / "uneven.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke(ppexec_app, "rank", path, "--rank", "all", "--steps", "1", "--no-waits", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])  # after the note on dropout
    peaks = {r["rank"]: r["peak_memory_bytes"]["measured"] for r in doc["ranks"]}
    assert doc["heaviest_measured"] == max(peaks, key=peaks.__getitem__) == 0


def test_an_interleaved_plans_heaviest_rank_is_the_measured_one() -> None:
    args = ["rank", SCENARIOS / "tiny-cpu.yaml", "--rank", "all", "--steps", "1", "--no-waits",
            "--schedule", "interleaved-1f1b", "--chunks", "2"]
    doc_run = invoke(ppexec_app, *args, "--json")
    assert doc_run.exit_code == 0, doc_run.output
    doc = json.loads(doc_run.output[doc_run.output.index("{"):])
    peaks = {r["rank"]: r["peak_memory_bytes"]["measured"] for r in doc["ranks"]}
    heaviest = max(peaks, key=peaks.__getitem__)
    assert doc["heaviest_measured"] == heaviest
    shown = invoke(ppexec_app, *args)
    assert f"heaviest: rank {heaviest} (" in shown.output


@pytest.mark.parametrize("args, says", [
    (["--rank", "5"], "'5' is not a pipeline rank of this plan: give 0 to 1, or all"),
    (["--rank", "first"], "is not a pipeline rank"),
    (["--rank", "0", "--tensor-parallel", "2"], "ppexec rank runs tensor_parallel 1"),
    (["--rank", "0", "--schedule", "dualpipe"], "runs 2 copies of the model"),
])
def test_bad_input_is_one_line(args: list[str], says: str) -> None:
    result = invoke(ppexec_app, "rank", SCENARIOS / "tiny-cpu.yaml", *args)
    assert result.exit_code == 1 and says in result.output, result.output
    assert "Traceback" not in result.output


def test_the_verdict_never_says_fits_beyond_the_device() -> None:
    from ppexec.rank.check import verdict

    assert verdict(100, 100) == "tight" and verdict(101, 100) == "does not fit"
    assert verdict(int(100 * (1 - TIGHT)) + 1, 100) == "tight" and verdict(50, 100) == "fits"


def test_the_predicted_rank_keeps_the_plans_meta() -> None:
    prediction = predict(TINY)
    one = predicted_rank(prediction, 1)
    assert {sp.rank for sp in one.spans} == {1} and one.meta["num_ranks"] == 2
