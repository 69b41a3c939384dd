"""The profile's fit against the machine's drift between its profiling runs: each run's engine
spans put at one reference speed by the block its ranks timed alone in the same minute
(``ppexec.measure.profile.speed_factors``). Synthetic rank states; no process is launched."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppexec.measure import profile as fits
from ppexec.worker.events import RankState, Ready, Step
from ppsim.inputs.profile import load_profile
from ppsim.inputs.scenario import parse_scenario
from ppsim.plan import Action, Kind

LAYERS = 4
M = 4
#: what a block, the embedding and the head cost at speed 1 (ms): alone and inside the engine alike
BLOCK = {"forward_ms": 8.0, "backward_ms": 16.0, "weight_grad_ms": 8.0, "split_backward_ms": 19.0, "optimizer_ms": 0.5}
EMBEDDING = {"forward_ms": 0.05, "backward_ms": 0.15, "weight_grad_ms": 0.15, "split_backward_ms": 0.15,
             "optimizer_ms": 0.3}
HEAD = {"forward_ms": 2.0, "backward_ms": 5.0, "weight_grad_ms": 2.5, "split_backward_ms": 5.5, "optimizer_ms": 0.2}
#: the engine's own cost per action of each stage position (ms at speed 1), and the gap between actions
OVERHEAD = {0: {"forward": 1.0, "backward": 1.5, "optimizer": 2.0}, 1: {"forward": 0.8, "backward": 1.2, "optimizer": 2.5}}
GAP = 0.1
CLIP_OWN, CLIP_REST = 0.4, 0.3


def scenario():
    return fits.profiling_scenario(parse_scenario({
        "name": "drift", "model": {"layers": LAYERS, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256,
                                   "dtype": "fp32"},
        "training": {"micro_batch": 4}, "pipeline": {"stages": 2, "microbatches": M, "schedule": "gpipe"},
        "hardware": {"device": "cpu"}}, source="test"))


def layer_doc(times: dict[str, float], speed: float, params: int) -> dict:
    scaled = {k: speed * v for k, v in times.items()}
    return {**scaled, "params": params, "quartiles": {k: [v, v] for k, v in scaled.items()}}


def rank(stage: int, blocks: int, speed: float, steps: int = 3) -> RankState:
    """A profiling rank of ``stage`` holding ``blocks`` blocks, on a machine ``speed`` times slower
    than the reference (every time it takes, alone and in the engine, scaled alike)."""
    own = EMBEDDING if stage == 0 else HEAD
    dur = {kind: speed * (OVERHEAD[stage][kind] + own[f"{kind}_ms"] + blocks * BLOCK[f"{kind}_ms"])
           for kind in ("forward", "backward", "optimizer")}
    actions = ([(str(Action(stage, Kind.F, mb)), dur["forward"]) for mb in range(M)]
               + [(str(Action(stage, Kind.B, mb)), dur["backward"]) for mb in range(M)]
               + [(f"{stage}CLIP", speed * (CLIP_OWN + CLIP_REST)), (f"{stage}OPT", dur["optimizer"])])
    recorded = []
    for k in range(steps):
        t, spans, marks = 1_000_000_000 * k, [], []
        for text, ms in actions:
            if text.endswith("CLIP"):
                marks.append(("clip", t + int(speed * CLIP_OWN * 1e6)))
            spans.append((text, t, t + int(ms * 1e6)))
            t += int((ms + speed * GAP) * 1e6)
        recorded.append(Step(step=k, loss=None, spans=spans, marks=marks))
    st = RankState(stage, ready=Ready(rank=stage, pipe_rank=stage, replica=0, tp_rank=0, host="host", clock_ns=0, pid=1,
                                                    backend="gloo", runtime="torch"), steps=recorded)
    st.measurements["layers"] = {"embedding": layer_doc(EMBEDDING, speed, 100), "block": layer_doc(BLOCK, speed, 1000),
                                 "head": layer_doc(HEAD, speed, 50)}
    st.measurements["link"] = [[1024, 0.1, 0.09, 0.11], [8192, 0.2, 0.19, 0.21], [65536, 1.0, 0.9, 1.1]]
    return st


def runs(speeds: list[tuple[float, float]]) -> list[tuple[list[int], list[RankState]]]:
    """The profiling runs, each rank at its (stage 0, stage 1) speed."""
    return [(part, [rank(0, part[0], s0), rank(1, part[1], s1)])
            for part, (s0, s1) in zip(fits.profiling_partitions(LAYERS, runs=len(speeds)), speeds, strict=True)]


def fitted(speeds: list[tuple[float, float]], normalize: str) -> dict:
    return fits._timings(scenario(), runs(speeds), "median", normalize)


def assert_scaled(got: dict, want: dict, k: float = 1.0) -> None:
    """Every fitted block time and overhead of ``got`` is ``k`` times ``want``'s."""
    for field in ("forward_ms", "backward_ms", "weight_grad_ms", "optimizer_ms"):
        assert getattr(got["block"], field) == pytest.approx(k * getattr(want["block"], field), rel=1e-3), field
    for pos in ("first", "middle", "last"):
        for field in ("forward_ms", "backward_ms", "optimizer_ms", "clip_ms"):
            assert getattr(got["overheads"][pos], field) == pytest.approx(
                k * getattr(want["overheads"][pos], field), rel=1e-3, abs=1e-4), (pos, field)


@pytest.mark.parametrize("normalize", fits.NORMALIZATIONS)
def test_without_drift_the_fit_recovers_the_block_and_the_overheads(normalize: str) -> None:
    got = fitted([(1.0, 1.0), (1.0, 1.0)], normalize)
    assert got["block"].forward_ms == pytest.approx(BLOCK["forward_ms"], rel=1e-3)
    assert got["block"].backward_ms == pytest.approx(BLOCK["backward_ms"], rel=1e-3)
    for stage, pos in ((0, "first"), (1, "last")):
        o = got["overheads"][pos]
        assert o.forward_ms == pytest.approx(OVERHEAD[stage]["forward"] + GAP, rel=1e-3)
        assert o.backward_ms == pytest.approx(OVERHEAD[stage]["backward"] + GAP, rel=1e-3)
        assert o.optimizer_ms == pytest.approx(OVERHEAD[stage]["optimizer"] + GAP, rel=1e-3)


def test_one_run_uniformly_slower_moves_nothing_but_the_common_scale() -> None:
    """The second run 20 % slower throughout: the profile is the drift-free one at the reference
    speed, the median of the four ranks' block times (1.1 x); every overhead and block time keeps
    its ratio to the others. Fitted as measured, the drift lands in the slope and the intercepts."""
    base = fitted([(1.0, 1.0), (1.0, 1.0)], "run")
    assert_scaled(fitted([(1.0, 1.0), (1.2, 1.2)], "run"), base, 1.1)
    assert_scaled(fitted([(1.0, 1.0), (1.2, 1.2)], "rank"), base, 1.1)
    old = fitted([(1.0, 1.0), (1.2, 1.2)], "none")
    # the slower run holds three blocks on the first stage: the first stage's overheads take
    # the drift of its three blocks (+1 ms forward, +2 ms backward against 1.2 and 1.8 ms)
    assert old["overheads"]["first"].forward_ms > 1.5 * 1.1 * base["overheads"]["first"].forward_ms
    assert old["overheads"]["first"].backward_ms > 1.5 * 1.1 * base["overheads"]["first"].backward_ms
    assert old["overheads"]["last"].forward_ms < 0.5 * base["overheads"]["last"].forward_ms


def test_drift_either_side_of_the_reference_gives_the_drift_free_profile() -> None:
    base = fitted([(1.0, 1.0), (1.0, 1.0)], "none")
    assert_scaled(fitted([(0.9, 0.9), (1.1, 1.1)], "run"), base)
    assert_scaled(fitted([(1.1, 1.1), (0.9, 0.9)], "run"), base)


def test_one_slower_rank_is_put_right_by_its_own_time_alone() -> None:
    """One rank of one run slower (a neighbour on its core): ``rank`` scales that rank alone and
    recovers the profile; ``run`` spreads the correction over both ranks of the run."""
    base = fitted([(1.0, 1.0), (1.0, 1.0)], "none")
    assert_scaled(fitted([(1.0, 1.0), (1.0, 1.3)], "rank"), base)
    by_run = fitted([(1.0, 1.0), (1.0, 1.3)], "run")
    assert by_run["block"].forward_ms != pytest.approx(base["block"].forward_ms, rel=1e-3)


def test_speed_factors() -> None:
    measured = runs([(1.0, 1.0), (1.2, 1.5)])
    ref = 24.0 * 1.1  # the median of the four ranks' block F + B: 24, 24, 28.8, 36
    assert fits.speed_factors(measured, "none") == [{0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}]
    run_f = fits.speed_factors(measured, "run")
    assert run_f[0] == pytest.approx({0: ref / 24.0, 1: ref / 24.0})
    assert run_f[1] == pytest.approx({0: ref / (24.0 * 1.35), 1: ref / (24.0 * 1.35)})
    rank_f = fits.speed_factors(measured, "rank")
    assert rank_f[1] == pytest.approx({0: ref / 28.8, 1: ref / 36.0})
    with pytest.raises(ValueError, match="normalize"):
        fits.speed_factors(measured, "fastest")


def test_ranks_that_timed_no_layers_are_fitted_as_measured() -> None:
    measured = runs([(1.0, 1.0), (1.2, 1.2)])
    for _, sts in measured:
        for st in sts:
            del st.measurements["layers"]
    assert fits.speed_factors(measured, "run") == [{0: 1.0, 1: 1.0}, {0: 1.0, 1: 1.0}]


def test_assemble_fits_as_measured_by_default_and_can_normalize(tmp_path: Path) -> None:
    s = scenario()
    drifting = runs([(0.9, 0.9), (1.1, 1.1)])
    default = fits.assemble(s, drifting)
    as_measured = fits.assemble(s, drifting, normalize="none")
    assert default.model_copy(update={"machine": {}}) == as_measured.model_copy(update={"machine": {}})
    assert default.machine["profiling_normalize"] == "none"
    assert default.machine["profiling_block_alone_ms"] == [[pytest.approx(21.6)] * 2, [pytest.approx(26.4)] * 2]
    normalized = fits.assemble(s, drifting, normalize="run")
    assert normalized.machine["profiling_normalize"] == "run"
    assert normalized.block.forward_ms == pytest.approx(BLOCK["forward_ms"], rel=1e-3)
    assert default.block.forward_ms != pytest.approx(BLOCK["forward_ms"], rel=1e-2)
    path = tmp_path / "p.yaml"
    path.write_text(normalized.to_yaml())
    assert load_profile(path).model_dump() == normalized.model_dump()


def test_four_runs_in_the_order_a_b_b_a_cancel_a_linear_drift() -> None:
    """The machine slows down steadily over the four runs (1.0, 1.1, 1.2, 1.3): A B B A puts the
    same mean speed (1.15) behind each partition, so the fit is the drift-free one at that speed,
    where two runs (A at 1.0, B at 1.1) move the drift into the block time and the overheads."""
    assert fits.profiling_partitions(LAYERS) == [[1, 3], [3, 1], [3, 1], [1, 3]]
    assert fits.profiling_partitions(LAYERS, runs=2) == [[1, 3], [3, 1]]
    assert fits.profiling_partitions(2) == [[1, 1]]
    drifting = [(1.0, 1.0), (1.1, 1.1), (1.2, 1.2), (1.3, 1.3)]
    still = fitted([(1.15, 1.15)] * 4, "none")
    assert_scaled(fitted(drifting, "none"), still)
    two = fitted(drifting[:2], "none")
    assert two["block"].forward_ms != pytest.approx(fitted([(1.05, 1.05)] * 2, "none")["block"].forward_ms, rel=1e-3)


def test_the_drift_between_runs_is_measured_from_the_block_timed_alone() -> None:
    p = fits.assemble(fits.profiling_scenario(scenario()), runs([(1.0, 1.0), (1.3, 1.3), (1.3, 1.3), (1.0, 1.0)]))
    assert fits.drift_between_runs(p) == pytest.approx(0.3)
    p.machine.pop("profiling_block_alone_ms")
    assert fits.drift_between_runs(p) is None  # an older profile: not recorded


def test_a_profile_whose_runs_found_the_machine_at_different_speeds_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    from ppexec.cli import _warn_if_drifted

    steady = fits.assemble(fits.profiling_scenario(scenario()), runs([(1.0, 1.0)] * 2 + [(1.05, 1.05)] * 2))
    _warn_if_drifted(steady)
    assert "warning" not in capsys.readouterr().err  # 5 %: within what a quiet machine does
    drifted = fits.assemble(fits.profiling_scenario(scenario()), runs([(1.0, 1.0), (1.3, 1.3), (1.3, 1.3), (1.0, 1.0)]))
    drifted.machine["load_average"] = [0.4, 2.9]
    _warn_if_drifted(drifted)
    err = " ".join(capsys.readouterr().err.split())
    assert "changed by 30% between the profiling runs" in err and "load 0.4 before, 2.9 after" in err
    assert "profile again on a quiet machine" in err
