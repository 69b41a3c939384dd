"""Hybrid models (``model.pattern``, ``model.mamba``): a block's attention and MLP halves add up to the
block, a Mamba-2 layer's FLOPs and parameters worked by hand, Nemotron 3 Nano's parameters against
its model card, each stage pricing its own layers, and the rules as one-line errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import invoke
from ppsim.cli import app
from ppsim.costs.layers import gpt_layers
from ppsim.costs.low_precision import LowPrecision
from ppsim.costs.mamba import mamba_layer
from ppsim.costs.moe import ExpertShard
from ppsim.costs.workload import block_kinds, model_layers
from ppsim.errors import ScenarioError
from ppsim.inputs.scenario import ModelSpec, parse_scenario

#: Nemotron 3 Nano as Megatron-Bridge's recipe builds it (vocabulary: its Hugging Face config)
NANO: dict[str, Any] = {
    "layers": 52, "pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", "hidden": 2688, "heads": 32,
    "kv_heads": 2, "head_dim": 128, "ffn_hidden": 1856, "seq_len": 8192, "vocab": 131072, "positions": "rope",
    "dropout": False, "mamba": {"heads": 64, "head_dim": 64, "state": 128, "groups": 8},
    "moe": {"experts": 128, "top_k": 6, "ffn_hidden": 1856, "shared_experts": 1, "shared_ffn_hidden": 3712}}


@settings(max_examples=40, deadline=None)
@given(mlp=st.sampled_from(["gelu", "swiglu"]), t=st.sampled_from([1, 2, 4]), sp=st.booleans(), flash=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]), fp8=st.booleans(), dropout=st.booleans())
def test_a_blocks_attention_and_mlp_halves_add_up_to_the_block(mlp: str, t: int, sp: bool, flash: bool,
                                                                recompute: str, fp8: bool, dropout: bool) -> None:
    """FLOPs, parameters, held activations, elementwise bytes, tensor-parallel collectives and
    GEMMs: a hybrid model's attention layer and MLP layer are the two halves of a block."""
    m = ModelSpec(layers=2, hidden=1024, heads=16, kv_heads=4, seq_len=1024, vocab=1000, mlp=mlp,  # type: ignore[arg-type]
                  ffn_hidden=2816 if mlp == "swiglu" else 4096, dropout=dropout)
    kw: dict[str, Any] = {"sequence_parallel": sp and t > 1, "flash_attention": flash,
                          "narrow": LowPrecision("tensorwise") if fp8 else None}
    whole, attn, mlp_ = (gpt_layers(m, 2, recompute, t, parts=p, **kw)[1]  # type: ignore[arg-type]
                         for p in ("block", "attention", "mlp"))
    for field in ("forward_flops", "input_grad_flops", "weight_grad_flops", "recompute_flops", "masked_flops",
                  "forward_bytes", "backward_bytes", "step_bytes", "tp_collectives"):
        assert getattr(attn, field) + getattr(mlp_, field) == pytest.approx(getattr(whole, field), rel=1e-12), field
    assert abs(attn.params + mlp_.params - whole.params) <= 1
    assert abs(attn.activation_bytes + mlp_.activation_bytes - whole.activation_bytes) <= 2 or recompute == "full"
    if recompute == "full":  # each layer keeps its own input
        assert attn.activation_bytes == mlp_.activation_bytes == whole.activation_bytes
    assert sorted(map(repr, attn.gemms.forward + mlp_.gemms.forward)) == sorted(map(repr, whole.gemms.forward))


def test_a_mamba_layer_by_hand() -> None:
    """Nemotron 3 Nano's mixer, t = 1, one sequence of 8,192: in_proj 2,688 -> 2 x 4,096 + 2 x 8 x 128
    + 64 = 10,304, out_proj 4,096 -> 2,688; the scan in chunks of 128: 2T(Q G N + Q H P + 2 H N P)."""
    m = ModelSpec(**NANO)
    layer = mamba_layer(m, 1)
    T, h = 8192, 2688
    projections = 2 * T * h * 10304 + 2 * T * 4096 * h
    scan = 2 * T * (128 * 8 * 128 + 128 * 64 * 64 + 2 * 64 * 128 * 64)
    assert layer.forward_flops == pytest.approx(projections + scan)
    assert layer.input_grad_flops == pytest.approx(projections + 2 * scan)
    assert layer.weight_grad_flops == pytest.approx(projections)
    assert layer.params == h * 10304 + 4096 * h + (4096 + 2 * 8 * 128) * 5 + 3 * 64 + 4096 + h
    for flops, gemms in ((layer.forward_flops, layer.gemms.forward), (layer.input_grad_flops, layer.gemms.input_grad),
                         (layer.weight_grad_flops, layer.gemms.weight_grad)):
        assert sum(g.flops for g in gemms) == pytest.approx(flops, rel=1e-12)
    split = mamba_layer(m, 1, tensor_parallel=4)
    assert split.forward_flops == pytest.approx(layer.forward_flops / 4)
    full = mamba_layer(m, 1, "full")
    assert full.activation_bytes == T * h * 2 and full.recompute_flops == pytest.approx(layer.forward_flops)


def test_the_ssd_scans_memory_traffic_by_hand() -> None:
    """Nemotron 3 Nano's scan, one sequence of 8,192 in bf16, chunks of 128: 64 chunks of 64 heads'
    64 x 128 states, S = 33,554,432 values. Forward: the states written in fp32, read and passed on
    in bf16, read again (4 + 4 + 2 + 2 = 12 bytes each); x twice and the output (3 x 2 x T x 4,096);
    B and C twice each (4 x 2 x T x 8 x 128); C B^T written and read in fp32 (8 x T x 8 x 128).
    Backward: 34 bytes a state value, 11 of x's tensors, 15 of B's, 24 bytes of C B^T per value.
    What the layer's forward adds to its other memory-bound work is this; with t = 2 half of it
    (the heads and groups split; the layer's norm and residual add stay whole without sequence
    parallelism)."""
    from ppsim.costs.mamba import scan_traffic

    T = 8192
    S, X, V, W = T // 128 * 64 * 64 * 128, T * 4096, T * 8 * 128, T * 8 * 128
    forward = 12 * S + 6 * X + 8 * V + 8 * W
    backward = 34 * S + 22 * X + 30 * V + 24 * W
    got = scan_traffic(T, 64, 8, 64, 128, 128, 2)
    assert (got.forward, got.backward) == (forward, backward)
    assert forward == 402_653_184 + 201_326_592 + 67_108_864 + 67_108_864
    m = ModelSpec(**NANO)
    with_scan, half = mamba_layer(m, 1), mamba_layer(m, 1, tensor_parallel=2)
    def others(t: int) -> int:  # norm, convolution and SiLU, gated norm, residual add
        return (2 * T * 2688 + 4 * T * (4096 + 2 * 8 * 128) // t + 3 * T * 4096 // t + 3 * T * 2688) * 2

    assert with_scan.forward_bytes == pytest.approx(others(1) + forward)
    assert half.forward_bytes == pytest.approx(others(2) + forward / 2)


def test_nemotron_3_nano_has_the_parameters_of_its_model_card() -> None:
    """NVIDIA's Nemotron 3 Nano 30B-A3B: 31.6B parameters, 3.2B active per token (3.6B with the
    embeddings): 23 Mamba-2 layers, 6 attention layers, 23 MoE layers of 128 experts (6 a token)
    and a shared expert; ppsim adds GELU's biases for the squared-ReLU MLPs (0.01B)."""
    s = parse_scenario({"model": NANO, "pipeline": {"stages": 1}})
    layers = model_layers(s)
    kinds = block_kinds(s, layers)
    assert layers is not None and kinds is not None
    m = s.model
    assert m is not None
    per_layer = [kinds.family(m.layer_kind(i))[0] for i in range(m.layers)]
    total = layers[0].params + layers[2].params + sum(x.params for x in per_layer)
    experts = sum(x.expert_params for x in per_layer)
    active = total - experts * (1 - 6 / 128)
    assert total == pytest.approx(31.6e9, rel=0.005)
    assert active == pytest.approx(3.6e9, rel=0.01)
    assert active - layers[0].params == pytest.approx(3.2e9, rel=0.01)
    assert [m.layer_kind(i) for i in range(6)] == list("MEMEM*") and m.moe_layer_count() == 23


def _scenario(**model: Any) -> dict[str, Any]:
    return {"model": {**NANO, **model}, "pipeline": {"stages": 4, "microbatches": 8},
            "training": {"flash_attention": True}, "data_parallel": 2, "expert_parallel": 2,
            "hardware": {"device": "h100-sxm"}}


def test_each_stage_prices_its_own_layers() -> None:
    """4 stages of 13 layers (uniform): each stage's FLOPs, parameters and MoE layers are its
    pattern slice's; the all-to-alls run in the stages that hold MoE layers."""
    from ppsim.costs.layout import lay_out

    s = parse_scenario({**_scenario(), "pipeline": {"stages": 4, "microbatches": 8, "partition": "uniform"}})
    layers = model_layers(s)
    kinds = block_kinds(s, layers)
    assert layers is not None and kinds is not None
    layout = lay_out(s, [13] * 4, layers, (0, 1, 2, 3), kinds)
    pattern = NANO["pattern"]
    emb, _, head = layers
    for k, stage in enumerate(layout.stages):
        mine = pattern[13 * k:13 * (k + 1)]
        flops = sum(kinds.family(c)[0].forward_flops for c in mine)
        flops += (emb.forward_flops if k == 0 else 0) + (head.forward_flops if k == 3 else 0)
        assert stage.forward_flops == pytest.approx(flops)
        assert stage.moe_blocks == mine.count("E") and stage.alltoall_bytes > 0
        assert sum(g.flops for g in stage.gemms.forward) == pytest.approx(stage.forward_flops, rel=1e-12)


def test_a_hybrid_plan_runs_and_balances_its_layers_by_their_costs() -> None:
    from ppsim.prediction import predict

    trace = predict(parse_scenario(_scenario())).trace
    assert trace.meta["partition"] is not None and sum(trace.meta["partition"]) == 52
    assert trace.meta["partition"] != [13, 13, 13, 13]  # Mamba, attention and MoE layers cost apart


@pytest.mark.parametrize(("model", "says"), [
    ({"pattern": "MEM"}, "pattern has 3 layers and layers is 52"),
    ({"pattern": "MEMX" + NANO["pattern"][4:]}, "pattern has 'X'"),
    ({"mamba": None}, "pattern has a Mamba-2 mixer layers"),
    ({"pattern": None}, "mamba describes the Mamba-2 layers of a hybrid pattern"),
    ({"pattern": NANO["pattern"].replace("M", "-")}, "no Mamba layer"),
    ({"moe": {**NANO["moe"], "dense_layers": 1}}, "drop moe.dense_layers"),
    ({"attention_window": 128}, "attention_window is not modelled in a hybrid pattern"),
    ({"mtp_layers": 1, "pattern": NANO["pattern"].replace("*", "M")}, "the pattern has no attention"),
    ({"mamba": {**NANO["mamba"], "groups": 3}}, "groups .3. must divide heads"),
])
def test_the_rules_of_a_pattern_name_the_key(model: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(_scenario(**model))


@pytest.mark.parametrize(("over", "field"), [
    ({"context_parallel": 2}, "context_parallel"),
    ({"tensor_parallel": 3}, "tensor_parallel"),
])
def test_what_a_pattern_cannot_take_yet_is_refused(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**_scenario(), **over})
    assert field in str(err.value)


def test_the_cli_ppexec_and_profiles_refuse_as_they_should(tmp_path: Any) -> None:
    import yaml

    from ppexec.launch.prepare import check_buildable
    from ppsim.errors import PpsimError

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_scenario(pattern="MEM")))
    result = invoke(app, "run", path)
    assert result.exit_code == 1 and "pattern" in result.output and "Traceback" not in result.output
    plain = {"layers": 4, "hidden": 64, "heads": 2, "seq_len": 16, "vocab": 64, "pattern": "*-*-"}
    with pytest.raises(PpsimError, match="model.pattern"):
        check_buildable(parse_scenario({"model": plain, "pipeline": {"stages": 2}}))


def test_moe_layers_of_a_pattern_dispatch_as_a_blocks_do() -> None:
    m = ModelSpec(**NANO)
    shard = ExpertShard.of(m, 8)
    half = gpt_layers(m, 1, parts="mlp", experts=shard)[1]
    block = gpt_layers(m, 1, experts=shard)[1]
    assert half.alltoall_bytes == block.alltoall_bytes > 0 and half.expert_params == block.expert_params
