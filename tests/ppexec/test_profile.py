"""Measured profiles: the file format, how ppsim turns one into costs, and the fits that make one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import GPT_YAML, ROOT, SCENARIOS, gpt
from ppexec.measure import profile as fits
from ppexec.measure import stats
from ppsim.cli import app
from ppsim.costs import build_workload
from ppsim.errors import ScenarioError
from ppsim.inputs.profile import LayerTimes, LinkProfile, Overheads, Profile, RecomputeTimes, load_profile, shape_of
from ppsim.inputs.scenario import Scenario, load, parse_scenario
from ppsim.prediction.path import scenario_workload

TINY = SCENARIOS / "tiny-cpu.yaml"
RECORDED = ROOT / "tests" / "data" / "tiny-cpu.profile.yaml"  # measured by `ppexec profile` on this kind of machine
runner = CliRunner()


def make_profile(*, block_f: float = 1.0, head_f: float = 0.5, first_f: float = 0.2, last_f: float = 0.3,
                 mid_f: float = 0.1) -> Profile:
    s = load(TINY)
    return Profile(
        shape=shape_of(s),
        embedding=LayerTimes(forward_ms=0.05, backward_ms=0.1, optimizer_ms=0.2, params=100),
        block=LayerTimes(forward_ms=block_f, backward_ms=2 * block_f, weight_grad_ms=block_f, optimizer_ms=0.4,
                         params=1000),
        head=LayerTimes(forward_ms=head_f, backward_ms=2 * head_f, weight_grad_ms=head_f, optimizer_ms=0.1, params=50),
        overheads={
            "first": Overheads(forward_ms=first_f, backward_ms=0.2, optimizer_ms=1.0, clip_ms=0.5),
            "middle": Overheads(forward_ms=mid_f, backward_ms=0.1, optimizer_ms=1.0, clip_ms=0.5),
            "last": Overheads(forward_ms=last_f, backward_ms=0.4, optimizer_ms=2.0, clip_ms=0.7),
        },
        link=LinkProfile(latency_us=100.0, bandwidth_gb_s=2.0, send_overhead_us=10.0, recv_overhead_us=50.0),
        clip_allreduce_us=300.0,
    )


def test_yaml_round_trip(tmp_path: Path) -> None:
    p = make_profile().model_copy(update={"recompute": {"full": RecomputeTimes(forward_ms=-0.1, backward_ms=0.9)}})
    path = tmp_path / "p.yaml"
    path.write_text(p.to_yaml())
    loaded = load_profile(path)
    assert loaded.model_dump() == p.model_dump()
    assert loaded.describe().startswith(f"profile {path}") and p.describe().startswith("a profile")  # what summaries name


def test_recorded_profile_loads_and_applies() -> None:
    p = load_profile(RECORDED)
    p.check_applies(load(TINY))
    assert p.block.forward_ms > 0 and p.block.backward_ms > p.block.forward_ms
    assert p.link.bandwidth_gb_s > 0 and len(p.link.samples) >= 3


def test_stage_costs_are_overheads_plus_layers() -> None:
    p = make_profile()
    s = load(TINY).with_overrides(stages=2, partition=[1, 3])
    w = build_workload(s, p)
    first, last = w.costs.stages
    assert w.partition == [1, 3]
    assert first.forward_ms == pytest.approx(0.2 + 0.05 + 1 * 1.0)
    assert last.forward_ms == pytest.approx(0.3 + 0.5 + 3 * 1.0)
    assert first.backward_ms == pytest.approx(0.2 + 0.1 + 2.0)
    assert last.weight_grad_ms == pytest.approx(3 * 1.0 + 0.5)
    assert first.optimizer_ms == pytest.approx(1.0 + 0.2 + 0.4)
    assert last.clip_ms == pytest.approx(0.7)
    link = w.costs.links[0]
    assert link.latency_ms == pytest.approx(0.1)
    assert link.bandwidth_bytes_per_ms == pytest.approx(2e6)
    assert (link.send_overhead_ms, link.recv_overhead_ms) == pytest.approx((0.01, 0.05))
    assert w.costs.clip_allreduce_ms == pytest.approx(0.3)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_measured_recomputation_is_added_to_every_block(mode: str) -> None:
    """With the profile's recompute times, each block's forward and backward grow by them; the
    embedding, head and overheads do not."""
    p = make_profile().model_copy(update={"recompute": {
        "selective": RecomputeTimes(forward_ms=0.05, backward_ms=0.3),
        "full": RecomputeTimes(forward_ms=-0.1, backward_ms=0.9)}})
    base = build_workload(load(TINY).with_overrides(stages=2, partition=[1, 3]), p).costs.stages
    s = load(TINY).with_overrides(stages=2, partition=[1, 3])
    s = s.model_copy(update={"training": s.training.model_copy(update={"recompute": mode})})
    costs = build_workload(s, p).costs.stages
    extra = p.recompute[mode]  # type: ignore[index]
    for blocks, before, after in zip((1, 3), base, costs, strict=True):
        assert after.forward_ms == pytest.approx(before.forward_ms + blocks * extra.forward_ms)
        assert after.backward_ms == pytest.approx(before.backward_ms + blocks * extra.backward_ms)
        assert after.weight_grad_ms == pytest.approx(before.weight_grad_ms)
    path_doc = p.to_yaml()
    assert "recompute:" in path_doc and "selective:" in path_doc


def test_recomputation_without_measured_times_falls_back_on_flops() -> None:
    """An older profile (no ``recompute``): full recomputation adds one measured block forward to
    each block's backward (its FLOPs share is all of the forward)."""
    p = make_profile(block_f=1.0)
    s = load(TINY).with_overrides(stages=2, partition=[1, 3])
    base = build_workload(s, p).costs.stages
    s = s.model_copy(update={"training": s.training.model_copy(update={"recompute": "full"})})
    for blocks, before, after in zip((1, 3), base, build_workload(s, p).costs.stages, strict=True):
        assert after.forward_ms == pytest.approx(before.forward_ms)
        assert after.backward_ms == pytest.approx(before.backward_ms + blocks * 1.0)


def test_a_negative_fitted_overhead_never_makes_an_input_grad_negative() -> None:
    """A position's overhead is a fit and can come out below zero (seen for torch's runtime on the
    tiny model): it shortens the backward, but the weight grad stays within it, so a split
    backward's input grad is never negative and a zero-bubble prediction stays a valid trace."""
    from ppsim.prediction import predict

    p = make_profile()
    p = p.model_copy(update={"overheads": {**p.overheads, "first": Overheads(
        forward_ms=0.2, backward_ms=-2.5, optimizer_ms=1.0, clip_ms=0.5)}})
    s = load(TINY).with_overrides(stages=2, partition=[1, 3], schedule="zb-h1")
    first = build_workload(s, p).costs.stages[0]
    assert first.backward_ms == 0.0 and first.weight_grad_ms == 0.0 and first.input_grad_ms == 0.0
    trace = predict(s, p).trace
    assert all(sp.end >= sp.start for sp in trace.spans)


def test_middle_stages_and_a_single_stage() -> None:
    p = make_profile()
    w = build_workload(load(TINY).with_overrides(stages=4, partition="uniform"), p)
    assert [round(c.forward_ms, 9) for c in w.costs.stages] == [1.25, 1.1, 1.1, 1.8]
    one = build_workload(load(TINY).with_overrides(stages=1, partition="uniform"), p).costs.stages[0]
    # first and last at once: both overheads, less the middle one every stage pays
    assert one.forward_ms == pytest.approx(0.2 + 0.3 - 0.1 + 0.05 + 4 * 1.0 + 0.5)


def test_balanced_partition_follows_the_measured_times() -> None:
    s = load(TINY).with_overrides(stages=2, partition="balanced")
    # a head as costly as three blocks pushes every block to the first stage: 12.35 ms of forward
    # and backward there, 9.5 on the head's stage, against 9.35 and 12.5 with [3, 1]
    heavy = build_workload(s, make_profile(head_f=3.0))
    assert heavy.partition == [4, 0]
    light = build_workload(s, make_profile(head_f=0.0, last_f=0.0, first_f=0.0, mid_f=0.0))
    assert light.partition == [2, 2]


def test_profile_of_another_shape_is_refused() -> None:
    p = make_profile()
    other = gpt()
    with pytest.raises(ScenarioError, match=r"--profile: .*hidden 64 \(scenario: 5120\).*ppexec profile"):
        build_workload(other, p)


@pytest.mark.parametrize("content, words", [
    (None, "does not exist"),
    ("format: something-else\n", "is not a ppsim profile"),
    ("a: [1, 2", "not a readable YAML"),
    ("format: ppsim-profile\nversion: 1\n", "shape: Field required"),
])
def test_bad_profile_files(tmp_path: Path, content: str | None, words: str) -> None:
    path = tmp_path / "p.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ScenarioError, match=words) as exc:
        load_profile(path)
    assert exc.value.field == "--profile"


def test_run_with_a_profile_cli(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", str(TINY), "--profile", str(RECORDED), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["step_time_ms"] > 0
    plain = json.loads(runner.invoke(app, ["run", str(TINY), "--json"]).output)
    assert doc["step_time_ms"] != plain["step_time_ms"]  # measured costs, not the nominal CPU roofline


def test_run_with_a_profile_of_another_model_is_one_clear_line() -> None:
    res = runner.invoke(app, ["run", str(GPT_YAML), "--profile", str(RECORDED)])
    assert res.exit_code == 1
    assert "error: --profile:" in res.output and "Traceback" not in res.output


def test_profile_is_never_an_output(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(make_profile().to_yaml())
    res = runner.invoke(app, ["run", str(TINY), "--profile", str(path), "--save-trace", str(path)])
    assert res.exit_code == 1 and "input" in res.output
    assert load_profile(path).model_dump() == make_profile().model_dump()


# ----- the fits ppexec profile makes (pure functions; no torch needed) ------------------------------


@given(st.floats(0.0, 5.0), st.floats(0.1, 100.0))
def test_link_fit_recovers_latency_and_bandwidth(latency_ms: float, gb_s: float) -> None:
    bytes_per_ms = gb_s * 1e6
    samples = [(n, latency_ms + n / bytes_per_ms) for n in (1024, 8192, 65536, 524288)]
    lat, bw = stats.fit_link(samples)
    assert lat == pytest.approx(latency_ms, abs=1e-6)
    assert bw == pytest.approx(bytes_per_ms, rel=1e-6)


@given(st.floats(0.01, 50.0), st.floats(0.0, 20.0), st.floats(0.0, 20.0), st.integers(3, 12))
def test_block_fit_recovers_slope_and_constants(per_block: float, c0: float, c1: float, layers: int) -> None:
    parts = fits.profiling_partitions(layers)
    points = {0: [(p[0], c0 + p[0] * per_block) for p in parts], 1: [(p[1], c1 + p[1] * per_block) for p in parts]}
    slope, consts = stats.fit_blocks(points, fallback=-1.0)
    assert slope == pytest.approx(per_block, rel=1e-9, abs=1e-9)
    assert consts[0] == pytest.approx(c0, abs=1e-6) and consts[1] == pytest.approx(c1, abs=1e-6)


@given(latency_us=st.floats(1, 500), gb_s=st.floats(0.1, 50))
def test_collective_links_reproduce_the_two_rank_times(latency_us: float, gb_s: float) -> None:
    """The links fitted to two-rank all-reduce, all-gather and all-to-all times give those times
    back through the formulas ppsim prices them with (and so extend them to d ranks)."""
    from ppsim.costs import Link
    from ppsim.costs.collectives import ring_allgather_ms, ring_allreduce_ms
    from ppsim.costs.moe import alltoall_ms

    true = Link.from_gb_s(gb_s, latency_us)
    sizes = [1 << 20, 1 << 22, 1 << 24]
    samples = [(n, ring_allreduce_ms(n, 2, true), ring_allgather_ms(n, 2, true), alltoall_ms(n, 2, true))
               for n in sizes]
    links = fits.ring_links(samples)
    for kind, formula in (("allreduce", ring_allreduce_ms), ("allgather", ring_allgather_ms),
                          ("alltoall", alltoall_ms)):
        fitted = Link.from_gb_s(links[kind].bandwidth_gb_s, links[kind].latency_us)
        for n in sizes:
            assert formula(n, 2, fitted) == pytest.approx(formula(n, 2, true), rel=1e-6)
        assert formula(1 << 24, 8, fitted) == pytest.approx(formula(1 << 24, 8, true), rel=1e-6)


def test_measured_collectives_time_the_data_parallel_exchange() -> None:
    """With the profile's collective links, the gradient all-reduce and ZeRO-1's all-gather use
    them rather than the point-to-point link."""
    from ppsim.costs import Link
    from ppsim.costs.collectives import ring_allgather_ms, ring_allreduce_ms

    slow = LinkProfile(latency_us=200.0, bandwidth_gb_s=0.5)
    p = make_profile().model_copy(update={"collectives": {"allreduce": slow, "allgather": slow}})
    s = load(TINY).with_overrides(stages=2, partition=[2, 2])
    data = s.model_dump(exclude_none=True)
    data["data_parallel"] = 4
    data["training"]["zero_stage"] = 1
    from ppsim.inputs.scenario import parse_scenario

    stages = build_workload(parse_scenario(data), p).costs.stages
    plain = build_workload(parse_scenario(dict(data, training=dict(data["training"], zero_stage=0))), p).costs.stages
    link = Link.from_gb_s(0.5, 200.0)
    for vs, (zero, base) in enumerate(zip(stages, plain, strict=True)):
        assert zero.allreduce_ms == pytest.approx(ring_allreduce_ms(zero.grad_bytes, 4, link))
        fixed = p.overhead(vs, 2).optimizer_ms  # DeepSpeed's own part of the step is not sharded
        assert zero.optimizer_ms == pytest.approx(fixed + (base.optimizer_ms - fixed) / 4
                                                  + ring_allgather_ms(zero.grad_bytes, 4, link))


def test_block_fit_with_one_partition_uses_the_fallback() -> None:
    assert fits.profiling_partitions(2) == [[1, 1]]
    slope, consts = stats.fit_blocks({0: [(1, 3.0)], 1: [(1, 5.0)]}, fallback=2.0)
    assert slope == 2.0 and consts == {0: 1.0, 1: 3.0}


def test_calibration_doc_names_every_profile_key() -> None:
    doc = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
    from ppsim.inputs.profile import Shape, TensorParallelTimes

    for model in (Profile, LayerTimes, Overheads, LinkProfile, Shape, RecomputeTimes, TensorParallelTimes):
        for key in model.model_fields:
            assert f"`{key}`" in doc, f"docs/calibration.md does not name profile key {key!r} ({model.__name__})"


def test_tensor_parallel_blocks_from_a_profile_split_the_work_and_all_reduce() -> None:
    """t = 2 from a profile: each block does half its measured work plus two all-reduces of the
    activations per pass on the measured all-reduce link; the embedding and the head stay whole."""
    from ppsim.costs import Link
    from ppsim.costs.collectives import ring_allreduce_ms
    from ppsim.inputs.scenario import parse_scenario

    ar_link = LinkProfile(latency_us=100.0, bandwidth_gb_s=1.0)
    p = make_profile().model_copy(update={"collectives": {"allreduce": ar_link, "allgather": ar_link}})
    data = load(TINY).with_overrides(stages=2, partition=[1, 3]).model_dump(exclude_none=True)
    one = build_workload(parse_scenario(data), p).costs
    two = build_workload(parse_scenario(dict(data, tensor_parallel=2)), p).costs
    ar = ring_allreduce_ms(one.message_bytes, 2, Link.from_gb_s(1.0, 100.0))
    assert ar > 0
    for blocks, a, b in zip((1, 3), one.stages, two.stages, strict=True):
        block = p.block
        assert b.forward_ms == pytest.approx(a.forward_ms - blocks * block.forward_ms / 2 + blocks * 2 * ar)
        assert b.backward_ms == pytest.approx(a.backward_ms - blocks * block.backward_ms / 2 + blocks * 2 * ar)
        assert b.weight_grad_ms == pytest.approx(a.weight_grad_ms - blocks * block.weight_grad_ms / 2)


def test_tensor_parallel_needs_a_profile_with_a_measured_all_reduce() -> None:
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    with pytest.raises(ScenarioError, match="--profile: this profile has no measured all-reduce"):
        build_workload(parse_scenario(dict(data, tensor_parallel=2)), make_profile())


def test_a_profile_refuses_a_sliding_window() -> None:
    """ppexec's blocks attend to every earlier key: their times do not price a windowed model."""
    data = load(TINY).model_dump(exclude_none=True)
    windowed = dict(data, model={**data["model"], "attention_window": 16})
    with pytest.raises(ScenarioError, match="--profile: a profile times blocks that attend to every earlier key"):
        build_workload(parse_scenario(windowed), make_profile())


def test_a_measured_split_block_sets_the_tensor_parallel_share() -> None:
    """With the profile's split block (2 ranks) a t = 2 block takes the measured split's share of
    the whole block's time less its all-reduces, plus the all-reduces; t = 4 halves that share."""
    from ppsim.costs import Link
    from ppsim.costs.collectives import ring_allreduce_ms
    from ppsim.inputs.profile import TensorParallelTimes
    from ppsim.inputs.scenario import parse_scenario

    ar_link = LinkProfile(latency_us=100.0, bandwidth_gb_s=1.0)
    split = TensorParallelTimes(size=2, forward_ms=0.9, backward_ms=1.6, whole_forward_ms=1.0, whole_backward_ms=2.0)
    p = make_profile().model_copy(update={"collectives": {"allreduce": ar_link}, "tensor_parallel": split})
    data = load(TINY).with_overrides(stages=1).model_dump(exclude_none=True)
    one = build_workload(parse_scenario(data), p).costs
    link = Link.from_gb_s(1.0, 100.0)
    for t in (2, 4):
        costs = build_workload(parse_scenario(dict(data, tensor_parallel=t)), p).costs
        ar_2, ar_t = (ring_allreduce_ms(one.message_bytes, k, link) for k in (2, t))
        share = (0.9 - 2 * ar_2) / 1.0 * 2 / t
        blocks = 4
        expected = one.stages[0].forward_ms - blocks * p.block.forward_ms + blocks * (p.block.forward_ms * share + 2 * ar_t)
        assert costs.stages[0].forward_ms == pytest.approx(expected)


def test_the_profiling_run_is_plain_whatever_the_scenario_asks() -> None:
    """A scenario with recomputation, ZeRO-1 and tensor parallelism is profiled as plain 2-stage
    GPipe: the profile times those apart and a prediction adds them, so nothing counts twice."""
    from ppsim.inputs.scenario import parse_scenario

    data = load(TINY).model_dump(exclude_none=True)
    data.update(data_parallel=2, tensor_parallel=2)
    data["training"].update(recompute="full", zero_stage=1, zero_reduce="reduce_scatter", sequence_parallel=True)
    s = fits.profiling_scenario(parse_scenario(data))
    assert (s.pipeline.stages, s.pipeline.schedule, s.data_parallel, s.tensor_parallel) == (2, "gpipe", 1, 1)
    t = s.training
    assert (t.recompute, t.zero_stage, t.zero_reduce, t.sequence_parallel) == ("none", 0, "allreduce", False)


def test_sequence_parallelism_does_not_shrink_the_tensor_parallel_all_reduces() -> None:
    """Sequence parallelism splits the message between stages t ways, not the activations a block
    reduce-scatters and all-gathers inside its tensor-parallel group (the bytes of its all-reduces);
    its backward all-gathers the block's two sharded inputs once more."""
    from ppsim.costs.collectives import ring_allgather_ms
    from ppsim.costs.profiled import profile_link
    from ppsim.inputs.scenario import parse_scenario

    ar_link = LinkProfile(latency_us=100.0, bandwidth_gb_s=1.0)
    p = make_profile().model_copy(update={"collectives": {"allreduce": ar_link}})
    data = load(TINY).with_overrides(stages=2, partition=[2, 2]).model_dump(exclude_none=True)
    data["tensor_parallel"] = 2
    data["pipeline"]["scatter_gather"] = False
    plain = build_workload(parse_scenario(data), p).costs
    data["training"]["sequence_parallel"] = True
    split = build_workload(parse_scenario(data), p).costs
    assert split.message_bytes == plain.message_bytes // 2
    activation = plain.message_bytes  # one whole s x b x h activation
    extra = 2 * ring_allgather_ms(activation, 2, profile_link(ar_link))
    for a, b in zip(plain.stages, split.stages, strict=True):
        assert b.forward_ms == pytest.approx(a.forward_ms)
        assert b.backward_ms == pytest.approx(a.backward_ms + b.layers * extra)


def test_with_a_profile_and_tensor_parallelism_the_embedding_and_head_are_whole() -> None:
    """ppexec keeps the embedding and the LM head whole on every tensor-parallel rank, so measured
    predictions count their parameters whole; the blocks' are split."""
    from ppsim.costs.layers import gpt_layers
    from ppsim.inputs.scenario import parse_scenario

    p = make_profile().model_copy(update={"collectives": {"allreduce": LinkProfile(latency_us=1, bandwidth_gb_s=1)}})
    data = load(TINY).with_overrides(stages=2, partition=[2, 2]).model_dump(exclude_none=True)
    s = parse_scenario(dict(data, tensor_parallel=2))
    emb, block, head = gpt_layers(s.model, s.training.micro_batch, "none", 1)
    _, split, _ = gpt_layers(s.model, s.training.micro_batch, "none", 2)
    first, last = build_workload(s, p).costs.stages
    assert first.params == emb.params + 2 * split.params
    assert last.params == head.params + 2 * split.params
    assert split.params < block.params


def split_profile() -> Profile:
    """make_profile with the backward split as torch's pipelining splits it: 20 % dearer in all."""
    p = make_profile()
    return p.model_copy(update={
        "embedding": p.embedding.model_copy(update={"split_backward_ms": 0.1}),
        "block": p.block.model_copy(update={"split_backward_ms": 2.4}),  # backward 2.0, weight grad 1.0
        "head": p.head.model_copy(update={"split_backward_ms": 1.2})})   # backward 1.0, weight grad 0.5


def test_a_split_backward_costs_what_the_profile_timed_the_split() -> None:
    """With a schedule that runs I and W, a stage's I + W is its layers' split backward (plus the
    position's overhead, on I), W the weight grad's share of it; the first stage has no input
    grad to send, so torch runs its whole backward as W."""
    s = load(TINY).with_overrides(stages=2, partition=[1, 3], schedule="zb-h1")
    first, last = scenario_workload(s, split_profile()).costs.stages
    # by hand: last = overhead 0.4 + 3 blocks x 2.4 + head 1.2; W = 3 x 2.4 x 1/2 + 1.2 x 1/2
    assert last.backward_ms == pytest.approx(0.4 + 3 * 2.4 + 1.2)
    assert last.weight_grad_ms == pytest.approx(3 * 1.2 + 0.6)
    assert last.input_grad_ms == pytest.approx(0.4 + 3 * 1.2 + 0.6)
    # first = overhead 0.2 + embedding 0.1 + 1 block 2.0, the whole of it in W
    assert first.backward_ms == pytest.approx(0.2 + 0.1 + 2.0)
    assert (first.weight_grad_ms, first.input_grad_ms) == pytest.approx((2.3, 0.0))


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipev"])
def test_whole_backwards_and_old_profiles_keep_the_whole_backward(schedule: str) -> None:
    """1F1B runs whole backwards, DualPipeV whole and split ones: both keep the whole backward's
    price; so does a profile from before the split was timed (no ``split_backward_ms``)."""
    chunks = 2 if schedule == "dualpipev" else 1
    s = load(TINY).with_overrides(stages=2, chunks=chunks, schedule=schedule)
    assert scenario_workload(s, split_profile()).costs.stages == scenario_workload(s, make_profile()).costs.stages
    zb = load(TINY).with_overrides(stages=2, partition=[1, 3], schedule="zb-h1")
    last = scenario_workload(zb, make_profile()).costs.stages[-1]
    assert (last.backward_ms, last.weight_grad_ms) == pytest.approx((0.4 + 3 * 2.0 + 1.0, 3 * 1.0 + 0.5))


def test_a_profile_prices_moe_blocks_as_measured_and_their_all_to_alls_on_its_link(tmp_path: Path) -> None:
    """A mixture of experts from a profile, by hand: each MoE block its measured time and a dense
    block the profile's dense one; with expert parallelism 2 each MoE block adds its dispatch and
    combine (twice in the backward) on the measured all-to-all link, as communication inside the
    pass, and in its forward the exchange of its 4 experts' token counts before the dispatch, which
    no overlapped schedule hides."""
    from ppsim.costs.moe import ExpertShard, alltoall_ms
    from ppsim.costs.profiled import profile_link
    from ppsim.inputs.profile import ExpertShape

    s = load(TINY).with_overrides(stages=2, partition=[2, 2])
    data = s.model_dump(exclude_none=True)
    data["model"]["moe"] = {"experts": 4, "top_k": 2, "ffn_hidden": 96, "dense_layers": 1}
    mixed = parse_scenario(data)
    exchange = LinkProfile(latency_us=40.0, bandwidth_gb_s=1.5)
    moe = LayerTimes(forward_ms=3.0, backward_ms=5.0, weight_grad_ms=2.0, optimizer_ms=0.5, params=2000)
    p = make_profile().model_copy(update={
        "shape": shape_of(mixed).model_copy(update={"moe": ExpertShape(experts=4, top_k=2, ffn_hidden=96)}),
        "moe_block": moe, "collectives": {"alltoall": exchange}})
    base = make_profile()
    one = build_workload(mixed, p).costs.stages
    # stage 0: a dense block (layer 0) and a MoE block; stage 1: two MoE blocks
    assert one[0].forward_ms == pytest.approx(0.2 + 0.05 + base.block.forward_ms + moe.forward_ms)
    assert one[1].forward_ms == pytest.approx(0.3 + 2 * moe.forward_ms + 0.5)
    assert one[1].backward_ms == pytest.approx(0.4 + 2 * moe.backward_ms + 1.0)
    data.update(data_parallel=2, expert_parallel=2)
    two = build_workload(parse_scenario(data), p).costs.stages
    m = mixed.model
    nbytes = ExpertShard(m.moe).dispatch_bytes(m.seq_len * mixed.training.micro_batch, m.hidden, 4)
    pair = 2 * alltoall_ms(nbytes, 2, profile_link(exchange))
    counts = alltoall_ms(4 * 8, 2, profile_link(exchange))
    for k, moe_blocks in ((0, 1), (1, 2)):
        assert two[k].forward_ms == pytest.approx(one[k].forward_ms + moe_blocks * (pair + counts))
        assert two[k].backward_ms == pytest.approx(one[k].backward_ms + moe_blocks * pair)
        assert two[k].forward_comm_ms == pytest.approx(moe_blocks * (pair + counts))
        assert two[k].forward_overlap_ms == pytest.approx(moe_blocks * pair)  # an overlapped pass hides no counts
    with pytest.raises(ScenarioError, match="another layer shape") as err:  # a dense model's profile does not apply
        build_workload(mixed, base)
    assert "moe none (scenario: {experts: " in str(err.value) and "None" not in str(err.value)


def test_the_busiest_expert_rank_runs_the_measured_moe_block_at_its_share_of_the_copies() -> None:
    """Measured with every expert local, a MoE block ran the mean share of the token copies; with
    expert parallelism the busiest rank (``skew`` x the mean) sets the pace: the measured times
    scaled pass by pass as the block's FLOPs are at that skew. Without expert parallelism one rank
    runs every copy, whatever the routing."""
    from ppsim.costs.layers import gpt_layers
    from ppsim.costs.moe import ExpertShard
    from ppsim.inputs.profile import ExpertShape

    data = load(TINY).with_overrides(stages=2, partition=[2, 2]).model_dump(exclude_none=True)
    data["model"]["moe"] = {"experts": 4, "top_k": 2, "ffn_hidden": 96, "skew": 1.5}
    data.update(data_parallel=2)
    moe = LayerTimes(forward_ms=3.0, backward_ms=5.0, weight_grad_ms=2.0, optimizer_ms=0.5, params=2000)
    s = parse_scenario(data)
    p = make_profile().model_copy(update={
        "shape": shape_of(s).model_copy(update={"moe": ExpertShape(experts=4, top_k=2, ffn_hidden=96)}),
        "moe_block": moe, "collectives": {"alltoall": LinkProfile(latency_us=0.0, bandwidth_gb_s=1e6)}})
    even = build_workload(s, p).costs.stages[1]  # EP 1: the skew changes nothing
    data["expert_parallel"] = 2
    skewed = parse_scenario(data)
    busy = build_workload(skewed, p).costs.stages[1]
    m = skewed.model
    flops = [gpt_layers(m, 4, experts=ExpertShard(m.moe.model_copy(update={"skew": k})))[1].forward_flops
             for k in (1.0, 1.5)]
    assert flops[1] > flops[0]
    extra = busy.forward_ms - busy.forward_comm_ms - even.forward_ms  # two MoE blocks on stage 1
    assert extra == pytest.approx(2 * moe.forward_ms * (flops[1] / flops[0] - 1), rel=1e-9)


def test_a_moe_profile_fits_its_all_to_all_at_its_dispatch_sizes() -> None:
    """Over two ranks an all-to-all of n bytes is one latency and n / 2 over the link: the fit of
    exact samples gives both back."""
    from ppsim.costs.moe import alltoall_ms
    from ppsim.costs.table import Link

    true = Link.from_gb_s(2.0, 150.0)
    sizes = [131072, 262144, 524288, 1048576]
    link = fits.exchange_link([(n, alltoall_ms(n, 2, true)) for n in sizes])
    assert link.latency_us == pytest.approx(150.0) and link.bandwidth_gb_s == pytest.approx(2.0)


def _ep2_moe(routing: dict[int, float]) -> tuple[dict[str, Any], Scenario, Profile]:
    """The tiny model with 4 experts, 2 a token, on one stage over 2 replicas at EP 2 (its scenario's
    mapping and scenario), and a profile of it with a measured MoE block, all-to-all and ``routing``."""
    from ppsim.inputs.profile import ExpertShape

    data = load(TINY).with_overrides(stages=1, partition=[4]).model_dump(exclude_none=True)
    data["model"]["moe"] = {"experts": 4, "top_k": 2, "ffn_hidden": 96}
    data.update(data_parallel=2, expert_parallel=2)
    s = parse_scenario(data)
    moe = LayerTimes(forward_ms=3.0, backward_ms=5.0, weight_grad_ms=2.0, optimizer_ms=0.5, params=2000)
    p = make_profile().model_copy(update={
        "shape": shape_of(s).model_copy(update={"moe": ExpertShape(experts=4, top_k=2, ffn_hidden=96)}),
        "moe_block": moe, "collectives": {"alltoall": LinkProfile(latency_us=20.0, bandwidth_gb_s=1.0)},
        "routing_skew": routing})
    return data, s, p


def test_a_profile_s_measured_routing_prices_a_plan_that_gives_none() -> None:
    """A profile that measured the model's routing (1.3 at EP 2) prices an EP 2 plan at it, and the
    plan line says so; a scenario's own skew (even 1), a routing draw, or an expert parallelism the
    profile did not measure keep the scenario's."""
    from rich.console import Console

    from ppsim.costs.profiled import with_profiled_routing
    from ppsim.prediction.path import predict
    from ppsim.trace.metrics import step_time_ms, summarize
    from ppsim.views.render.summary_table import summary_renderable

    data, s, p = _ep2_moe({2: 1.3, 4: 1.7})
    measured = predict(s, p)
    assert measured.trace.meta["routing_skew"] == pytest.approx(1.3) and measured.trace.meta["routing_from_profile"]
    data["model"]["moe"]["skew"] = 1.3
    skewed = parse_scenario(data)
    assert step_time_ms(measured.trace) == pytest.approx(step_time_ms(predict(skewed, p).trace))
    console = Console(width=240, record=True)
    console.print(summary_renderable(summarize(measured.trace)))
    assert "expert parallel 2 (busiest rank's tokens 1.30x the mean, as the profile measured it)" in (
        console.export_text())
    data["model"]["moe"]["skew"] = 1.0  # given: the scenario's, balanced
    balanced = parse_scenario(data)
    assert with_profiled_routing(balanced, p) is balanced
    assert "routing_from_profile" not in predict(balanced, p).trace.meta
    assert step_time_ms(predict(balanced, p).trace) < step_time_ms(measured.trace)
    del data["model"]["moe"]["skew"]
    data["model"]["moe"]["routing"] = {"load_cv": 0.3}
    drawn = parse_scenario(data)
    assert with_profiled_routing(drawn, p) is drawn
    assert with_profiled_routing(s, p.model_copy(update={"routing_skew": {4: 1.7}})) is s
    assert with_profiled_routing(s, None) is s
    # the plan built on it keeps the scenario as given (ppexec validate writes that one as run)
    from ppsim.prediction.path import build

    assert build(s, p).scenario.model is not None and build(s, p).scenario.model.moe.skew is None  # type: ignore[union-attr]
    # an older profile, or one that measured no figure at this plan's EP: balanced, and said so
    older = predict(s, p.model_copy(update={"routing_skew": {}}))
    assert older.trace.meta["routing_skew"] == 1.0 and older.trace.meta["routing_unmeasured"]
    console = Console(width=240, record=True)
    console.print(summary_renderable(summarize(older.trace)))
    assert ("expert parallel 2 (routing balanced: the profile measured none at expert parallelism 2; profile again "
            "with ppexec, or give model.moe.skew)") in console.export_text()
    assert "routing_unmeasured" not in predict(s, None).trace.meta  # no profile: balanced is the scenario's


def test_a_profile_s_routing_is_kept_by_expert_parallelism_and_left_out_of_a_dense_file() -> None:
    """Keys are expert parallelisms (2 or more), read back from the file's text keys; a dense
    model's profile writes none."""
    from pydantic import ValidationError

    p = make_profile()
    assert "routing_skew" not in p.to_yaml()
    measured = Profile.model_validate({**p.model_dump(mode="json"), "routing_skew": {"2": 1.3, "4": 1.7}})
    assert measured.routing_skew == {2: 1.3, 4: 1.7}
    assert "routing_skew" in measured.to_yaml()
    for bad in ({"1": 1.2}, {"2": 0.9}):
        with pytest.raises(ValidationError):
            Profile.model_validate({**p.model_dump(mode="json"), "routing_skew": bad})


def test_validate_predicts_again_at_the_run_s_routing_skew() -> None:
    """The run's routing (its busiest expert rank's copies over the mean, in the step compared)
    is a property of its data and router: the prediction again at that skew is what the plan's
    costs alone give. Nothing to add where the run's skew is the prediction's to 1 %."""
    from types import SimpleNamespace

    from ppexec.results.prediction_check import run_routing
    from ppsim.prediction.path import predict
    from ppsim.trace.metrics import step_time_ms

    data, s, p = _ep2_moe({})
    prediction = predict(s, p)

    def run(meta: dict[str, float]) -> SimpleNamespace:  # the step compared
        return SimpleNamespace(representative=SimpleNamespace(meta=meta))

    again = run_routing(s, p, prediction, run({"routing_skew": 1.5}), 200.0)  # type: ignore[arg-type]  # what it reads of a run
    assert again is not None and again.skew == pytest.approx(1.5) and again.predicted_skew == 1.0
    data["model"]["moe"]["skew"] = 1.5
    assert again.predicted_ms == pytest.approx(step_time_ms(predict(parse_scenario(data), p).trace))
    assert again.predicted_ms > step_time_ms(prediction.trace)
    assert again.error == pytest.approx(again.predicted_ms / 200.0 - 1)
    assert "at the run's routing skew 1.50 (the prediction's 1.00; model.moe.skew)" in again.describe()
    measured = p.model_copy(update={"routing_skew": {2: 1.2}})
    profiled = run_routing(s, measured, predict(s, measured), run({"routing_skew": 1.5}), 200.0)  # type: ignore[arg-type]
    assert profiled is not None and profiled.from_profile
    assert "(the prediction's 1.20; the profile's routing_skew)" in profiled.describe()
    assert run_routing(s, p, prediction, run({"routing_skew": 1.005}), 200.0) is None  # type: ignore[arg-type]
    assert run_routing(s, p, prediction, run({}), 200.0) is None  # type: ignore[arg-type]  # no expert parallelism
