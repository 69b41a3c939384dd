"""ppexec's mixture of experts: the layer routes as written down, holds what ppsim counts, and a
pipelined run with expert parallelism (its all-to-all over gloo) trains exactly like one process."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ppexec.launch.prepare import RunOptions, check_buildable, prepare  # noqa: E402
from ppexec.runtimes.experts import Expert, MoEMLP, expert_seed, is_expert  # noqa: E402
from ppexec.runtimes.model import parameter_count, reference_model  # noqa: E402
from ppsim.errors import PpsimError  # noqa: E402
from ppsim.inputs.scenario import parse_scenario  # noqa: E402

MOE = {"experts": 4, "top_k": 2, "ffn_hidden": 48, "shared_experts": 1, "dense_layers": 1}


def tiny_moe(schedule: str = "1f1b", stages: int = 2, dp: int = 1, ep: int = 1, zero: int = 0, **moe: object):
    from ppsim.plan.schedules import describe

    info = describe(schedule)
    chunks = info.chunks.default
    m = info.microbatches.nearest(stages, max(4, stages), chunks) or max(4, stages)
    return parse_scenario({
        "name": f"moe-{schedule}-{stages}x{dp}-ep{ep}",
        "model": {"layers": max(4, stages * chunks), "hidden": 32, "heads": 2, "seq_len": 16, "vocab": 64,
                  "dtype": "fp32", "moe": {**MOE, **moe}},
        "training": {"micro_batch": 2, "grad_clip": 0.05, "zero_stage": zero},
        "pipeline": {"stages": stages, "microbatches": m, "schedule": schedule, "chunks": chunks,
                     "partition": "uniform"},
        "data_parallel": dp,
        "expert_parallel": ep,
        "hardware": {"device": "cpu"},
    })


def test_the_model_holds_the_parameters_ppsim_counts() -> None:
    for moe in (MOE, {**MOE, "shared_experts": 0, "dense_layers": 0, "layer_freq": 2}):
        s = tiny_moe(**moe)
        assert sum(q.numel() for q in reference_model(s.model, 7).parameters()) == parameter_count(s.model)


def test_a_moe_layer_is_the_weighted_sum_of_its_top_k_experts() -> None:
    """Each token: its k most probable experts, weighted by their probabilities renormalised over
    the k, plus the shared expert: computed here token by token, the slow way."""
    s = tiny_moe()
    layer = MoEMLP(s.model, seed=11)
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0))
    got = layer(x)
    tokens = x.reshape(-1, 32)
    want = torch.zeros_like(tokens)
    for i, token in enumerate(tokens):
        probs = torch.softmax(layer.router(token), dim=-1)
        top = probs.topk(2)
        for p, e in zip(top.values / top.values.sum(), top.indices, strict=True):
            want[i] += p * layer.experts[str(int(e))](token)
        want[i] += layer.shared(token)
    torch.testing.assert_close(got.reshape(-1, 32), want, rtol=1e-5, atol=1e-6)
    got.sum().backward()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0  # the router learns


def test_an_expert_has_the_same_weights_on_every_rank_that_could_hold_it() -> None:
    """Expert e is drawn from its own seed: a rank holding half the experts holds them as one
    process holding all of them does."""
    s = tiny_moe()
    whole = MoEMLP(s.model, seed=11)

    class Half:  # what make_expert_groups gives rank 1 of an expert-parallel group of 2
        group, rank, size, replicas = None, 1, 2, None

    half = MoEMLP(s.model, seed=11, groups=Half())  # type: ignore[arg-type]
    assert sorted(half.experts) == ["2", "3"]
    for name, value in half.state_dict().items():
        torch.testing.assert_close(value, whole.state_dict()[name], rtol=0, atol=0)
    assert expert_seed(11, 2) != expert_seed(11, 3) != expert_seed(12, 2)
    assert isinstance(half.experts["2"], Expert)
    assert is_expert("3.moe.experts.2.fc1.weight") and not is_expert("3.moe.router.weight")


@pytest.mark.parametrize(("s", "field", "says"), [
    (lambda: tiny_moe().model_copy(update={"tensor_parallel": 2}), "tensor_parallel", "without tensor parallelism"),
    (lambda: tiny_moe("1f1b", 2, 2, 1).model_copy(update={"expert_tensor_parallel": 2}), "expert_tensor_parallel",
     "runs each expert whole"),
    (lambda: tiny_moe(latent=8), "model.moe.latent", "experts at the hidden width"),
    (lambda: tiny_moe("1f1b", 1, 2, 2).model_copy(update={"training": tiny_moe().training.model_copy(
        update={"moe_dispatcher": "deepep"})}), "training.moe_dispatcher", "not by deepep's kernels"),
])
def test_what_ppexec_does_not_run_of_a_moe_is_refused_by_name(s, field: str, says: str) -> None:
    with pytest.raises(PpsimError) as err:
        check_buildable(s())
    assert err.value.field == field and says in str(err.value)


def test_the_deepspeed_runtime_leaves_experts_to_the_torch_runtime() -> None:
    pytest.importorskip("deepspeed")
    with pytest.raises(PpsimError, match="mixture of experts.*torch runtime"):
        prepare(tiny_moe(), runtime="deepspeed")
    assert prepare(tiny_moe(), runtime="auto").runtime == "torch"


def _run_and_compare(tmp_path: Path, s) -> object:
    from ppexec.results.collect import execute
    from ppexec.results.reference import train_reference

    result = execute(s, RunOptions(out=tmp_path, steps=2, warmup=0, seed=7, lr=1e-2, timeout_s=90, save_params=True,
                                   runtime="torch"))
    ref_losses, ref_params = train_reference(s, steps=2, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    initial = reference_model(s.model, 7).state_dict()
    experts_held: dict[int, set[str]] = {}
    seen = set()
    for path in sorted((tmp_path / "ranks").glob("params-*.pt")):
        saved = torch.load(path)
        for name, value in saved["state"].items():
            torch.testing.assert_close(value, ref_params[name], rtol=1e-4, atol=5e-5)
            seen.add(name)
            if is_expert(name):
                experts_held.setdefault(int(path.stem.split("-")[1]), set()).add(name.split(".")[3])
    assert seen == set(ref_params)  # every parameter lives on some rank and matches
    routed = [n for n in ref_params if is_expert(n)]
    assert any(not torch.allclose(ref_params[n], initial[n]) for n in routed)  # the experts really train
    ep = s.expert_parallel
    assert all(len(held) == s.model.moe.experts // ep for held in experts_held.values())
    return result


@pytest.mark.slow
@pytest.mark.parametrize(("schedule", "stages", "dp", "ep", "zero"), [
    ("1f1b", 2, 1, 1, 0), ("1f1b", 2, 2, 2, 1), ("dualpipev", 2, 2, 2, 0), ("combined-1f1b", 2, 2, 2, 0),
    ("1f1b", 1, 4, 2, 1)], ids=lambda v: str(v))
def test_a_pipelined_moe_run_trains_like_one_process(tmp_path: Path, schedule: str, stages: int, dp: int, ep: int,
                                                     zero: int) -> None:
    """Losses and every weight equal one process's after two clipped steps: the experts split over
    the replicas by expert parallelism (dispatch and combine as gloo all-to-alls, differentiable),
    their gradients reduced over the replicas that hold them, the norm taken over every expert; on
    4 replicas each expert has two holders, which reduce its gradient and share its Adam state."""
    result = _run_and_compare(tmp_path, tiny_moe(schedule, stages, dp, ep, zero))
    if ep > 1:
        for trace in result.traces:  # every rank timed its MoE layers' all-to-alls, and the routing's imbalance
            assert len(trace.meta["alltoall_ms"]) == stages and min(trace.meta["alltoall_ms"]) > 0
            assert 1.0 <= trace.meta["routing_skew"] <= ep
            # where: each inside one of its rank's passes, on the trace's clock, adding up to the total
            for rank, spans in enumerate(trace.meta["alltoall_spans"]):
                assert sum(t1 - t0 for t0, t1 in spans) == pytest.approx(trace.meta["alltoall_ms"][rank])
                passes = [(s.start, s.end) for s in trace.spans if s.rank == rank and s.lane == "compute"]
                assert all(any(a - 1e-6 <= t0 <= t1 <= b + 1e-6 for a, b in passes) for t0, t1 in spans)


def test_a_rank_whose_experts_get_no_token_still_runs_every_backward_all_to_all() -> None:
    """The all-to-alls of a group must match on every rank: a rank that received no token (its
    experts idle this micro-batch) still runs the combine's backward, or its peers wait forever
    (gloo: a collective mismatch). One process as a group of one, every token sent nowhere."""
    import torch.distributed as dist

    from ppexec.runtimes import experts as ex

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        layer = MoEMLP(tiny_moe(shared_experts=0).model, seed=11,
                       groups=ex.ExpertGroups(dist.group.WORLD, rank=0, size=1, replicas=None))
        x = torch.zeros(0, 32, requires_grad=True)  # no tokens at all
        ex.EXCHANGES.clear()
        out = layer(x)
        assert len(ex.EXCHANGES) == 2  # dispatch and combine
        out.sum().backward()
        assert len(ex.EXCHANGES) == 4  # and both again, backwards
    finally:
        dist.destroy_process_group()


def test_the_routing_skew_is_the_busiest_rank_of_each_group_over_its_mean() -> None:
    """Per MoE layer forward of each expert-parallel group (a pipeline rank's replicas in groups of
    EP): the copies the busiest rank received over the group's mean; the step's figure is their mean
    (a stage's time adds its layers', each paced by its busiest rank: a median would drop the one
    layer that routes everything to one rank)."""
    from types import SimpleNamespace

    from ppexec.results.collect import routing_skew

    def rank(pipe: int, replica: int, received: list[int]) -> SimpleNamespace:
        return SimpleNamespace(ready=SimpleNamespace(pipe_rank=pipe, replica=replica),
                               steps=[SimpleNamespace(received=received)])

    states = [rank(0, 0, [60, 50]), rank(0, 1, [40, 50]),  # group (0, 0): 1.2, 1.0
              rank(0, 2, [75, 30]), rank(0, 3, [25, 70]),  # group (0, 1): 1.5, 1.4
              rank(1, 0, [50]), rank(1, 1, [50]), rank(1, 2, [90]), rank(1, 3, [10])]  # 1.0, 1.8
    assert routing_skew(states, 0, 2) == pytest.approx(7.9 / 6)  # type: ignore[arg-type]  # what it reads of a RankState
    assert routing_skew([rank(0, 0, []), rank(0, 1, [])], 0, 2) is None  # type: ignore[list-item]


def test_an_exchange_is_the_wait_for_the_last_rank_then_the_time_after_its_arrival() -> None:
    """Rank 0 arrives at 0 and 10 ms, rank 1 at 2 and 9 ms; both leave 1 and 0.5 ms after the
    later one arrived (ns on one clock)."""
    from ppexec.worker.events import exchange_spans

    ms = 1_000_000
    gaps, after = exchange_spans([[(0, 3 * ms), (10 * ms, 21 * ms // 2)],
                                  [(2 * ms, 3 * ms), (9 * ms, 21 * ms // 2)]])
    assert gaps == pytest.approx([2.0, 1.0]) and after == pytest.approx([1.0, 0.5])
    with pytest.raises(ValueError):  # ranks that ran different numbers of exchanges are not one run's
        exchange_spans([[(0, 1)], []])


def test_a_moe_profile_prices_an_exchange_at_what_its_steps_paid_never_below_the_fit() -> None:
    """A link of 100 us and 1 GB/s prices a dispatch of 1 MB over two ranks at 0.1 + 0.5 ms; steps
    that paid 1 and 2 ms for it raise the latency to make 1.5 (the mean), 0.1 ms leaves it; the run
    is the model on one stage over both ranks at EP 2, and only a model whose experts they split."""
    from ppexec.measure.profile import exchange_in_step, exchange_scenario, profile_runs, profiling_scenario
    from ppsim.api import LinkProfile, alltoall_ms, profile_link

    idle = LinkProfile(latency_us=100.0, bandwidth_gb_s=1.0, samples=[(1000, 0.1)])
    assert alltoall_ms(1e6, 2, profile_link(idle)) == pytest.approx(0.6)
    paid = exchange_in_step(idle, [1.0, 2.0], 1e6)
    assert alltoall_ms(1e6, 2, profile_link(paid)) == pytest.approx(1.5)
    assert (paid.bandwidth_gb_s, paid.samples) == (idle.bandwidth_gb_s, idle.samples)
    assert exchange_in_step(idle, [0.1], 1e6) == idle
    run = exchange_scenario(profiling_scenario(tiny_moe()))
    assert run is not None and (run.pipeline.stages, run.data_parallel, run.expert_parallel) == (1, 2, 2)
    assert exchange_scenario(profiling_scenario(tiny_moe(experts=3))) is None
    assert profile_runs(tiny_moe()) == profile_runs(tiny_moe(experts=3)) + 1


def test_an_expert_parallel_profiling_run_that_ran_unlike_collectives_is_refused_in_a_line() -> None:
    """Its ranks' exchanges pair up step by step (both leave 1 ms after the later arrives); ranks that
    recorded different counts, or none, cannot price an exchange."""
    from types import SimpleNamespace

    from ppexec.measure.profile import in_step_exchanges

    def rank(*spans: tuple[int, int]) -> SimpleNamespace:  # what in_step_exchanges reads of a RankState
        marks = [m for t0, t1 in spans for m in (("alltoall", t0), ("alltoall_end", t1))]
        return SimpleNamespace(steps=[SimpleNamespace(marks=marks)])

    ms = 1_000_000
    assert in_step_exchanges([rank((0, 3 * ms)), rank((2 * ms, 3 * ms))]) == pytest.approx([1.0])  # type: ignore[list-item]
    with pytest.raises(PpsimError, match=r"recorded \[1, 0\] all-to-alls in step 0"):
        in_step_exchanges([rank((0, 1)), rank()])  # type: ignore[list-item]
    with pytest.raises(PpsimError, match="recorded no all-to-all on two ranks"):
        in_step_exchanges([rank(), rank()])  # type: ignore[list-item]


def test_a_profile_measures_the_groups_routing_at_every_expert_parallelism() -> None:
    """The expert-parallel run's two ranks counted their own tokens' copies per expert in each
    forward: (3, 1, 0, 0) and (1, 1, 1, 1) sum to the group's (4, 2, 1, 1), then (2, 2, 2, 2):
    over 2 ranks 6 / 4 and 1 (mean 1.25), over 4 ranks 4 / 2 and 1 (1.5). Ranks that routed
    unlike counts of forwards did not run one group's exchanges: one line says so."""
    from types import SimpleNamespace

    from ppexec.measure.profile import group_routing

    def rank(*forwards: list[int]) -> SimpleNamespace:  # what group_routing reads of a RankState
        return SimpleNamespace(steps=[SimpleNamespace(routed=list(forwards))])

    states = [rank([3, 1, 0, 0], [1, 1, 1, 1]), rank([1, 1, 1, 1], [1, 1, 1, 1])]
    assert group_routing(states, 4) == pytest.approx({2: 1.25, 4: 1.5})  # type: ignore[arg-type]
    assert group_routing([rank(), rank()], 4) == {}  # type: ignore[list-item]
    with pytest.raises(PpsimError, match=r"routed \[1, 0\] MoE layer forwards in step 0"):
        group_routing([rank([1, 1, 1, 1]), rank()], 4)  # type: ignore[list-item]


@pytest.mark.slow
def test_a_moe_profile_times_its_all_to_all_at_its_dispatch_sizes() -> None:
    """`ppexec profile` of a mixture of experts fits its all-to-all link to exchanges of 0.25-2x a
    dispatch (each rank's k copies of its tokens), not to the gradients' sizes, then prices a
    dispatch at what its expert-parallel run's steps paid for one (never below the fit); its MoE
    block is the one fitted from the engine's spans."""
    from ppexec.measure.microbench import COLLECTIVE_FACTORS, message_sizes
    from ppexec.measure.profile import measure_profile
    from ppsim.api import alltoall_ms, profile_link

    s = tiny_moe()
    m = s.model
    dispatch = m.seq_len * s.training.micro_batch * m.moe.top_k * m.hidden * 4  # fp32
    profile = measure_profile(s, runtime="torch", runs=1)
    link = profile.collectives["alltoall"]
    assert [b for b, _ in link.samples] == message_sizes(dispatch, COLLECTIVE_FACTORS)
    assert all(ms > 0 for _, ms in link.samples) and link.bandwidth_gb_s > 0
    paid = profile.machine["exchange_ms"]
    assert paid["exchanges"] == 10 * 4 * 4 * 4  # steps x micro-batches x MoE layers x (2 forward, 2 backward)
    priced = alltoall_ms(dispatch, 2, profile_link(link))
    assert priced == pytest.approx(max(paid["idle"], paid["in_step_mean"]), rel=1e-3)
    low, high = (alltoall_ms(dispatch, 2, profile_link(profile.quartiles[q].collectives["alltoall"]))
                 for q in ("low", "high"))
    assert paid["idle"] - 1e-3 <= low <= priced <= high  # the exchanges' quartiles, each on its side
    assert profile.moe_block is not None and profile.moe_block.forward_ms > 0
    # the routing its expert-parallel run measured, at each expert parallelism of its 4 experts
    assert set(profile.routing_skew) == {2, 4} and 1.0 <= profile.routing_skew[2] <= profile.routing_skew[4] <= 4
