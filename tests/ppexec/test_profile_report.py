"""What `ppexec profile` prints about its measurements: a link whose time does not grow with the
bytes is "not measurable", not a million GB/s, and a full-recompute forward cheaper than a selective
one is explained (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_profile import make_profile

from ppexec.cli import _print_profile
from ppsim.inputs.profile import LinkProfile, RecomputeTimes


def printed(capsys: pytest.CaptureFixture[str], **update: object) -> str:
    _print_profile(make_profile().model_copy(update=update))
    return " ".join(capsys.readouterr().out.split())


def test_an_unmeasurable_bandwidth_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, link=LinkProfile(latency_us=40.0, bandwidth_gb_s=1e6))  # fit_link's 1e12 bytes/ms
    assert "bandwidth not measurable" in out and "1000000" not in out
    assert "costs its latency only" in out


def test_a_measured_bandwidth_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys)
    assert "bandwidth 2.000 GB/s" in out and "not measurable" not in out


def test_a_cheaper_full_recompute_forward_is_explained(capsys: pytest.CaptureFixture[str]) -> None:
    cheaper = {"selective": RecomputeTimes(forward_ms=0.05, backward_ms=0.3),
               "full": RecomputeTimes(forward_ms=-0.02, backward_ms=0.9)}
    assert "pays the recomputation in its backward" in printed(capsys, recompute=cheaper)
    dearer = {"selective": RecomputeTimes(forward_ms=0.01, backward_ms=0.3),
              "full": RecomputeTimes(forward_ms=0.02, backward_ms=0.9)}
    assert "pays the recomputation" not in printed(capsys, recompute=dearer)


def test_a_mixture_of_experts_profile_shows_its_moe_block(capsys: pytest.CaptureFixture[str]) -> None:
    """The MoE block the predictions price is in the table beside the dense block, not only in the file."""
    assert "moe_block" not in printed(capsys)
    block = make_profile().block
    moe = block.model_copy(update={"forward_ms": 1.54, "params": 329216})
    out = printed(capsys, moe_block=moe)
    assert "│ moe_block │ 1.540 │" in out and "329,216" in out


def test_a_mixture_of_experts_profile_says_what_its_steps_paid_for_an_exchange(capsys: pytest.CaptureFixture[str]) -> None:
    assert "expert-parallel run" not in printed(capsys)
    machine = {**make_profile().machine, "exchange_ms": {"idle": 0.36, "in_step_mean": 1.448, "in_step_median": 0.6,
                                                         "exchanges": 640}}
    link = {"alltoall": LinkProfile(latency_us=1406.9, bandwidth_gb_s=2.1)}
    out = printed(capsys, machine=machine, collectives=link)
    assert ("a dispatch's exchange took 1.448 ms on average (median 0.600) from the later rank's arrival over the "
            "640 all-to-alls of the expert-parallel run" in out and "0.360 ms timed back to back" in out)
    assert "alltoall (as a ring's link): latency 1406.9 us (raised to what the steps paid, below)" in out
    assert "raised" not in printed(capsys, collectives=link)  # an older profile: the fit as timed


def test_a_mixture_of_experts_profile_says_how_its_run_routed(capsys: pytest.CaptureFixture[str]) -> None:
    assert "routing:" not in printed(capsys)
    out = printed(capsys, routing_skew={4: 1.7, 2: 1.33})
    assert ("routing: the busiest rank's token copies over the mean, as the expert-parallel run routed them, at "
            "expert parallelism 2 1.33, 4 1.70 (beyond 2: its two ranks' copies split further; a plan whose "
            "scenario gives no model.moe.skew is priced at its expert parallelism's)"
            in " ".join(out.split()))


def test_a_scenario_that_cannot_be_profiled_is_refused_before_the_work_is_announced(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from conftest import SCENARIOS
    from ppexec.cli import app

    res = CliRunner().invoke(app, ["profile", str(SCENARIOS / "zero-bubble-costs.yaml"), "--out", str(tmp_path / "p.yaml")])
    assert res.exit_code == 1 and "this scenario has only costs" in res.output
    assert "profiling on 2 ranks" not in res.output and not (tmp_path / "p.yaml").exists()
