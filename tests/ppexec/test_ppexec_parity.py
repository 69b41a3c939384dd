"""A pipelined DeepSpeed run trains exactly like the same model in one process."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from ppexec.launch.prepare import RunOptions  # noqa: E402
from ppexec.results.collect import execute  # noqa: E402
from ppexec.results.reference import train_reference  # noqa: E402
from ppexec.runtimes.model import reference_model  # noqa: E402
from ppsim.inputs.scenario import parse_scenario  # noqa: E402

pytestmark = pytest.mark.slow  # trains with DeepSpeed in several processes


def tiny(schedule: str, stages: int, dp: int, microbatches: int = 4, recompute: str = "none",
         grad_clip: float = 1.0, tp: int = 1):
    return parse_scenario({
        "name": f"parity-{schedule}-{stages}x{dp}",
        "model": {"layers": 4, "hidden": 32, "heads": 2, "seq_len": 16, "vocab": 64, "dtype": "fp32"},
        "training": {"micro_batch": 2, "recompute": recompute, "grad_clip": grad_clip},
        "pipeline": {"stages": stages, "microbatches": microbatches, "schedule": schedule, "partition": "uniform"},
        "data_parallel": dp,
        "tensor_parallel": tp,
        "hardware": {"device": "cpu"},
    })


@pytest.mark.parametrize(
    "schedule,stages,dp",
    [("gpipe", 2, 1), ("1f1b", 2, 1), ("gpipe", 4, 1), ("1f1b", 4, 1), ("1f1b", 2, 2)],
    ids=lambda v: str(v),
)
def test_pipelined_run_matches_single_process(tmp_path: Path, schedule: str, stages: int, dp: int) -> None:
    s = tiny(schedule, stages, dp)
    opts = RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60, save_params=True)
    result = execute(s, opts)
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    initial = reference_model(s.model, 7).state_dict()
    assert not torch.allclose(ref_params["1.qkv.weight"], initial["1.qkv.weight"])  # it really trains
    seen = set()
    for path in sorted((tmp_path / "ranks").glob("params-*.pt")):
        saved = torch.load(path)
        for name, value in saved["state"].items():
            assert name in ref_params, f"{name} is not a parameter of the reference model"
            # Adam divides by sqrt(v): for near-zero grads, summation-order rounding shows up at a few
            # 1e-6 after a step of size lr = 1e-2; 5e-5 is 0.5 % of one step
            torch.testing.assert_close(value, ref_params[name], rtol=1e-4, atol=5e-5)
            seen.add(name)
    assert seen == set(ref_params)  # every parameter lives on some stage and matches


@pytest.mark.parametrize("stages, dp", [(2, 1), (4, 1), (2, 2)])
def test_gradient_clipping_takes_the_norm_over_every_stage(tmp_path: Path, stages: int, dp: int) -> None:
    """With a clipping norm every step reaches, the pipelined run still trains as one process that
    clips the norm over all of the model's gradients (DeepSpeed alone would count the first stage's
    parameters only: see ppexec/runtimes/deepspeed_pipe/__init__.py)."""
    s = tiny("1f1b", stages, dp, grad_clip=0.05)
    result = execute(s, RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60, save_params=True))
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    unclipped, _ = train_reference(tiny("1f1b", stages, dp, grad_clip=0.0), steps=3, seed=7, lr=1e-2)
    assert ref_losses[-1] != pytest.approx(unclipped[-1], rel=1e-5)  # the clipping changes the training
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    for path in sorted((tmp_path / "ranks").glob("params-*.pt")):
        for name, value in torch.load(path)["state"].items():
            torch.testing.assert_close(value, ref_params[name], rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("recompute, blocks, cores", [("none", 1, 1), ("full", 2, 2), ("selective", 1, 2)])
def test_recomputation_reruns_the_forward_and_trains_the_same(tmp_path: Path, recompute: str, blocks: int,
                                                              cores: int) -> None:
    """Recomputation changes when activations exist, not what is computed: the losses equal the
    single-process run without it, while the blocks (full) or their attention cores (selective)
    run a second forward in the backward, as counted inside the real run."""
    s = tiny("1f1b", 2, 1, recompute=recompute)
    result = execute(s, RunOptions(out=tmp_path, steps=2, warmup=0, seed=7, lr=1e-2, timeout_s=60))
    ref_losses, _ = train_reference(s, steps=2, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    once = s.model.layers * s.microbatches
    for trace in result.traces:
        assert trace.meta["recompute"] == recompute
        assert trace.meta["forward_calls"] == {"block": blocks * once, "attention_core": cores * once}


@pytest.mark.parametrize("reduce", ["allreduce", "reduce_scatter"])
def test_zero_1_shards_the_optimizer_state_and_trains_the_same(tmp_path: Path, reduce: str) -> None:
    """ZeRO-1 over 2 data-parallel replicas of a 2-stage pipeline: the same losses and weights as
    one process, while each rank's Adam moments cover half of its stage's parameters, the stage's
    parameters being those ppsim's cost model counts."""
    from ppsim.costs import build_workload

    s = tiny("1f1b", 2, 2, grad_clip=0.05)  # ZeRO's optimizer clips inside its step: over every stage too
    s = s.model_copy(update={"training": s.training.model_copy(update={"zero_stage": 1, "zero_reduce": reduce})})
    result = execute(s, RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60,
                                   save_params=True))
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    for path in sorted((tmp_path / "ranks").glob("params-*.pt")):
        for name, value in torch.load(path)["state"].items():
            torch.testing.assert_close(value, ref_params[name], rtol=1e-4, atol=5e-5)
    stage_params = [c.params for c in build_workload(s).costs.stages]
    for st in result.states:
        opt = st.measurements["optimizer"]
        assert opt["class"] == "DeepSpeedZeroOptimizer"
        assert opt["state_elements"] == 2 * stage_params[st.ready.pipe_rank] // 2  # two moments, half each


@pytest.mark.parametrize("stages, tp, dp, recompute", [(2, 2, 1, "none"), (1, 2, 2, "none"), (2, 2, 1, "full")],
                         ids=lambda v: str(v))
def test_tensor_parallel_blocks_train_like_one_process(tmp_path: Path, stages: int, tp: int, dp: int,
                                                       recompute: str) -> None:
    """Megatron-style tensor parallelism (heads and MLP units split over 2 ranks, two all-reduces per
    block and pass), with clipping that every step reaches, and under DeepSpeed's checkpointing
    (whose rerun forward all-reduces again): the same losses as one process, and every rank's
    slice of every weight equal to that slice of the one-process weights."""
    from ppexec.runtimes.tensor_parallel import shard

    s = tiny("1f1b", stages, dp, grad_clip=0.05, tp=tp, recompute=recompute)
    result = execute(s, RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60, save_params=True))
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert {st.ready.tp_rank for st in result.states} == set(range(tp))
    sliced = 0
    for path in sorted((tmp_path / "ranks").glob("params-*.pt")):
        saved = torch.load(path)
        for name, value in saved["state"].items():
            layer, local = name.split(".", 1)
            block = 0 < int(layer) <= s.model.layers
            want = shard(local, ref_params[name], saved["tp"], saved["tp_size"]) if block else ref_params[name]
            sliced += want.shape != ref_params[name].shape
            # the all-reduces sum partial products in another order than one matmul: for near-zero
            # gradients Adam's update shows that at ~6e-5 after 3 steps of 1e-2 (1 % of one step)
            torch.testing.assert_close(value, want, rtol=1e-4, atol=1e-4)
    assert sliced > 0  # the blocks really are split


# ----- the torch runtime: every schedule, both placements of work, the same training ------------------
def _torch_tiny(schedule: str, stages: int, dp: int = 1, **kw: object):
    from ppsim.plan.schedules import describe

    info = describe(schedule)
    chunks = info.chunks.default
    s = tiny(schedule, stages, dp, **kw)  # type: ignore[arg-type]
    layers = max(4, stages * chunks)
    data = s.model_dump(exclude_none=True)
    data["model"]["layers"] = layers
    data["pipeline"]["chunks"] = chunks
    m = max(4, stages)  # interleaved: a multiple of the ranks
    data["pipeline"]["microbatches"] = info.microbatches.nearest(stages, m, chunks) or m  # dualpipev: 2p
    return parse_scenario(data)


def _assert_weights_equal(run_dir: Path, ref_params: dict[str, torch.Tensor]) -> set[str]:
    seen = set()
    for path in sorted((run_dir / "ranks").glob("params-*.pt")):
        for name, value in torch.load(path)["state"].items():
            torch.testing.assert_close(value, ref_params[name], rtol=1e-4, atol=5e-5)
            seen.add(name)
    return seen


TORCH_CASES = [(s, p) for s in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1") for p in (2, 4)] + [
    ("zb-h2", 2), ("looped-bfs", 2), ("interleaved-zb", 2), ("zb-v", 2), ("zb-v", 4), ("interleaved-zb", 4),
    ("v-half", 4), ("v-min", 2), ("dualpipev", 2), ("dualpipev", 4), ("auto", 2), ("auto", 4),
    ("zb-h2", 4), ("looped-bfs", 4), ("v-half", 2), ("v-min", 4), ("combined-1f1b", 2)]


@pytest.mark.parametrize("schedule, stages", TORCH_CASES, ids=lambda v: str(v))
def test_the_torch_runtime_trains_every_schedule_like_one_process(tmp_path: Path, schedule: str, stages: int) -> None:
    """Every schedule in torch.distributed.pipelining's runtime: the plan's actions run exactly, in
    its order, on every rank, and losses and weights equal one process's (with clipping that every
    step reaches, so the norm must cover every stage)."""
    s = _torch_tiny(schedule, stages, grad_clip=0.05)
    result = execute(s, RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60, save_params=True,
                                   runtime="torch"))
    assert result.runtime == "torch" and result.representative.meta["runtime"] == "torch"
    for trace in result.traces:
        assert trace.actions_by_rank() == [list(r) for r in result.plan.actions]
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert _assert_weights_equal(tmp_path, ref_params) == set(ref_params)


@pytest.mark.parametrize("schedule, stages", [("gpipe", 2), ("1f1b", 2), ("gpipe", 4), ("1f1b", 4)])
def test_both_runtimes_train_a_plan_they_both_run_alike(tmp_path: Path, schedule: str, stages: int) -> None:
    s = tiny(schedule, stages, 1)
    runs = {rt: execute(s, RunOptions(out=tmp_path / rt, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60,
                                      save_params=True, runtime=rt)) for rt in ("deepspeed", "torch")}
    assert runs["torch"].losses == pytest.approx(runs["deepspeed"].losses, rel=1e-5, abs=1e-6)
    weights = {rt: {n: v for p in sorted((tmp_path / rt / "ranks").glob("params-*.pt"))
                    for n, v in torch.load(p)["state"].items()} for rt in runs}
    assert weights["torch"].keys() == weights["deepspeed"].keys()
    for name, value in weights["torch"].items():
        torch.testing.assert_close(value, weights["deepspeed"][name], rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("schedule, zero", [("1f1b", 0), ("zb-h1", 0), ("interleaved-1f1b", 1)], ids=lambda v: str(v))
def test_the_torch_runtime_averages_gradients_over_replicas(tmp_path: Path, schedule: str, zero: int) -> None:
    """2 ranks x 2 replicas (4 processes: correctness only): REDUCE_GRAD averages each stage's
    gradients over its replicas; with ZeRO-1 each replica keeps the Adam state of half the parameters."""
    s = _torch_tiny(schedule, 2, dp=2, grad_clip=0.05)
    s = s.model_copy(update={"training": s.training.model_copy(update={"zero_stage": zero})})
    result = execute(s, RunOptions(out=tmp_path, steps=2, warmup=0, seed=7, lr=1e-2, timeout_s=90, save_params=True,
                                   runtime="torch"))
    ref_losses, ref_params = train_reference(s, steps=2, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert _assert_weights_equal(tmp_path, ref_params) == set(ref_params)
    if zero:
        from ppsim.costs import build_workload

        params = {}  # per pipeline rank, the parameters of its stages, as ppsim counts them
        for k, c in enumerate(build_workload(s).costs.stages):
            params[result.plan.stage_to_rank[k]] = params.get(result.plan.stage_to_rank[k], 0) + c.params
        held: dict[int, list[int]] = {}
        for st in result.states:
            opt = st.measurements["optimizer"]
            assert opt["class"] == "ZeroRedundancyOptimizer"
            held.setdefault(st.ready.pipe_rank, []).append(opt["state_elements"])
        for rank, shards in held.items():  # two moments of every parameter, split between the replicas
            assert sum(shards) == 2 * params[rank] and max(shards) < 2 * params[rank]


@pytest.mark.parametrize("recompute, blocks, cores", [("full", 2, 2), ("selective", 1, 2)])
def test_the_torch_runtime_recomputes_with_split_backwards_too(tmp_path: Path, recompute: str, blocks: int,
                                                               cores: int) -> None:
    """zb-h1's I and W with recomputation inside the stages (non-reentrant checkpoints): the same
    losses as one process without it, the forwards run again as counted inside the run."""
    s = _torch_tiny("zb-h1", 2, recompute=recompute)
    result = execute(s, RunOptions(out=tmp_path, steps=2, warmup=0, seed=7, lr=1e-2, timeout_s=60, runtime="torch"))
    ref_losses, _ = train_reference(s, steps=2, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    once = s.model.layers * s.microbatches
    for trace in result.traces:
        assert trace.meta["forward_calls"]["block"] >= blocks * once
        assert trace.meta["forward_calls"]["attention_core"] >= cores * once


@pytest.mark.parametrize("runtime, schedule", [("deepspeed", "1f1b"), ("torch", "zb-v")])
def test_a_llama_style_model_trains_like_one_process(tmp_path: Path, runtime: str, schedule: str) -> None:
    """SwiGLU MLPs, RMSNorms, rotary positions and a KV head shared by two query heads: pipelined
    over two ranks by either runtime, losses and weights equal one process's."""
    s = _torch_tiny(schedule, 2)
    data = s.model_dump(exclude_none=True)
    data["model"].update(mlp="swiglu", positions="rope", kv_heads=1)
    s = parse_scenario(data)
    result = execute(s, RunOptions(out=tmp_path, steps=3, warmup=0, seed=7, lr=1e-2, timeout_s=60, save_params=True,
                                   runtime=runtime))
    assert result.runtime == runtime
    ref_losses, ref_params = train_reference(s, steps=3, seed=7, lr=1e-2)
    assert result.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    assert _assert_weights_equal(tmp_path, ref_params) == set(ref_params)
    assert any(name.endswith("gate.weight") for name in ref_params)
