"""The profile's own spread: its quartiles, and how far they move a prediction (``ppexec validate``'s
``profile spread``). No process is launched and nothing is timed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import DATA, ROOT, SCENARIOS
from ppexec.measure import profile as fits
from ppexec.measure import stats
from ppexec.results.prediction_check import ProfileSpread, Validation, comparison_doc, profile_at, profile_spread
from ppsim.inputs.profile import LayerTimes, LinkProfile, Overheads, Profile, QuartileTimes, load_profile, shape_of
from ppsim.inputs.scenario import Scenario, load, parse_scenario
from ppsim.prediction import predict
from ppsim.trace.compare import compare_traces

TINY = SCENARIOS / "tiny-cpu.yaml"
RECORDED = DATA / "tiny-cpu.profile.yaml"  # measured before profiles recorded their quartiles
BLOCKS, M = 4, 3


def one_stage_gpipe() -> Scenario:
    """tiny-cpu on one stage, GPipe, no clipping: a step is m x (F + B) + the optimizer step, a
    linear function of the profile's timings (no link, no wait)."""
    doc = yaml.safe_load(TINY.read_text())
    doc["pipeline"].update(stages=1, schedule="gpipe", microbatches=M)
    doc["training"]["grad_clip"] = 0
    return parse_scenario(doc, source="test")


def timings(k: float, link_k: float | None = None) -> dict:
    """Every timing of a profile, scaled by ``k`` (the link's latency by ``link_k``)."""
    def layer(f: float, b: float, w: float, o: float, params: int) -> LayerTimes:
        return LayerTimes(forward_ms=k * f, backward_ms=k * b, weight_grad_ms=k * w, optimizer_ms=k * o, params=params)

    def over(f: float, b: float, o: float, c: float) -> Overheads:
        return Overheads(forward_ms=k * f, backward_ms=k * b, optimizer_ms=k * o, clip_ms=k * c)

    return {
        "embedding": layer(0.1, 0.2, 0.1, 0.3, 100),
        "block": layer(1.0, 2.0, 1.0, 0.5, 1000),
        "head": layer(0.4, 0.8, 0.4, 0.2, 50),
        "overheads": {"first": over(0.3, 0.2, 1.0, 0.5), "middle": over(0.1, 0.1, 0.5, 0.5),
                      "last": over(0.5, 0.4, 2.0, 0.7)},
        "link": LinkProfile(latency_us=100.0 * (link_k or k), bandwidth_gb_s=2.0 / (link_k or k)),
        "clip_allreduce_us": 300.0 * k,
    }


def make_profile(low: float | None = 0.8, high: float | None = 1.5) -> Profile:
    quartiles = {} if low is None or high is None else {
        "low": QuartileTimes(**timings(low)), "high": QuartileTimes(**timings(high))}
    return Profile(shape=shape_of(load(TINY)), **timings(1.0), quartiles=quartiles)


def one_stage_step(k: float) -> float:
    """By hand: one stage is first and last at once (their overheads less the middle's), holds the
    embedding, 4 blocks and the head, and runs m forwards, m backwards and its optimizer step."""
    forward = (0.3 + 0.5 - 0.1) + 0.1 + BLOCKS * 1.0 + 0.4
    backward = (0.2 + 0.4 - 0.1) + 0.2 + BLOCKS * 2.0 + 0.8
    optimizer = (1.0 + 2.0 - 0.5) + 0.3 + BLOCKS * 0.5 + 0.2
    return k * (M * (forward + backward) + optimizer)


def test_a_profile_without_quartiles_still_loads_and_has_no_spread() -> None:
    old = load_profile(RECORDED)
    assert "quartiles" not in RECORDED.read_text()
    assert old.quartiles == {}
    s = load(TINY)
    assert profile_spread(predict(s, old), old) is None


def test_quartiles_survive_the_yaml_file(tmp_path: Path) -> None:
    p = make_profile()
    path = tmp_path / "p.yaml"
    path.write_text(p.to_yaml())
    assert load_profile(path).model_dump() == p.model_dump()


def test_the_profile_at_a_quartile_takes_every_recorded_timing_from_it() -> None:
    p = make_profile(0.8, 1.5)
    low = profile_at(p, "low")
    assert low.block.forward_ms == pytest.approx(0.8) and low.overheads["last"].optimizer_ms == pytest.approx(1.6)
    assert low.link.latency_us == pytest.approx(80.0) and low.clip_allreduce_us == pytest.approx(240.0)
    assert low.shape == p.shape and low.quartiles == p.quartiles


def test_a_quartile_with_an_all_to_all_of_its_own_takes_it_and_keeps_the_other_collectives() -> None:
    """A mixture of experts' low quartile prices its all-to-all at the exchanges' lower quartile; the
    all-reduce, which it records no spread of, stays the profile's; a quartile without one keeps both."""
    reduce, paid, low_paid = (LinkProfile(latency_us=us, bandwidth_gb_s=1.0) for us in (800.0, 1400.0, 500.0))
    p = make_profile()
    q = p.quartiles["low"]
    moe = p.model_copy(update={"collectives": {"allreduce": reduce, "alltoall": paid}, "quartiles": {
        **p.quartiles, "low": q.model_copy(update={"collectives": {"alltoall": low_paid}})}})
    assert profile_at(moe, "low").collectives == {"allreduce": reduce, "alltoall": low_paid}
    assert profile_at(moe, "high").collectives == {"allreduce": reduce, "alltoall": paid}


def test_the_hand_computed_step_is_the_simulated_one() -> None:
    s = one_stage_gpipe()
    assert predict(s, make_profile()).trace.meta  # the scenario predicts
    from ppsim.trace.metrics import step_time_ms

    assert step_time_ms(predict(s, make_profile()).trace) == pytest.approx(one_stage_step(1.0))


def test_known_quartiles_give_the_hand_computed_range() -> None:
    s = one_stage_gpipe()
    p = make_profile(0.8, 1.5)
    spread = profile_spread(predict(s, p), p)
    assert spread is not None
    assert spread.predicted_ms == pytest.approx(one_stage_step(1.0))
    assert spread.low_ms == pytest.approx(one_stage_step(0.8))
    assert spread.high_ms == pytest.approx(one_stage_step(1.5))
    assert spread.relative == pytest.approx((1.5 - 0.8) / 2)
    assert "profile spread 35.0%: errors below that are noise" in spread.line()


def test_quartiles_equal_to_the_medians_spread_nothing() -> None:
    s = load(TINY).with_overrides(schedule="gpipe", microbatches=5)  # two stages: the link and clipping too
    p = make_profile(1.0, 1.0)
    spread = profile_spread(predict(s, p), p)
    assert spread is not None and spread.relative == 0.0
    assert spread.low_ms == spread.high_ms == spread.predicted_ms


def test_two_stages_spread_grows_with_the_quartiles() -> None:
    s = load(TINY).with_overrides(schedule="1f1b", microbatches=5)
    narrow, wide = make_profile(0.9, 1.1), make_profile(0.7, 1.4)
    a, b = (profile_spread(predict(s, p), p) for p in (narrow, wide))
    assert a is not None and b is not None
    assert 0 < a.relative < b.relative
    assert a.low_ms < a.predicted_ms < a.high_ms


def test_comparison_json_carries_the_profile_spread() -> None:
    s = load(TINY)
    p = make_profile(0.8, 1.5)
    prediction = predict(s, p)
    spread = profile_spread(prediction, p)
    # the prediction against itself stands in for a run: comparison_doc reads no more than this
    v = Validation(scenario=s, prediction=prediction, run=None, comparison=compare_traces(prediction.trace,  # type: ignore[arg-type]
                   prediction.trace), bubble_error_pp=(0.0, 0.0), profile_spread=spread)
    doc = comparison_doc(v)
    for key in ("predicted_step_time_ms", "measured_step_time_ms", "step_time_error", "median_bubble_error_pp"):
        assert key in doc  # the keys it always had
    assert doc["profile_spread"] == pytest.approx(spread.relative) and doc["profile_spread"] > 0
    assert doc["predicted_step_time_low_ms"] < doc["predicted_step_time_ms"] < doc["predicted_step_time_high_ms"]
    without = comparison_doc(Validation(scenario=s, prediction=prediction, run=None, comparison=v.comparison,  # type: ignore[arg-type]
                                        bubble_error_pp=(0.0, 0.0)))
    assert without["profile_spread"] is None
    assert doc["with_run_routing"] is None  # a dense model: no routing to predict again at


def test_quartiles_of_samples() -> None:
    assert stats.quartiles([]) == (0.0, 0.0, 0.0)
    assert stats.quartiles([2.0]) == (2.0, 2.0, 2.0)
    assert stats.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)


def test_the_quartile_sets_are_put_on_either_side_of_the_median() -> None:
    """A timing worked out as a difference (an overhead) can come out of order from the quartiles;
    the low set is never slower than the median and the high never faster; a link is faster with
    a lower latency and a higher bandwidth."""
    median, low, high = timings(1.0), timings(1.2), timings(0.9)  # the quartiles' fits came out crossed
    lo, hi = fits._around(median, low, high)
    assert lo.block.forward_ms == pytest.approx(0.9) and hi.block.forward_ms == pytest.approx(1.2)
    assert lo.overheads["first"].optimizer_ms == pytest.approx(0.9)
    assert lo.link.latency_us == pytest.approx(90.0) and hi.link.latency_us == pytest.approx(120.0)
    assert lo.link.bandwidth_gb_s == pytest.approx(2.0 / 0.9) and hi.link.bandwidth_gb_s == pytest.approx(2.0 / 1.2)
    same = fits._around(median, timings(1.0), timings(1.0))
    assert same[0] == same[1] == QuartileTimes(**median)


def test_link_samples_are_the_median_over_every_ranks_ping_pong() -> None:
    rows = [[[1024, 1.0, 0.5, 2.0], [4096, 3.0, 2.0, 4.0]],
            [[1024, 2.0, 1.0, 3.0], [4096, 5.0, 4.0, 6.0]],
            [[1024, 9.0, 8.0, 9.5], [4096, 4.0, 3.0, 7.0]]]
    assert stats.median_samples(rows, 1) == [(1024, 2.0), (4096, 4.0)]
    assert stats.median_samples(rows, 2) == [(1024, 1.0), (4096, 3.0)]


def test_calibration_doc_names_the_quartile_keys() -> None:
    doc = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
    for key in ("quartiles", "low", "high", "profile_spread", "predicted_step_time_low_ms"):
        assert f"`{key}`" in doc, key
    assert ProfileSpread.__doc__
