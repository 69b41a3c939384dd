"""The analytic cost model against the published formulas, and the partition."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import gpt
from ppsim.costs import Link, build_workload, partition
from ppsim.costs.collectives import ring_allreduce_ms
from ppsim.costs.layers import gpt_layers
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import DEVICES
from ppsim.inputs.scenario import ModelSpec, parse_scenario

MODEL = ModelSpec(layers=24, hidden=2048, heads=16, seq_len=1024, vocab=50304)


def test_block_flops_match_the_closed_form() -> None:
    b, s, h = 2, MODEL.seq_len, MODEL.hidden
    _, block, _ = gpt_layers(MODEL, b)
    assert block.forward_flops == 24 * b * s * h * h + 4 * b * s * s * h
    assert block.input_grad_flops + block.weight_grad_flops == 2 * block.forward_flops
    assert block.weight_grad_flops == 24 * b * s * h * h


def test_step_flops_match_megatron_formula() -> None:
    # Narayanan et al. (SC'21) without recompute, 72 B s l h^2 (1 + s / 6h) + 6 B s h V, with the
    # attention term halved for the causal mask, as Megatron-LM's num_floating_point_operations
    # counts it since 2025 (causal self-attention); the unfused path runs the masked half too
    s = parse_scenario(
        {"model": MODEL.model_dump(), "training": {"global_batch": 64, "micro_batch": 2},
         "pipeline": {"stages": 4}, "data_parallel": 2}
    )
    w = build_workload(s)
    B, S, L, H, V = 64, MODEL.seq_len, MODEL.layers, MODEL.hidden, MODEL.vocab
    expected = 72 * B * S * L * H * H * (1 + S / (12 * H)) + 6 * B * S * H * V
    assert w.model_flops_per_step == pytest.approx(expected, rel=1e-12)
    flash = build_workload(s.model_copy(update={"training": s.training.model_copy(update={"flash_attention": True})}))
    assert flash.model_flops_per_step == pytest.approx(expected, rel=1e-12)  # the model's FLOPs, whatever the kernel


def test_activation_bytes_follow_korthikanti() -> None:
    b, s, h, a = 2, MODEL.seq_len, MODEL.hidden, MODEL.heads
    _, block, _ = gpt_layers(MODEL, b)
    assert block.activation_bytes == int(s * b * h * (34 + 5 * a * s / h))


def test_times_are_flops_over_peak_times_efficiency() -> None:
    s = parse_scenario({"model": MODEL.model_dump(), "pipeline": {"stages": 4, "partition": "uniform"},
                        "hardware": {"device": "h100-sxm", "efficiency": 0.5}})
    w = build_workload(s)
    _, block, _ = gpt_layers(MODEL, 1)
    rate = DEVICES["h100-sxm"].peak_flops("bf16") * 0.5 / 1e3
    hbm = DEVICES["h100-sxm"].hbm_gb_s * 1e6  # bytes per ms
    middle = w.costs.stages[1]
    # the matmuls at the efficient rate, the elementwise work's bytes at HBM bandwidth
    assert middle.forward_ms == pytest.approx(6 * (block.forward_flops / rate + block.forward_bytes / hbm))
    assert middle.backward_ms == pytest.approx(6 * (2 * block.forward_flops / rate + 2 * block.forward_bytes / hbm))
    assert w.costs.message_bytes == MODEL.seq_len * MODEL.hidden * 2


def test_link_time_is_latency_plus_bytes_over_bandwidth() -> None:
    link = Link.from_gb_s(25, 5)
    assert link.transfer_ms(25_000_000) == pytest.approx(0.005 + 1.0)


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_ring_allreduce(n: int) -> None:
    link = Link.from_gb_s(100, 2)
    nbytes = 1e9
    assert ring_allreduce_ms(nbytes, n, link) == pytest.approx(2 * (n - 1) / n * 10.0 + 2 * (n - 1) * 0.002)
    assert ring_allreduce_ms(nbytes, 1, link) == 0.0


@pytest.mark.parametrize("d, allreduce", [(2, "ring"), (8, "ring"), (8, "tree")])
def test_zero_1_steps_a_shard_and_all_gathers(d: int, allreduce: str) -> None:
    """ZeRO-1 as DeepSpeed runs it: the gradients are all-reduced as before, the optimizer steps
    over 1/d of the parameters, and a ring all-gather of the updated parameters ((d-1)/d x bytes /
    bandwidth + (d-1) latencies) ends the optimizer step."""
    def costs(zero: int):
        return build_workload(parse_scenario({
            "model": MODEL.model_dump(), "training": {"micro_batch": 1, "zero_stage": zero, "allreduce": allreduce},
            "pipeline": {"stages": 4, "microbatches": 8, "partition": "uniform"}, "data_parallel": d,
            "hardware": {"device": "a100-80g", "dp_link": {"bandwidth_gb_s": 100, "latency_us": 5}}})).costs.stages

    for plain, zero in zip(costs(0), costs(1), strict=True):
        gather = (d - 1) / d * plain.grad_bytes / 100e6 + (d - 1) * 0.005
        assert zero.optimizer_ms == pytest.approx(plain.optimizer_ms / d + gather)
        assert (zero.allreduce_ms, zero.allreduce_buckets) == (plain.allreduce_ms, plain.allreduce_buckets)
        assert (zero.forward_ms, zero.backward_ms, zero.grad_bytes) == (plain.forward_ms, plain.backward_ms,
                                                                        plain.grad_bytes)
        assert zero.memory.optimizer < plain.memory.optimizer  # type: ignore[union-attr]


def test_zero_1_with_reduce_scatter_halves_the_gradient_exchange() -> None:
    """Megatron's distributed optimizer (``zero_reduce: reduce_scatter``): the gradients are
    reduce-scattered, half of a ring all-reduce per bucket; the optimizer step is as above."""
    def costs(reduce: str):
        return build_workload(parse_scenario({
            "model": MODEL.model_dump(), "training": {"zero_stage": 1, "zero_reduce": reduce, "bucket_mb": 10},
            "pipeline": {"stages": 4, "partition": "uniform"}, "data_parallel": 8,
            "hardware": {"device": "a100-80g", "dp_link": {"bandwidth_gb_s": 100, "latency_us": 5}}})).costs.stages

    for full, scatter in zip(costs("allreduce"), costs("reduce_scatter"), strict=True):
        assert full.allreduce_buckets == scatter.allreduce_buckets > 1
        assert scatter.allreduce_ms == pytest.approx(full.allreduce_ms / 2)
        assert scatter.optimizer_ms == pytest.approx(full.optimizer_ms)


def test_full_recompute_reruns_the_tensor_parallel_all_reduces() -> None:
    """With t > 1 a fully recomputed forward repeats its two all-reduces in the backward (as the
    profile path counts them); selective recomputation reruns only the attention core."""

    def stages(recompute: str):
        return build_workload(parse_scenario({
            "model": MODEL.model_dump(), "training": {"recompute": recompute}, "tensor_parallel": 2,
            "pipeline": {"stages": 4, "partition": "uniform"},
            "hardware": {"device": "a100-80g", "efficiency": 0.5,
                         "tp_link": {"bandwidth_gb_s": 100, "latency_us": 5}}})).costs.stages

    _, block, _ = gpt_layers(MODEL, 1, "full", 2)
    rate = DEVICES["a100-80g"].peak_flops("bf16") * 0.5 / 1e3
    activation = MODEL.seq_len * MODEL.hidden * 2  # one micro-batch's s x b x h activation, bf16
    tp_ms = 2 * ring_allreduce_ms(activation, 2, Link.from_gb_s(100, 5))
    blocks = MODEL.layers // 4
    for none, full in zip(stages("none"), stages("full"), strict=True):
        assert full.forward_ms == pytest.approx(none.forward_ms)
        again_bytes = block.forward_bytes / (DEVICES["a100-80g"].hbm_gb_s * 1e6)  # its elementwise work too
        assert full.backward_ms - none.backward_ms == pytest.approx(
            blocks * (block.recompute_flops / rate + tp_ms + again_bytes))


def test_zero_1_without_data_parallelism_changes_nothing() -> None:
    def costs(zero: int):
        return build_workload(parse_scenario({"model": MODEL.model_dump(), "training": {"zero_stage": zero},
                                              "pipeline": {"stages": 4, "partition": "uniform"}})).costs.stages

    assert costs(1) == costs(0)


def test_gpt_scenario_lands_in_the_published_mfu_range() -> None:
    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize

    summary = summarize(predict(gpt()).trace)
    assert summary.mfu is not None and 0.35 <= summary.mfu <= 0.6


# ----- partition -----------------------------------------------------------------------------
def _brute_force(costs: list[float], parts: int, first: float, last: float) -> float:
    """The lightest most-loaded part over every split: each part a layer or more, but the first and
    the last, which may hold none."""
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations_with_replacement(range(n + 1), parts - 1):
        counts = [b - a for a, b in zip((0, *cuts), (*cuts, n))]
        if parts > 1 and min(counts[1:-1], default=1) < 1 or parts == 1 and n < 1:
            continue
        best = min(best, max(partition.stage_loads(counts, costs, first, last)))
    return best


@settings(max_examples=80, deadline=None)
@example(costs=[1.0] * 7 + [7.0, 9.300511071936267], parts=1, first=9.181714306911495, last=1.5838154803282478)
@given(
    costs=st.lists(st.floats(0.1, 10), min_size=1, max_size=9),
    parts=st.integers(1, 5),
    first=st.floats(0, 10),
    last=st.floats(0, 10),
)
def test_balanced_partition_is_optimal(costs: list[float], parts: int, first: float, last: float) -> None:
    if parts - 2 > len(costs):  # every part but the first and the last needs a layer
        with pytest.raises(ScenarioError):
            partition.balanced(costs, parts, first, last)
        return
    counts = partition.balanced(costs, parts, first, last)
    assert sum(counts) == len(costs) and min(counts[1:-1], default=1) >= 1 and len(counts) == parts
    got = max(partition.stage_loads(counts, costs, first, last))
    assert got == pytest.approx(_brute_force(costs, parts, first, last), rel=1e-9, abs=1e-9)


def test_balanced_gives_the_lm_head_stage_fewer_layers() -> None:
    counts = partition.balanced([1.0] * 30, 4, first_extra=0.0, last_extra=2.0)
    assert counts[-1] < counts[0]
    assert sum(counts) == 30


def test_a_heavy_head_takes_a_stage_of_its_own() -> None:
    """A head heavier than a stage's share of the blocks: the last stage holds only the head (as a
    Megatron layout's ``L`` alone), and every other stage still a block at least."""
    assert partition.balanced([1.0] * 9, 4, first_extra=0.0, last_extra=3.5) == [3, 3, 3, 0]
    assert partition.balanced([1.0] * 2, 4, first_extra=5.0, last_extra=5.0) == [0, 1, 1, 0]


def test_uniform_partition_needs_even_split() -> None:
    assert partition.uniform(12, 4) == [3, 3, 3, 3]
    with pytest.raises(ScenarioError, match="balanced"):
        partition.uniform(10, 4)


# ----- the memory-bound work ------------------------------------------------------------------------
def test_a_blocks_elementwise_bytes_by_hand() -> None:
    """s = 4, b = 1, h = 8, a = 2, f = 32, 2-byte elements, dropout, no FlashAttention, t = 1:
    E = 32 elements; norms 2 x 2E x 2 = 256 bytes; bias-dropout-adds 2 x (3 x 2 + 1) x E = 448;
    bias-GeLU 2 x (E f / h) x 2 = 512; scores b a s^2 = 32: softmax 2 x 2 + dropout 2 x 2 + 1 bytes
    each = 9 x 32 = 288. Forward 1,504 bytes; backward twice that."""
    from ppsim.costs.elementwise import block_traffic

    t = block_traffic(4, 1, 8, 2, 32, 2)
    assert t.forward == 256 + 448 + 512 + 288 == 1504
    assert (t.backward, t.recompute) == (3008, 0.0)
    assert block_traffic(4, 1, 8, 2, 32, 2, recompute="full").recompute == 1504
    assert block_traffic(4, 1, 8, 2, 32, 2, recompute="selective").recompute == 288
    # FlashAttention keeps the scores in the kernel; no dropout drops the masks
    assert block_traffic(4, 1, 8, 2, 32, 2, flash_attention=True, dropout=False).forward == 256 + 384 + 512
    # tensor parallelism splits the MLP and the scores, sequence parallelism the norms and adds too
    assert block_traffic(4, 1, 8, 2, 32, 2, tensor_parallel=2).forward == 256 + 448 + 256 + 144
    assert block_traffic(4, 1, 8, 2, 32, 2, tensor_parallel=2, sequence_parallel=True).forward == 752
    # SwiGLU reads two f-wide tensors and writes one
    assert block_traffic(4, 1, 8, 2, 32, 2, swiglu=True).forward == 1504 + 256


def test_the_elementwise_work_costs_its_bytes_at_hbm_bandwidth() -> None:
    """The loss over a 51,200-word vocabulary in fp32: 8 bytes per logit each way; at 2 TB/s a
    2,048-token sequence's forward loss takes 0.42 ms — on the last stage, besides its matmuls."""
    from ppsim.costs.elementwise import head_traffic

    loss = head_traffic(2048, 1, 51200)
    assert loss.forward == loss.backward == 8 * 2048 * 51200
    assert loss.forward / 2000e6 == pytest.approx(0.419, abs=1e-3)  # ms at 2,000 GB/s
    s = parse_scenario({"model": MODEL.model_dump(), "pipeline": {"stages": 4, "partition": "uniform"},
                        "hardware": {"device": "h100-sxm", "efficiency": 0.5}})
    first, middle, _, last = build_workload(s).costs.stages
    _, block, head = gpt_layers(MODEL, 1)
    rate = DEVICES["h100-sxm"].peak_flops("bf16") * 0.5 / 1e3
    hbm = DEVICES["h100-sxm"].hbm_gb_s * 1e6
    assert last.forward_ms - middle.forward_ms == pytest.approx(head.forward_flops / rate + head.forward_bytes / hbm)


def test_an_overlapped_parameter_gather_exposes_what_the_first_forward_cannot_cover() -> None:
    """ZeRO-1 over 4 replicas of 1 GB of gradients in 10 buckets on a 100 GB/s link: the all-gather
    is 3/4 x 1 GB / 100 GB/s = 7.5 ms. At the step's end it is all exposed; beside a 5 ms forward
    2.5 ms stay; beside a 50 ms forward only its first bucket's 0.75 ms."""
    from ppsim.costs.table import Link, StageCost
    from ppsim.costs.zero import shard_optimizer

    link = Link(latency_ms=0.0, bandwidth_bytes_per_ms=1e8)

    def step(forward_ms: float, overlap: bool) -> float:
        cost = StageCost(forward_ms=forward_ms, backward_ms=2 * forward_ms, optimizer_ms=4.0, grad_bytes=1e9,
                         allreduce_buckets=10)
        return shard_optimizer(cost, 4, link, link, "reduce_scatter", overlap_gather=overlap).optimizer_ms

    assert step(5.0, False) == pytest.approx(1.0 + 7.5)
    assert step(5.0, True) == pytest.approx(1.0 + 2.5)
    assert step(50.0, True) == pytest.approx(1.0 + 0.75)
