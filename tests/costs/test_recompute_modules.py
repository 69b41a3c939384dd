"""Selective recomputation by module (``training.recompute_modules``, ppsim.costs.recompute): each
module's held bytes and recomputed work worked by hand, the default as before, and the rules as
one-line errors."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import invoke
from ppsim.cli import app
from ppsim.costs.layers import LayerCost, gpt_layers
from ppsim.costs.moe import ExpertShard
from ppsim.errors import ScenarioError
from ppsim.inputs.overrides import drop_partial_recompute
from ppsim.inputs.scenario import MLASpec, ModelSpec, parse_scenario

LLAMA: dict[str, Any] = {"layers": 4, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
                         "seq_len": 4096, "vocab": 32000, "mlp": "swiglu", "positions": "rope", "dropout": False}
T = 4096  # tokens of a micro-batch of one sequence


def block(model: ModelSpec, recompute: str = "selective", modules: list[str] | None = None, **kw: Any) -> LayerCost:
    return gpt_layers(model, 1, recompute, recompute_modules=modules, **kw)[1]  # type: ignore[arg-type]


def test_the_default_is_the_attention_core() -> None:
    m = ModelSpec(**LLAMA)
    for flash in (False, True):
        assert block(m, modules=None, flash_attention=flash) == block(m, modules=["core_attn"], flash_attention=flash)


def test_without_core_attn_the_attention_core_is_kept_as_without_recomputation() -> None:
    """Unfused attention, only layernorm: the scores stay (as ``none``), the attention core is not
    run again; the norms' outputs go (2 x T x h values of 2 bytes) and run again (each reads and
    writes T x h)."""
    m = ModelSpec(**LLAMA)
    none, ln = block(m, "none"), block(m, modules=["layernorm"])
    assert none.activation_bytes - ln.activation_bytes == 2 * T * 4096 * 2
    assert ln.recompute_flops == none.recompute_flops == 0
    assert ln.backward_bytes - none.backward_bytes == pytest.approx(2 * 2 * T * 4096 * 2)
    both = block(m, modules=["core_attn", "layernorm"])
    core = block(m, modules=["core_attn"])
    assert core.activation_bytes - both.activation_bytes == 2 * T * 4096 * 2
    assert both.recompute_flops == core.recompute_flops > 0


def test_layernorm_under_sequence_parallelism_and_fp8_saves_the_split_narrow_copies() -> None:
    from ppsim.costs.low_precision import LowPrecision

    m = ModelSpec(**LLAMA)
    fp8 = LowPrecision("blockwise")
    kw: dict[str, Any] = {"tensor_parallel": 4, "sequence_parallel": True, "flash_attention": True, "narrow": fp8}
    core, ln = block(m, modules=["core_attn"], **kw), block(m, modules=["core_attn", "layernorm"], **kw)
    assert core.activation_bytes - ln.activation_bytes == pytest.approx(2 * T * 4096 / 4 * fp8.value_bytes, abs=1)


def test_moe_act_drops_the_routed_experts_activation_output() -> None:
    """Mixtral's MoE block, EP 8, balanced: the down projections' input, T x 2 x 14,336 values of 2
    bytes, goes; SwiGLU runs again, reading two of them and writing one."""
    moe = {"experts": 8, "top_k": 2, "ffn_hidden": 14336}
    m = ModelSpec(**{**LLAMA, "moe": moe})
    experts = ExpertShard(m.moe, 8)  # type: ignore[arg-type]
    core = block(m, modules=["core_attn"], flash_attention=True, experts=experts)
    act = block(m, modules=["core_attn", "moe_act"], flash_attention=True, experts=experts)
    values = T * 2 * 14336
    assert core.activation_bytes - act.activation_bytes == values * 2
    assert act.backward_bytes - core.backward_bytes == pytest.approx(3 * values * 2)
    assert act.recompute_flops == core.recompute_flops


def test_mla_up_proj_runs_the_up_projections_again_and_drops_q_k_v() -> None:
    """DeepSeek-V3's attention (128 heads, q_lora 1536, kv_lora 512, qk 192, v 128), t = 1: the up
    projections' FLOPs, 2 T (1536 x 128 x 192 + 512 x 128 x (128 + 128)), run again in the input
    grad, as GEMMs; Q, K and V, T x 128 x (2 x 192 + 128) values of 2 bytes, are not kept."""
    m = ModelSpec(**{**LLAMA, "hidden": 7168, "heads": 128, "kv_heads": None,
                     "mla": MLASpec(q_lora_rank=1536, kv_lora_rank=512)})
    core = block(m, modules=["core_attn"], flash_attention=True)
    up = block(m, modules=["core_attn", "mla_up_proj"], flash_attention=True)
    flops = 2 * T * (1536 * 128 * 192 + 512 * 128 * 256)
    assert up.recompute_flops - core.recompute_flops == pytest.approx(flops)
    assert up.input_grad_flops - core.input_grad_flops == pytest.approx(flops)
    assert sum(g.flops for g in up.gemms.input_grad) == pytest.approx(up.input_grad_flops, rel=1e-12)
    assert core.activation_bytes - up.activation_bytes == T * 128 * (2 * 192 + 128) * 2


def test_mlp_checkpoints_the_dense_mlp_whole() -> None:
    """Llama's dense block (SwiGLU, f = 14,336), t = 1: the gate's, the up's and the activation's
    outputs, 3 x T x f values of 2 bytes, go; the three GEMMs, 2 T x 3 h f FLOPs, run again in the
    input grad, and SwiGLU reads two values of width f and writes one."""
    m = ModelSpec(**LLAMA)
    core = block(m, modules=["core_attn"], flash_attention=True)
    mlp = block(m, modules=["core_attn", "mlp"], flash_attention=True)
    f = 14336
    assert core.activation_bytes - mlp.activation_bytes == 3 * T * f * 2
    flops = 2 * T * 3 * 4096 * f
    assert mlp.recompute_flops - core.recompute_flops == pytest.approx(flops)
    assert mlp.input_grad_flops - core.input_grad_flops == pytest.approx(flops)
    assert sum(g.flops for g in mlp.gemms.input_grad) - sum(g.flops for g in core.gemms.input_grad) \
        == pytest.approx(flops)
    assert mlp.backward_bytes - core.backward_bytes == pytest.approx(3 * T * f * 2)


def test_mlp_under_tensor_parallelism_and_fp8_keeps_its_input_whole_and_in_the_dtype() -> None:
    """t = 4 with sequence parallelism and FP8: a quarter of the width-f values go (the down
    projection's input was narrow), and the MLP's input, T x h / 4 values, is kept in 2 bytes by the
    checkpoint instead of the up projection's narrow copy; with layernorm too, not at all."""
    from ppsim.costs.low_precision import LowPrecision

    m, fp8, f = ModelSpec(**LLAMA), LowPrecision("blockwise"), 14336
    kw: dict[str, Any] = {"tensor_parallel": 4, "sequence_parallel": True, "flash_attention": True, "narrow": fp8}
    core, mlp = block(m, modules=["core_attn"], **kw), block(m, modules=["core_attn", "mlp"], **kw)
    narrow = fp8.value_bytes
    inner = T * f / 4
    assert core.activation_bytes - mlp.activation_bytes == pytest.approx(
        2 * inner * 2 + inner * narrow - T * 4096 / 4 * (2 - narrow), abs=2)
    ln = block(m, modules=["core_attn", "layernorm"], **kw)
    both = block(m, modules=["core_attn", "layernorm", "mlp"], **kw)
    assert ln.activation_bytes - both.activation_bytes == pytest.approx(2 * inner * 2 + inner * narrow, abs=2)


def test_shared_experts_checkpoint_the_shared_experts_and_mlp_leaves_a_moe_layer() -> None:
    """DeepSeek-like MoE block (one shared expert of 2,048, SwiGLU): shared_experts drops its 3 x T x
    2,048 values and reruns its GEMMs; mlp changes nothing there (the layer has no dense MLP)."""
    moe = {"experts": 8, "top_k": 2, "ffn_hidden": 1408, "shared_experts": 1, "shared_ffn_hidden": 2048}
    m = ModelSpec(**{**LLAMA, "moe": moe})
    experts = ExpertShard(m.moe, 8)  # type: ignore[arg-type]
    core = block(m, modules=["core_attn"], flash_attention=True, experts=experts)
    shared = block(m, modules=["core_attn", "shared_experts"], flash_attention=True, experts=experts)
    assert core.activation_bytes - shared.activation_bytes == 3 * T * 2048 * 2
    assert shared.recompute_flops - core.recompute_flops == pytest.approx(2 * T * 3 * 4096 * 2048)
    assert block(m, modules=["core_attn", "mlp"], flash_attention=True, experts=experts) == core


def test_moe_checkpoints_the_whole_moe_layer() -> None:
    """Mixtral's MoE block (8 experts of 14,336, top 2, SwiGLU), EP 8, balanced, FlashAttention, no
    dropout: ``moe`` keeps only the MLP half's norm input and output (2 x T x h values of 2 bytes) of
    what that half held: the SwiGLU's 6 bytes per value of the k x f_e = 28,672 wide dense
    equivalent, the permuted copies ((k - 1) x T x h values) and the router's fp32 probabilities
    (T x E); the backward runs the router (2 T h E) and the experts (3 GEMMs of 2 T k h f_e) again,
    and the permutation (4 k T h values) and SwiGLU (3 T k f_e values) as HBM work."""
    moe = {"experts": 8, "top_k": 2, "ffn_hidden": 14336}
    m = ModelSpec(**{**LLAMA, "moe": moe})
    experts = ExpertShard(m.moe, 8)  # type: ignore[arg-type]
    core = block(m, modules=["core_attn"], flash_attention=True, experts=experts)
    whole = block(m, modules=["core_attn", "moe"], flash_attention=True, experts=experts)
    h, f, k, e = 4096, 2 * 14336, 2, 8
    dropped = 6 * T * f + (k - 1) * T * h * 2 + 4 * T * e  # 2 bytes a value; probabilities in fp32
    assert core.activation_bytes - whole.activation_bytes == dropped
    again = 2 * T * h * e + 3 * 2 * T * k * h * 14336
    assert whole.recompute_flops - core.recompute_flops == pytest.approx(again)
    assert whole.input_grad_flops - core.input_grad_flops == pytest.approx(again)
    assert whole.backward_bytes - core.backward_bytes == pytest.approx((4 * k * T * h + 3 * T * f) * 2)
    assert whole.forward_flops == core.forward_flops and whole.forward_bytes == core.forward_bytes
    # the GEMMs the input grad runs again are the forward's: the experts' grouped ones and the router's
    extra = whole.gemms.input_grad[len(core.gemms.input_grad):]
    assert sum(g.flops for g in extra) == pytest.approx(again)


def test_moe_runs_the_dispatch_and_combine_again_in_the_backward() -> None:
    """The expert-parallel all-to-alls: a pair (dispatch and combine) in the forward after the
    exchange of token counts, their transposes in the backward, and the counts and the pair once more
    there with the MoE layer recomputed."""
    from ppsim.costs import build_workload

    def stage(modules: list[str]) -> Any:
        data = {"model": {**LLAMA, "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 1408}},
                "expert_parallel": 8, "data_parallel": 8,
                "training": {"recompute": "selective", "recompute_modules": modules, "flash_attention": True},
                "pipeline": {"stages": 2}, "hardware": {"device": "h100-sxm"}}
        return build_workload(parse_scenario(data)).costs.stages[0]

    core, whole = stage(["core_attn"]), stage(["core_attn", "moe"])
    counts = core.forward_comm_ms - core.backward_comm_ms  # the forward's exchanges of counts: latency-bound
    assert core.backward_comm_ms > 0 and 0 < counts < 0.1 * core.backward_comm_ms
    assert whole.backward_comm_ms == pytest.approx(2 * core.backward_comm_ms + counts)
    assert whole.forward_comm_ms == pytest.approx(core.forward_comm_ms)


def _scenario(**training: Any) -> dict[str, Any]:
    return {"model": LLAMA, "training": {"recompute": "selective", **training}, "pipeline": {"stages": 2}}


@pytest.mark.parametrize(("training", "says"), [
    ({"recompute": "full", "recompute_modules": ["layernorm"]}, "needs training.recompute: selective"),
    ({"recompute_modules": ["layernorm", "layernorm"]}, "lists a module twice"),
    ({"recompute_modules": ["moe_act"]}, "moe_act recomputes part of model.moe, which the model has not"),
    ({"recompute_modules": ["mla_up_proj"]}, "mla_up_proj recomputes part of model.mla"),
    ({"recompute_modules": ["shared_experts"]}, "shared_experts recomputes part of model.moe"),
    ({"recompute_modules": ["moe"]}, "moe recomputes part of model.moe, which the model has not"),
])
def test_the_rules_name_the_key(training: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(_scenario(**training))


def test_moe_act_inside_moe_saves_nothing_more_and_runs_the_activation_once_more() -> None:
    """Megatron's recipes list moe beside moe_act (Nemotron 3 Nano on H100): the activation's
    checkpoint nested in the layer's drops nothing the layer's did not, and the backward runs the
    activation a third time (3 T k f_e values read and written by SwiGLU)."""
    moe = {"experts": 8, "top_k": 2, "ffn_hidden": 14336}
    m = ModelSpec(**{**LLAMA, "moe": moe})
    experts = ExpertShard(m.moe, 8)  # type: ignore[arg-type]
    whole = block(m, modules=["core_attn", "moe"], flash_attention=True, experts=experts)
    both = block(m, modules=["core_attn", "moe", "moe_act"], flash_attention=True, experts=experts)
    assert both.activation_bytes == whole.activation_bytes
    assert both.backward_bytes - whole.backward_bytes == pytest.approx(3 * T * 2 * 14336 * 2)
    assert both.recompute_flops == whole.recompute_flops


def test_the_cli_refuses_a_module_the_model_has_not_without_a_traceback(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "rc.yaml"
    path.write_text(yaml.safe_dump(_scenario(recompute_modules=["moe"])))
    result = invoke(app, "run", path)
    assert result.exit_code == 1 and "recompute_modules" in result.output and "Traceback" not in result.output


def test_a_plan_that_changes_the_mode_drops_the_modules() -> None:
    training = {"recompute": "full", "recompute_modules": ["layernorm"]}
    drop_partial_recompute(training)
    assert "recompute_modules" not in training
    s = parse_scenario(_scenario(recompute_modules=["layernorm"]))
    assert s.with_overrides(recompute="full").training.recompute_modules is None
