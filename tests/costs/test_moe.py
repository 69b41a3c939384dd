"""A mixture of experts (ppsim.costs.moe), figures worked by hand from its docstring: Mixtral 8x7B's
parameters against its paper's, a MoE layer's FLOPs and all-to-all bytes per device, memory per
rank under expert parallelism, the skew's effect, and Megatron's layout rules as one-line errors."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from conftest import SCENARIOS
from ppsim.costs.analytic import token_counts
from ppsim.costs.fsdp import Exposed
from ppsim.costs.layers import gpt_layers
from ppsim.costs.moe import ExpertShard, alltoall_ms, reduced_params
from ppsim.costs.table import Link
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import DEVICES
from ppsim.inputs.scenario import ModelSpec, Scenario, load, parse_scenario
from ppsim.prediction import build

MIXTRAL = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "seq_len": 4096,
           "vocab": 32000, "mlp": "swiglu", "positions": "rope", "dropout": False,
           "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 14336}}


def test_mixtral_8x7b_has_the_parameters_its_paper_gives() -> None:
    """Jiang et al. (2024), "Mixtral of Experts": 46.7B parameters, 12.9B active per token. Per
    layer: attention (2 + 2 x 8/32) h^2 = 41.9M, 8 experts of 3 x 4096 x 14336 = 176.2M, the
    router 4096 x 8, two RMSNorms; the untied embedding and head 2 x 32000 x 4096."""
    m = ModelSpec(**MIXTRAL)
    emb, block, head = gpt_layers(m, 1, experts=ExpertShard(m.moe))  # type: ignore[arg-type]
    total = m.layers * block.params + emb.params + head.params
    assert total == pytest.approx(46.7e9, rel=0.002)
    active = total - m.layers * block.expert_params * (8 - 2) / 8
    assert active == pytest.approx(12.9e9, rel=0.01)
    assert block.expert_params == 8 * 3 * 4096 * 14336


def test_a_moe_layer_runs_a_dense_mlp_of_k_experts_and_dispatches_k_copies_of_its_tokens() -> None:
    """Per device (t = 2, sequence parallel, EP 4 of 8 experts, ETP 1): T = 4096 / 2 = 2048 tokens,
    each to 2 experts; the experts' forward 2 x 3 x 2T h f_e, the router's 2 T h E; a dispatch
    carries 2T x h x 2 bytes; the device holds 2 of the 8 experts whole."""
    m = ModelSpec(**MIXTRAL)
    shard = ExpertShard(m.moe, expert_parallel=4, expert_tensor=1)  # type: ignore[arg-type]
    _, dense, _ = gpt_layers(m.model_copy(update={"moe": None, "ffn_hidden": 1}), 1, tensor_parallel=2,
                             sequence_parallel=True)
    _, moe, _ = gpt_layers(m, 1, tensor_parallel=2, sequence_parallel=True, experts=shard)
    T, h, f = 2048, 4096, 14336
    mlp_of_width_1 = 2 * 3 * 4096 * h * 1 / 2
    assert moe.forward_flops - (dense.forward_flops - mlp_of_width_1) == pytest.approx(
        2 * 3 * (2 * T) * h * f + 2 * T * h * 8)
    assert moe.alltoall_bytes == 2 * T * h * 2
    assert moe.expert_params == 2 * 3 * h * f
    flops = sum(g.flops for g in moe.gemms.forward)
    assert flops == pytest.approx(moe.forward_flops)  # the GEMMs are the FLOPs


def test_an_all_to_all_sends_all_but_its_own_share() -> None:
    link = Link(latency_ms=0.01, bandwidth_bytes_per_ms=1e8)  # 100 GB/s
    assert alltoall_ms(8e8, 8, link) == pytest.approx(7 * 0.01 + 7e8 / 1e8)
    assert alltoall_ms(8e8, 1, link) == 0.0


def test_expert_gradients_reduce_over_their_own_replicas() -> None:
    """1e9 dense parameters over 16 replicas and 4e9 expert ones over 2: the ring moves 15/16 and
    1/2 of their bytes per device, as 1e9 + 4e9 x (1/2) / (15/16) over 16."""
    assert reduced_params(1e9, 4e9, 16, 2) == pytest.approx(1e9 + 4e9 * 0.5 / (15 / 16))
    assert reduced_params(1e9, 4e9, 1, 1) == 5e9


def stage_of(blocks: int) -> Any:
    """What token_counts reads of a stage: its blocks, all MoE blocks, none of them plain."""
    return SimpleNamespace(blocks=blocks, moe_blocks=blocks, plain_blocks=0)


def token_counts_ms(s: Scenario) -> float:
    """One MoE block's exchange of token counts before its dispatch, on the scenario's links."""
    from ppsim.costs.links import scenario_links
    from ppsim.inputs.hardware import get_device

    return token_counts(s, stage_of(1), scenario_links(s, get_device(s.hardware.device), (0, 1)).expert_parallel
                        ).forward_ms


def scenario(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "moe", "model": {**MIXTRAL, "layers": 8},
        "training": {"micro_batch": 1, "flash_attention": True, "zero_stage": 1, "zero_reduce": "reduce_scatter"},
        "pipeline": {"stages": 2, "microbatches": 4}, "data_parallel": 8, "expert_parallel": 8,
        "hardware": {"device": "h100-sxm"}}
    for key, value in over.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data else value
    return data


def test_a_rank_holds_its_experts_sharded_over_their_replicas() -> None:
    """EP 8 over 8 replicas: each device holds 1 expert per layer (4 layers a stage), 176.2M each;
    ZeRO-1 shards the experts' optimizer state over their 8 / 8 = 1 replica (none) and the dense
    parameters' over 8."""
    c = build(parse_scenario(scenario())).workload.costs.stages[0]
    expert = 4 * 3 * 4096 * 14336
    dense = c.params - expert
    assert c.memory is not None and c.memory.optimizer == pytest.approx(12 * expert + -(-12 * dense // 8), abs=16)
    assert c.memory.weights == 2 * c.params


def test_nccls_dispatcher_exchanges_each_ranks_token_counts_before_its_dispatch() -> None:
    """Mixtral's 8 experts at EP 8 on a link of 10 us and 100 GB/s: each rank's 8 counts of 8 bytes,
    7/8 of them to the 7 others, one latency each; DeepEP's and HybridEP's kernels count inside
    their own; once per forward, and again where the backward recomputes it."""
    link = Link.from_gb_s(100.0, 10.0)
    one = 7 * 0.010 + 64 * 7 / 8 / 1e8
    counts = token_counts(parse_scenario(scenario()), stage_of(4), link)
    assert counts.forward_ms == pytest.approx(4 * one) and counts.backward_ms == 0.0
    full = token_counts(parse_scenario(scenario(training={"recompute": "full"})), stage_of(4), link)
    assert full.backward_ms == pytest.approx(4 * one)
    for other in ({"training": {"moe_dispatcher": "deepep"}}, {"expert_parallel": 1}):
        assert token_counts(parse_scenario(scenario(**other)), stage_of(4), link) == token_counts(
            parse_scenario(scenario()), stage_of(0), link) == Exposed()


def test_a_measured_routing_is_the_busiest_ranks_copies_over_the_mean_forward_by_forward() -> None:
    """Two forwards of 4 experts, copies (3, 1, 1, 1) and (2, 2, 2, 2): over 2 ranks the first
    gives ranks 4 and 2, 4 / 3; the second 1; their mean 7 / 6. Over 4 ranks 3 / 1.5 = 2 and 1:
    3 / 2. A forward that routed nothing is left out; none at all says nothing."""
    from ppsim.costs.moe import measured_skew

    routed = [[3, 1, 1, 1], [2, 2, 2, 2], [0, 0, 0, 0]]
    assert measured_skew(routed, 2) == pytest.approx(7 / 6)
    assert measured_skew(routed, 4) == pytest.approx(3 / 2)
    assert measured_skew(routed, 1) == pytest.approx(1.0)
    assert measured_skew([[0, 0]], 2) is None and measured_skew([], 2) is None


def test_the_counts_go_to_the_expert_tensor_and_expert_parallel_group() -> None:
    """Megatron gathers the counts over ETP x EP (its tp_ep group): at t = 2, EP 4, ETP 2 that is 8
    ranks, 7 latencies and 7/8 of the 64 bytes; with ETP 1 the 4 of EP alone."""
    link = Link.from_gb_s(100.0, 10.0)

    def counts(etp: int) -> float:
        s = parse_scenario(scenario(tensor_parallel=2, data_parallel=4, expert_parallel=4,
                                    expert_tensor_parallel=etp, training={"sequence_parallel": True}))
        return token_counts(s, stage_of(1), link).forward_ms

    assert counts(2) == pytest.approx(7 * 0.010 + 64 * 7 / 8 / 1e8)
    assert counts(1) == pytest.approx(3 * 0.010 + 64 * 3 / 4 / 1e8)


def test_skew_slows_the_layer_and_moves_more_bytes_but_not_the_model_flops() -> None:
    even = build(parse_scenario(scenario()))
    skewed = build(parse_scenario(scenario(model={**MIXTRAL, "layers": 8,
                                                  "moe": {**MIXTRAL["moe"], "skew": 1.5}})))
    a, b = even.workload.costs.stages[0], skewed.workload.costs.stages[0]
    counts = 4 * token_counts_ms(parse_scenario(scenario()))  # 4 MoE blocks' exchanges of counts: no skew
    assert b.forward_ms > a.forward_ms
    assert b.forward_comm_ms - counts == pytest.approx(1.5 * (a.forward_comm_ms - counts), rel=0.05)
    assert skewed.workload.model_flops_per_step == pytest.approx(even.workload.model_flops_per_step)


def test_expert_tensor_parallelism_gathers_the_dispatched_tokens_over_its_group() -> None:
    """t = 2 with sequence parallelism, EP 4, ETP 2: each MoE layer's dispatch all-gathers the
    device's dispatched copies over its ETP pair and the combine reduce-scatters them, a ring of 2
    moving half of 2 x the dispatch's bytes each, in each pass; with ETP 1 the same layout has only
    the all-to-alls (and twice the expert weights per device)."""
    from ppsim.costs.collectives import ring_allgather_ms
    from ppsim.costs.table import Link

    def stage(etp: int) -> Any:
        return build(parse_scenario(scenario(tensor_parallel=2, data_parallel=4, expert_parallel=4,
                                             expert_tensor_parallel=etp,
                                             training={"sequence_parallel": True}))).workload.costs.stages[0]

    one, two = stage(1), stage(2)
    tokens = 4096 // 2  # b s / t
    dispatch = tokens * 2 * 4096 * 2  # k copies of h values, 2 bytes
    nvlink = Link.from_gb_s(DEVICES["h100-sxm"].collective_rate(), DEVICES["h100-sxm"].intra_node_latency_us)
    gathers = 4 * 2 * ring_allgather_ms(2 * dispatch, 2, nvlink)  # 4 MoE layers, a gather and a scatter each
    assert two.forward_overlap_ms - one.forward_overlap_ms == pytest.approx(gathers, rel=1e-9)
    assert two.backward_overlap_ms - one.backward_overlap_ms == pytest.approx(gathers, rel=1e-9)
    assert one.params - two.params == 4 * 2 * 3 * 4096 * 14336 // 2  # 2 experts of 8 a layer, half each


def test_dualpipev_hides_the_all_to_alls_behind_the_other_micro_batch() -> None:
    """The overlapped forward and backward of DualPipeV hides each pass's all-to-alls under the
    other's compute: the same stage's F and B together take less than apart, by their comm."""
    from ppsim.plan import Action, Kind, Overlap
    from ppsim.sim.durations import overlapped_ms

    pred = build(parse_scenario(scenario(pipeline={"stages": 2, "microbatches": 8, "schedule": "dualpipev", "chunks": 2})))
    costs = pred.workload.costs
    c = costs.stages[1]
    both = overlapped_ms(costs, Overlap.of(Action(1, Kind.F, 0), Action(1, Kind.B, 1)))
    counts = 2 * token_counts_ms(pred.scenario)  # its 2 blocks' exchanges of counts: exposed, the dispatch waits
    assert c.forward_comm_ms > 0 and both == pytest.approx(c.forward_ms + c.backward_ms - c.forward_comm_ms
                                                           - c.backward_comm_ms + counts)


@pytest.mark.parametrize("over, field, says", [
    ({"expert_parallel": 3}, "expert_parallel",
     "must divide the devices of a stage.*; with expert_tensor_parallel 1: expert_parallel 1, 2, 4, 8$"),
    ({"expert_parallel": 16, "data_parallel": 16}, "expert_parallel",
     "must divide model.moe.experts .8.*; with expert_tensor_parallel 1: expert_parallel 1, 2, 4, 8$"),
    ({"tensor_parallel": 2, "data_parallel": 4, "expert_parallel": 4}, "training.sequence_parallel",
     "needs training.sequence_parallel"),
    ({"expert_parallel": 4, "expert_tensor_parallel": 2,
      "model": {"moe": {"experts": 8, "top_k": 2, "ffn_hidden": 14335}}}, "expert_tensor_parallel",
     "must divide model.moe.ffn_hidden"),
    ({"model": {"moe": {"experts": 8, "top_k": 2, "ffn_hidden": 14336, "dense_layers": 8}}}, "model.moe.dense_layers",
     "leaves no MoE layer"),
])
def test_megatrons_expert_rules_are_one_line_errors(over: dict[str, Any], field: str, says: str) -> None:
    data = scenario(**over)
    if "model" in over:
        data["model"] = {**MIXTRAL, "layers": 8, **over["model"]}
    with pytest.raises(ScenarioError, match=says) as err:
        parse_scenario(data)
    assert err.value.field == field


def test_experts_without_a_mixture_are_refused() -> None:
    data = scenario()
    data["model"] = {k: v for k, v in data["model"].items() if k != "moe"}
    with pytest.raises(ScenarioError, match="the model has none") as err:
        parse_scenario(data)
    assert err.value.field == "expert_parallel"
    data["model"]["moe"] = {"experts": 4, "top_k": 5, "ffn_hidden": 8}
    with pytest.raises(ScenarioError, match="top_k .5. is more than experts .4.") as err:
        parse_scenario(data)
    assert err.value.field == "model.moe"


def test_deepseek_v3_has_the_parameters_its_report_gives() -> None:
    """DeepSeek-V3 (arXiv:2412.19437): 671B parameters, 37B active per token. Per MoE layer: MLA
    projections 7168 x 1536 + 1536 x 128 x 192 + 7168 x 576 + 512 x 128 x 256 + 128 x 128 x 7168
    (187.1M), 256 routed and 1 shared expert of 3 x 7168 x 2048, the router 7168 x 256; 3 dense
    layers with an MLP of 18,432; embedding and head 2 x 129,280 x 7168."""
    from conftest import SCENARIOS
    from ppsim.inputs.scenario import load

    m = load(SCENARIOS / "deepseek-v3.yaml").model
    assert m is not None and m.moe is not None
    emb, dense, head = gpt_layers(m, 1)
    _, moe, _ = gpt_layers(m, 1, experts=ExpertShard(m.moe))
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert moe.params == mla + 1536 + 512 + 257 * 3 * 7168 * 2048 + 7168 * 256 + 2 * 7168
    total = 3 * dense.params + 58 * moe.params + emb.params + head.params
    assert total == pytest.approx(671e9, rel=0.001)
    active = total - 58 * moe.expert_params * (256 - 8) / 256
    assert active == pytest.approx(37e9, rel=0.02)


def test_multi_head_latent_attention_runs_heads_of_its_own_widths() -> None:
    """MLA's scores over heads of 192 (128 + 64 RoPE), its context of 128: per head and token pair
    2 x 192 + 2 x 128 FLOPs forward; the GEMMs are the FLOPs."""
    m = ModelSpec(layers=1, hidden=7168, heads=128, seq_len=4096, vocab=1024, mlp="swiglu", ffn_hidden=18432,
                  mla={"q_lora_rank": 1536, "kv_lora_rank": 512})
    _, block, _ = gpt_layers(m, 1)
    s = 4096
    attention = [g for g in block.gemms.forward if g.head_dim]
    assert sum(g.flops for g in attention) == pytest.approx(s * s * 128 * (2 * 192 + 2 * 128))
    assert sum(g.flops for g in block.gemms.forward) == pytest.approx(block.forward_flops)
    with pytest.raises(ValueError, match="drop kv_heads and head_dim"):
        ModelSpec(layers=1, hidden=7168, heads=128, kv_heads=8, seq_len=8, vocab=8, mla={"kv_lora_rank": 512})


def test_heads_wider_than_the_model_scale_the_attention() -> None:
    """Qwen3-235B-A22B's attention: h = 4096, 64 heads of 128 (8,192 wide), 4 key/value heads: Q and
    the output 4096 x 8192 each, K and V 4096 x 512 each."""
    m = ModelSpec(layers=1, hidden=4096, heads=64, kv_heads=4, head_dim=128, seq_len=4096, vocab=1024,
                  mlp="swiglu", ffn_hidden=1536)
    _, block, _ = gpt_layers(m, 1)
    assert block.params == 2 * 4096 * 8192 + 2 * 4096 * 512 + 3 * 4096 * 1536 + 2 * 4096
    attention = [g for g in block.gemms.forward if g.head_dim]
    assert sum(g.flops for g in attention) == pytest.approx(4 * 4096 * 4096 * 8192)


def test_fp8_casts_every_routed_copy_of_a_token() -> None:
    """In FP8 the experts cast their inputs: k x skew copies of each token (1 / t of the tokens per
    device), so a MoE layer of 2 experts a token casts 2 x h more per token than k = 1 does at t = 1."""
    from ppsim.costs.low_precision import LowPrecision

    def forward_bytes(top_k: int) -> float:
        m = ModelSpec(**{**MIXTRAL, "moe": {**MIXTRAL["moe"], "top_k": top_k, "ffn_hidden": 8}})
        narrow = LowPrecision("tensorwise", False)
        _, plain, _ = gpt_layers(m, 1, experts=ExpertShard(m.moe))  # type: ignore[arg-type]
        _, cast, _ = gpt_layers(m, 1, narrow=narrow, experts=ExpertShard(m.moe))  # type: ignore[arg-type]
        return cast.forward_bytes - plain.forward_bytes

    per_value = 2 + 2 * 1 + 2  # read 16 bits, write two FP8 copies, read again for the amax
    extra = forward_bytes(2) - forward_bytes(1)
    down = 4096 * 8 * per_value  # the down projection's input grows by one expert width (8) per token
    assert extra == pytest.approx(4096 * 4096 * per_value + down)


def test_deepseek_v3s_multi_token_prediction_module_has_its_reported_parameters() -> None:
    """DeepSeek-V3's checkpoint: 671B of the main model and 14B of its MTP module, which holds one
    MoE block, the projection of 2h to h with its two RMSNorms, and copies of the embedding and the
    output head (shared with the main model in training)."""
    from conftest import SCENARIOS
    from ppsim.costs.layers import mtp_module
    from ppsim.inputs.scenario import load

    m = load(SCENARIOS / "deepseek-v3.yaml").model
    assert m is not None and m.moe is not None
    _, moe, head = gpt_layers(m, 1, experts=ExpertShard(m.moe))
    module = mtp_module(m, 1, head, embedding_copy=True)
    assert module.params == 2 * 7168 * 7168 + 2 * 7168 + 129_280 * 7168
    assert moe.params + module.params + head.params == pytest.approx(14e9, rel=0.05)


def test_the_last_stage_runs_the_mtp_modules_and_the_partition_makes_room_for_them() -> None:
    """With model.mtp_layers the last virtual stage runs, per module, one more block (a MoE block
    where the next layer would have experts: its all-to-alls too) and the projection and head pass;
    the balanced partition counts them, so the last stage takes fewer of the model's blocks."""
    from ppsim.costs import build_workload
    from ppsim.costs.layers import mtp_module
    from ppsim.costs.layout import lay_out
    from ppsim.costs.workload import block_kinds, model_layers

    data = scenario()
    data["model"] = {**MIXTRAL, "layers": 16}
    data["pipeline"] = {"stages": 4, "microbatches": 8, "partition": [4, 4, 4, 4]}
    plain = parse_scenario(data)
    data["model"]["mtp_layers"] = 1
    mtp = parse_scenario(data)
    layers = model_layers(mtp)
    moe = model_layers(mtp, moe=True)
    assert layers is not None and moe is not None
    without = lay_out(plain, [4, 4, 4, 4], layers, (0, 1, 2, 3), block_kinds(plain, layers)).stages
    withit = lay_out(mtp, [4, 4, 4, 4], layers, (0, 1, 2, 3), block_kinds(mtp, layers)).stages
    module = mtp_module(mtp.model, mtp.training.micro_batch, layers[2], mtp.tensor_parallel, embedding_copy=True)
    assert withit[:3] == without[:3]
    last, before = withit[3], without[3]
    assert last.forward_flops == pytest.approx(before.forward_flops + moe[1].forward_flops + module.forward_flops)
    assert last.params == before.params + moe[1].params + module.params
    assert (last.moe_blocks, last.blocks) == (before.moe_blocks + 1, before.blocks)  # its all-to-alls; not a model block
    data["pipeline"]["partition"] = "balanced"
    assert build_workload(parse_scenario(data)).partition[-1] < build_workload(
        plain.with_overrides(partition="balanced")).partition[-1]


def test_the_mtp_modules_flops_are_what_the_published_deepseek_runs_add_per_token() -> None:
    """NVIDIA's published DeepSeek-V3 runs (bench/data/published_moe.md, note 3): model TFLOP/s over
    tokens/s is 259.6-260.6 GFLOP a token with the MTP module and 249.1-249.7 for the rows run
    without it: the module (a MoE block at the routed experts' mean, its projection, another pass of
    the head) adds 9.9-11.5 GFLOP a token, forward and backward (ppsim: 10.2)."""
    from conftest import SCENARIOS
    from ppsim.costs.layers import mtp_module
    from ppsim.inputs.scenario import load

    m = load(SCENARIOS / "deepseek-v3.yaml").model
    assert m is not None and m.moe is not None
    _, moe, head = gpt_layers(m, 1, flash_attention=True, experts=ExpertShard(m.moe))
    module = mtp_module(m, 1, head)
    per_token = (moe.total_flops - moe.recompute_flops + module.total_flops) / m.seq_len
    assert (259.6 - 249.7) * 1e9 <= per_token <= (260.6 - 249.1) * 1e9


def test_a_prediction_says_each_ranks_all_to_all_time() -> None:
    """`ppsim run` of a mixture of experts: the per-rank table's all-to-all column, from the
    trace's meta["alltoall_ms"] (a measured run's carries the same key)."""
    from conftest import SCENARIOS
    from ppsim.inputs.scenario import load
    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize
    from ppsim.views.render.summary_table import rank_table

    trace = predict(load(SCENARIOS / "mixtral-8x7b.yaml")).trace
    per_rank = trace.meta["alltoall_ms"]
    assert len(per_rank) == trace.num_ranks and min(per_rank) > 0
    assert "all-to-all ms" in [c.header for c in rank_table(summarize(trace)).columns]


def test_the_balanced_partition_weighs_each_layer_as_its_kind_costs() -> None:
    """4 dense layers, then 4 MoE layers running 4 experts a token (each about twice a dense
    block): on 2 stages the balanced split gives the first stage the light layers and one heavy
    one, as evening the per-layer FLOPs (with the embedding and the head) says, not 4 and 4."""
    from ppsim.costs.partition import balanced
    from ppsim.costs.workload import model_layers

    model = {**MIXTRAL, "layers": 8, "moe": {"experts": 8, "top_k": 4, "ffn_hidden": 14336, "dense_layers": 4}}
    s = parse_scenario(scenario(model=model, data_parallel=8, expert_parallel=8,
                                pipeline={"stages": 2, "microbatches": 4, "schedule": "1f1b"}))
    emb, dense, head = model_layers(s)  # type: ignore[misc]
    moe = model_layers(s, moe=True)[1]  # type: ignore[index]
    assert moe.total_flops > 1.8 * dense.total_flops
    want = balanced([dense.total_flops] * 4 + [moe.total_flops] * 4, 2, emb.total_flops, head.total_flops)
    assert build(parse_scenario(scenario(model=model, pipeline={"stages": 2, "microbatches": 4, "schedule": "1f1b"})
                                )).workload.partition == want == [5, 3]


@pytest.mark.parametrize("comm", [{}, {"moe_dispatcher": "hybridep", "moe_comm_sms": 33}])
def test_delayed_weight_grads_hide_a_backwards_own_dispatches(comm: dict[str, Any]) -> None:
    """--delay-wgrad-compute: a backward's dispatch gradients (half its all-to-alls) run beside its
    weight grads: the whole backward is shorter by the smaller of the two (less the share of the SMs
    the all-to-alls' kernels hold meanwhile, ``comm``); an overlapped pair takes at least all its
    all-to-alls and no longer than without (it hides them itself); the step is never longer."""
    from ppsim.plan import Action, Kind, Overlap
    from ppsim.prediction import predict
    from ppsim.sim.durations import overlapped_ms

    plan = {"stages": 2, "microbatches": 8, "schedule": "combined-1f1b", "chunks": 2}
    base = scenario(pipeline=plan, training=comm)
    plain = build(parse_scenario(base)).workload.costs
    delayed = build(parse_scenario(scenario(pipeline=plan, training={"delay_wgrad": True, **comm}))).workload.costs
    share = plain.overlap_sm_share
    assert (share > 0) == bool(comm)
    for a, b in zip(plain.stages, delayed.stages, strict=True):
        own = min(a.backward_overlap_ms / 2, a.weight_grad_ms)
        assert own > 0 and b.self_hidden_ms == pytest.approx(own)
        assert b.backward_ms == pytest.approx(a.backward_ms - own * (1 - share))
        assert b.backward_overlap_ms + b.self_hidden_ms == pytest.approx(a.backward_overlap_ms)
        assert b.forward_ms == a.forward_ms and b.weight_grad_ms == a.weight_grad_ms
    pair = Overlap.of(Action(1, Kind.F, 0), Action(1, Kind.B, 1))
    c = delayed.stages[1]
    assert overlapped_ms(delayed, pair) >= c.forward_overlap_ms + c.backward_overlap_ms + c.self_hidden_ms
    assert overlapped_ms(delayed, pair) <= overlapped_ms(plain, pair)
    slow = predict(parse_scenario(base)).trace
    fast = predict(parse_scenario(scenario(pipeline=plan, training={"delay_wgrad": True, **comm}))).trace
    from ppsim.trace.metrics import step_time_ms

    assert step_time_ms(fast) <= step_time_ms(slow)


@pytest.mark.parametrize(("over", "says"), [
    ({"pipeline": {"stages": 2, "microbatches": 8, "schedule": "1f1b"}}, "needs pipeline.schedule: combined-1f1b"),
    ({"pipeline": {"stages": 2, "microbatches": 8, "schedule": "combined-1f1b", "chunks": 2},
      "expert_parallel": 1, "expert_tensor_parallel": 1}, "this plan has none"),
])
def test_delayed_weight_grads_need_combined_1f1b_and_experts_apart(over: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(scenario(training={"delay_wgrad": True}, **over))


def test_an_fp8_dispatch_sends_one_of_each_pair_in_the_recipes_format() -> None:
    """DeepSeek-V3's FP8 dispatch, by hand: of each MoE block's dispatch-and-combine pair, the
    dispatch moves 1 + 4/128 bytes a value (blockwise FP8 with its scales), the combine 2: each pass
    of a stage with n MoE blocks spends n x (a2a(1.03125 / 2 x B) + a2a(B)) instead of 2n x a2a(B)."""
    from ppsim.costs import build_workload
    from ppsim.costs.analytic import block_alltoalls, expert_alltoalls
    from ppsim.costs.layout import lay_out
    from ppsim.costs.workload import block_kinds, model_layers

    s = load(SCENARIOS / "deepseek-v3.yaml")
    assert s.training.moe_fp8_dispatch and s.training.fp8 == "blockwise"
    layers = model_layers(s)
    layout = lay_out(s, build_workload(s).partition, layers, tuple(range(16)) + tuple(reversed(range(16))),
                     block_kinds(s, layers))
    st = next(x for x in layout.stages if x.moe_blocks)
    link = Link.from_gb_s(50.0, 0.0)
    narrow = expert_alltoalls(s, st, block_alltoalls(s, st, link, link, (1 + 4 / 128) / 2))
    whole = expert_alltoalls(s, st, block_alltoalls(s, st, link, link))
    one = alltoall_ms(st.alltoall_bytes, s.expert_parallel, link)
    assert whole.forward_ms == pytest.approx(2 * st.moe_blocks * one)
    assert narrow.forward_ms == pytest.approx(st.moe_blocks * (one * (1 + 4 / 128) / 2 + one))


def test_an_fp8_dispatch_needs_experts_and_an_fp8_recipe() -> None:
    data = load(SCENARIOS / "deepseek-v3.yaml").model_dump(exclude_none=True)
    data["training"].pop("fp8")
    with pytest.raises(ScenarioError, match="training.fp8 is not set"):
        parse_scenario(data)


def test_the_sms_the_all_to_alls_take_slow_the_compute_they_hide_under() -> None:
    """DeepSeek-V3's 20 SMs of an H800's 132 for its dispatch and combine: while the hidden
    all-to-alls run, the other pass computes on 112 SMs, so the overlapped pair ends 20 / 132 of the
    hidden time later; a backward's own dispatches under its delayed weight grads alike."""
    from ppsim.plan import Action, Kind, Overlap
    from ppsim.sim.durations import overlapped_ms

    plan = {"stages": 2, "microbatches": 8, "schedule": "dualpipev", "chunks": 2}
    free = build(parse_scenario(scenario(pipeline=plan))).workload.costs
    taxed = build(parse_scenario(scenario(pipeline=plan, training={"moe_comm_sms": 20}))).workload.costs
    assert free.overlap_sm_share == 0 and taxed.overlap_sm_share == pytest.approx(20 / 132)
    pair = Overlap.of(Action(1, Kind.F, 0), Action(1, Kind.B, 1))
    c = free.stages[1]
    counts = 2 * token_counts_ms(parse_scenario(scenario(pipeline=plan)))  # its 2 blocks': exposed, the dispatch waits
    hidden = c.forward_comm_ms + c.backward_comm_ms - counts  # all of the rest hidden here (above)
    assert overlapped_ms(taxed, pair) - overlapped_ms(free, pair) == pytest.approx(hidden * 20 / 132)
    assert taxed.stages == free.stages  # the passes alone: nothing beside them
    combined = {"stages": 2, "microbatches": 8, "schedule": "combined-1f1b", "chunks": 2}
    delayed = build(parse_scenario(scenario(pipeline=combined, training={"delay_wgrad": True}))).workload.costs
    both = build(parse_scenario(scenario(pipeline=combined, training={"delay_wgrad": True, "moe_comm_sms": 20}))
                 ).workload.costs
    for a, b in zip(delayed.stages, both.stages, strict=True):
        assert a.self_hidden_ms > 0
        assert b.backward_ms - a.backward_ms == pytest.approx(a.self_hidden_ms * 20 / 132)


@pytest.mark.parametrize("over, says", [
    ({"model": {**MIXTRAL, "layers": 8, "moe": None}, "expert_parallel": 1, "training": {"moe_comm_sms": 20}},
     "the model has none"),
    ({"hardware": {"device": "cpu"}, "training": {"moe_comm_sms": 20}}, "does not say how many it has"),
    ({"training": {"moe_comm_sms": 132}}, "gives the all-to-alls 132 SMs, and h100-sxm has 132"),
])
def test_the_all_to_alls_sms_are_checked_naming_the_key(over: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as err:
        build(parse_scenario(scenario(**over)))
    assert err.value.field == "training.moe_comm_sms"


def test_run_says_the_sms_the_all_to_alls_hold() -> None:
    from conftest import invoke
    from ppsim.cli import app

    result = invoke(app, "run", SCENARIOS / "deepseek-v3.yaml")
    assert result.exit_code == 0, result.output
    plan = next(line for line in result.output.splitlines() if line.startswith("plan"))
    assert "its all-to-alls' kernels holding 20 SMs (15 %) beside the compute they overlap" in " ".join(plan.split())


SUPER_PATTERN = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
#: Nemotron 3 Super as Megatron-LM's release test configures it (bench/data/published_moe.md): squared
#: ReLU priced as GELU's two matrices, no biases
SUPER = {"layers": 88, "hidden": 4096, "heads": 32, "kv_heads": 2, "ffn_hidden": 2688, "seq_len": 8192,
         "vocab": 131072, "mlp": "gelu", "positions": "rope", "dropout": False, "pattern": SUPER_PATTERN,
         "mamba": {"heads": 128, "head_dim": 64, "state": 128, "groups": 8, "conv_kernel": 4, "chunk": 128},
         "moe": {"experts": 512, "top_k": 22, "ffn_hidden": 2688, "shared_experts": 1, "shared_ffn_hidden": 5376,
                 "latent": 1024}}


def test_a_latent_moe_runs_its_experts_in_the_latent_width() -> None:
    """Nemotron 3 Super's MoE layer (hidden 4096, latent 1024): 512 experts of 2 x 1024 x 2688, a
    shared one of 2 x 4096 x 5376, the projections 4096 x 1024 and back, the router 4096 x 512; its
    tokens dispatched 1024 wide; per token forward 2 x (22 x 2 x 1024 x 2688 + 2 x 4096 x 5376 +
    2 x 4096 x 1024) FLOPs beside the router."""
    m = ModelSpec(**SUPER)
    assert m.moe is not None
    shard = ExpertShard(m.moe, 8)
    everything, routed = shard.params(m, 1)
    assert routed == 64 * 2 * 1024 * 2688
    assert everything == routed + 2 * 4096 * 5376 + 2 * 4096 * 1024 + 4096 * 512
    assert shard.dispatch_bytes(8192, 4096, 2) == 8192 * 22 * 1024 * 2
    assert shard.mlp_matmul_flops(8192, 4096, False) == 8192 * 2 * (22 * 2 * 1024 * 2688 + 2 * 4096 * 5376
                                                                         + 2 * 4096 * 1024)
    gemms = shard.gemms(8192, 4096, 1, False, recomputed=False)
    router = 2 * 8192 * 4096 * 512
    assert sum(g.flops for g in gemms.forward) == pytest.approx(shard.mlp_matmul_flops(8192, 4096, False) + router)
    # what it keeps beyond the dense equivalent: every routed copy 1024 wide, the up projection's input
    assert shard.extra_activation_bytes(8192, 4096, 2) == (22 + 1) * 8192 * 1024 * 2 + 4 * 8192 * 512


def test_nemotron_3_super_has_the_parameters_nvidia_gives() -> None:
    """NVIDIA: 120B parameters, 12B active (12.8B counting the embeddings, by the same shapes):
    40 latent MoE layers, 40 Mamba-2 layers, 8 attention layers, untied embeddings of 131,072."""
    from ppsim.costs.workload import block_kinds, model_layers

    s = parse_scenario({"model": SUPER, "pipeline": {"stages": 1}})
    layers = model_layers(s)
    assert layers is not None
    kinds = block_kinds(s, layers)
    assert kinds is not None
    total = sum(kinds.family(k)[0].params for k in SUPER_PATTERN) + layers[0].params + layers[2].params
    assert total == pytest.approx(120.6e9, rel=0.002)
    moe = kinds.family("E")[0]
    active = total - 40 * moe.expert_params * (512 - 22) / 512
    assert active == pytest.approx(12.8e9, rel=0.01)


def test_a_latent_wider_than_the_model_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"moe.latent \(4096\) projects each token to fewer values than hidden"):
        parse_scenario({"model": {**SUPER, "moe": {**SUPER["moe"], "latent": 4096}}, "pipeline": {"stages": 1}})


def test_a_hybrid_models_mtp_block_is_its_attention_and_moe_layers_and_a_repeated_one_holds_one_copy() -> None:
    """Nemotron 3 Super's recipe: two MTP depths of one repeated `*E` module. Each depth runs the
    attention layer, the MoE layer, the 2h -> h projection and another pass of the head; the
    weights are held once."""
    from ppsim.costs.layers import joined
    from ppsim.costs.layout import mtp_parts
    from ppsim.costs.workload import block_kinds, model_layers

    def parts(repeated: bool) -> list[Any]:
        s = parse_scenario({"model": {**SUPER, "mtp_layers": 2, "mtp_repeated": repeated}, "pipeline": {"stages": 1},
                            "expert_parallel": 8, "data_parallel": 8})
        layers = model_layers(s)
        kinds = block_kinds(s, layers)
        assert layers is not None and kinds is not None
        return [kinds, mtp_parts(s, layers, kinds, (0,))]

    kinds, two = parts(False)
    _, once = parts(True)
    block = joined("mtp_block", kinds.family("*")[0], kinds.family("E")[0])
    assert two[0] == block and two[2] == block
    assert block.params == kinds.family("*")[0].params + kinds.family("E")[0].params
    assert block.alltoall_bytes == kinds.family("E")[0].alltoall_bytes > 0
    assert once[:2] == two[:2]  # the first depth holds the weights
    assert once[2].params == once[3].params == 0 and once[2].expert_params == 0
    assert once[2].total_flops == two[2].total_flops and once[2].alltoall_bytes == two[2].alltoall_bytes
    assert once[3].total_flops == two[3].total_flops


def test_mtp_repeated_needs_mtp_layers_and_a_hybrid_mtp_needs_attention() -> None:
    with pytest.raises(ScenarioError, match="mtp_repeated runs the multi-token prediction module at every depth"):
        parse_scenario({"model": {**SUPER, "mtp_repeated": True}, "pipeline": {"stages": 1}})
    no_attention = {**SUPER, "layers": 2, "pattern": "ME", "mtp_layers": 1}
    with pytest.raises(ScenarioError, match="the pattern has no attention"):
        parse_scenario({"model": no_attention, "pipeline": {"stages": 1}})


def test_nccls_dispatcher_permutes_twice_where_a_device_holds_several_experts() -> None:
    """Megatron's alltoall dispatcher permutes each token copy into per-device order before the
    all-to-all and sorts the received chunks by local expert after it (and back): 2 x 4 k T h values
    forward with 8 experts over EP 4; DeepEP's and HybridEP's kernels gather the tokens themselves,
    leaving one permute; one expert a device, or no expert parallelism, needs no sort."""
    m = ModelSpec(**{**MIXTRAL, "hidden": 1024, "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 256}})
    assert m.moe is not None
    one = 4 * 2 * 4096 * 1024 * 2
    assert ExpertShard(m.moe, 4).permute_bytes(4096, 1024, 2) == 2 * one
    for flex in ("deepep", "hybridep"):
        assert ExpertShard(m.moe, 4, dispatcher=flex).permute_bytes(4096, 1024, 2) == one
    assert ExpertShard(m.moe, 8).permute_bytes(4096, 1024, 2) == one
    assert ExpertShard(m.moe, 1).permute_bytes(4096, 1024, 2) == one


@pytest.mark.parametrize(("scenario", "total", "active", "lookup"), [
    ("qwen3-30b-a3b.yaml", 30.5e9, 3.3e9, True),  # Qwen/Qwen3-30B-A3B's model card
    ("kimi-k2.yaml", 1.0e12, 32e9, True),  # Moonshot's report (arXiv:2507.20534): "1 trillion", "32 billion activated"
    ("gpt-oss-120b.yaml", 116.83e9, 5.13e9, False),  # OpenAI's model card, its active count without the embedding
])
def test_the_moe_scenarios_have_the_parameters_their_sources_give(scenario: str, total: float, active: float,
                                                                  lookup: bool) -> None:
    """Qwen3-30B-A3B: 48 layers of 128 experts of 3 x 2048 x 768, 8 a token, attention 2048 x (32 + 2 x 4)
    x 128 + 32 x 128 x 2048, its 151,936-word embedding and head. Kimi K2: DeepSeek-V3's shape with 384
    routed experts, 64 heads, one dense layer, 163,840 words. GPT-OSS-120B: 36 layers of 128 experts of
    2,880 with biases, 4 a token, 201,088 words; OpenAI counts the active parameters without the
    embedding's lookup (``lookup`` False). The published figures are rounded (Kimi's to a trillion):
    within 3 %."""
    from conftest import SCENARIOS
    from ppsim.inputs.scenario import load

    m = load(SCENARIOS / scenario).model
    assert m is not None and m.moe is not None
    emb, dense, head = gpt_layers(m, 1)
    _, moe, _ = gpt_layers(m, 1, experts=ExpertShard(m.moe))
    n_dense = m.moe.dense_layers or 0
    got = n_dense * dense.params + (m.layers - n_dense) * moe.params + emb.params + head.params
    idle = (m.layers - n_dense) * moe.expert_params * (m.moe.experts - m.moe.top_k) / m.moe.experts  # routed, unused
    assert got == pytest.approx(total, rel=0.03)
    assert got - idle - (0 if lookup else emb.params) == pytest.approx(active, rel=0.03)
