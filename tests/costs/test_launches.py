"""The host's kernel launches (ppsim.costs.launches): each layer's count by hand from the module's
docstring, what CUDA graphs and fusions leave, and a pass that takes the longer of the host's
launches and the GPU's work; bad keys refused naming the key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import device_entry, invoke, refused_device_file
from ppsim.cli import app
from ppsim.costs.launches import Launches, layer_launches
from ppsim.costs.low_precision import LowPrecision
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import LaunchTime, read_devices
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction import build

DENSE: dict[str, Any] = {
    "name": "launches",
    "model": {"layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "seq_len": 128, "vocab": 1024,
              "mlp": "gelu", "positions": "rope", "dropout": False},
    "pipeline": {"stages": 1, "microbatches": 2},
    "training": {"micro_batch": 1, "flash_attention": True},
    "hardware": {"device": "h100-sxm"},
}
#: 16 experts, 2 per token, one shared expert, EP 4 (4 local experts)
MOE = copy.deepcopy(DENSE)
MOE["model"]["moe"] = {"experts": 16, "top_k": 2, "ffn_hidden": 128, "shared_experts": 1}
MOE.update(data_parallel=4, expert_parallel=4)


def scenario(base: dict[str, Any], training: dict[str, Any] | None = None, **top: Any) -> Any:
    data = copy.deepcopy(base)
    data["training"].update(training or {})
    data.update(top)
    return parse_scenario(data)


def test_a_dense_blocks_launches_by_hand() -> None:
    """Attention: norm 1/2, QKV 1/2, rope 2/2, fused attention 1/3, output 1/2, residual 1/1 = 7/12;
    MLP: norm 1/2, up 1/2, activation 1/1, down 1/2, residual 1/1 = 5/8. Tensorwise FP8 quantizes
    each linear's operand with 3 launches each way; tensor parallelism adds each linear's collective."""
    s = scenario(DENSE)
    assert layer_launches(s, None, "none", attention=True, mlp="dense") == Launches(12, 20)
    assert layer_launches(s, LowPrecision("tensorwise"), "none", attention=True, mlp="dense") == Launches(24, 32)
    assert layer_launches(s, LowPrecision("mxfp8"), "none", attention=True, mlp="dense") == Launches(16, 24)
    tp = scenario(DENSE, {"sequence_parallel": True}, tensor_parallel=2)
    assert layer_launches(tp, None, "none", attention=True, mlp="dense") == Launches(16, 24)
    assert layer_launches(s, None, "full", attention=True, mlp="dense") == Launches(12, 32)


def test_a_moe_layer_launches_a_gemm_per_local_expert() -> None:
    """The MLP half of a MoE layer, 4 local experts, BF16: router 72/72, preprocessing 2/0, norm
    1/2, permute and exchange 4/4, residual 1/1, routed experts 2 x 4 + 1 / 4 x 4 + 1, the shared
    expert's up, activation and down 3/5."""
    s = scenario(MOE)
    assert layer_launches(s, None, "none", mlp="moe") == Launches(72 + 2 + 1 + 4 + 1 + 9 + 3, 72 + 2 + 4 + 1 + 17 + 5)
    # MXFP8: a quantize per local expert and operand (8 each way), one per shared linear (2 each way)
    assert layer_launches(s, LowPrecision("mxfp8"), "none", mlp="moe") == Launches(92 + 10, 101 + 10)
    # delayed scaling's fused multi-tensor cast: one per operand for all the experts
    assert layer_launches(s, LowPrecision("delayed"), "none", mlp="moe") == Launches(92 + 4, 101 + 4)
    fused = scenario(MOE, {"moe_router_fusion": True, "fused_grouped_mlp": True})
    assert layer_launches(fused, None, "none", mlp="moe") == Launches(31 + 2 + 6 + 4 + 3, 31 + 7 + 8 + 5)
    wider = scenario(MOE, data_parallel=8, expert_parallel=8)  # 2 local experts: 4 fewer GEMMs forward, 8 backward
    assert layer_launches(wider, None, "none", mlp="moe") == Launches(88, 93)


def test_graphed_modules_cost_one_launch_and_a_whole_step_none() -> None:
    s = scenario(MOE, {"cuda_graphs": ["attn", "moe_router", "moe_preprocess"]})
    eager = layer_launches(scenario(MOE), None, "none", attention=True, mlp="moe")
    graphed = layer_launches(s, None, "none", attention=True, mlp="moe")
    # attention 7/12 -> 1/1, router 72/72 -> 1/1, preprocessing 2/0 -> 1/0
    assert eager.forward - graphed.forward == 6 + 71 + 1
    assert eager.backward - graphed.backward == 11 + 71
    whole = scenario(MOE, {"cuda_graphs": ["full_iteration"]})
    assert layer_launches(whole, None, "full", attention=True, mlp="moe") == Launches(0, 0)


def _stage(s: Any) -> Any:
    return build(s).workload.costs.stages[0]


def test_a_launch_bound_pass_takes_the_hosts_time() -> None:
    """A 256-wide model of 128 tokens: microseconds of GPU work a layer, its kernels' launches at
    the H100 host's 13.48 us each far longer; the waits are the difference, and none without launches."""
    s = scenario(DENSE)
    bound, gpu = _stage(s), _stage(scenario(DENSE, hardware={"device": "h100-sxm", "launch_us": 0}))
    layers = layer_launches(s, None, "none", attention=True, mlp="dense").times(4)
    assert bound.forward_ms == pytest.approx(layers.forward * 13.48e-3)
    assert bound.backward_ms == pytest.approx(layers.backward * 13.48e-3)
    assert bound.launch_wait_ms == pytest.approx(bound.forward_ms + bound.backward_ms
                                                 - gpu.forward_ms - gpu.backward_ms)
    assert gpu.launch_wait_ms == 0.0
    assert "launch-bound: stage 0's micro-batch waits" in build(s).workload.costs_source
    assert "launch-bound" not in build(scenario(DENSE, {"cuda_graphs": ["full_iteration"]})).workload.costs_source


@settings(max_examples=25, deadline=None)
@given(micro_batch=st.sampled_from([1, 4, 16, 64, 256]), launch_us=st.floats(0.5, 100.0))
def test_a_pass_takes_the_longer_of_the_launches_and_the_gpu(micro_batch: int, launch_us: float) -> None:
    """Whatever the work and the host: each pass is max(GPU, launches), never less than the GPU's."""
    hw = {"device": "h100-sxm", "launch_us": launch_us}
    s = scenario(DENSE, {"micro_batch": micro_batch}, hardware=hw)
    gpu = _stage(scenario(DENSE, {"micro_batch": micro_batch}, hardware={**hw, "launch_us": 0}))
    priced, launches = _stage(s), layer_launches(s, None, "none", attention=True, mlp="dense").times(4)
    assert priced.forward_ms == pytest.approx(max(gpu.forward_ms, launches.forward * launch_us / 1e3))
    assert priced.backward_ms == pytest.approx(max(gpu.backward_ms, launches.backward * launch_us / 1e3))


def test_fewer_local_experts_wait_less() -> None:
    """A launch-bound MoE model: EP 2, 4, 8 over 16 experts hold 8, 4, 2 each: fewer GEMMs to launch."""
    waits = [_stage(scenario(MOE, data_parallel=ep, expert_parallel=ep)).launch_wait_ms for ep in (2, 4, 8)]
    assert waits[0] > waits[1] > waits[2] > 0


@pytest.mark.parametrize(("training", "text"), [
    ({"cuda_graphs": ["attn", "attn"]}, "lists a scope twice"),
    ({"cuda_graphs": ["full_iteration", "attn"]}, "give [full_iteration] alone"),
    ({"cuda_graphs": ["moe_router"]}, "graphs moe_router, and the model has no experts"),
    ({"cuda_graphs": ["mamba"]}, "graphs mamba, and the model has no Mamba layers"),
    ({"cuda_graphs": ["everything"]}, "cuda_graphs"),
    ({"moe_router_fusion": True}, "the model has no experts"),
    ({"fused_grouped_mlp": True}, "the model has no experts"),
])
def test_bad_graph_and_fusion_keys_are_refused_naming_the_key(training: dict[str, Any], text: str) -> None:
    with pytest.raises(ScenarioError) as err:
        scenario(DENSE, training)
    assert text in str(err.value)
    assert "training." in str(err.value)


def test_the_cli_refuses_a_bad_scope_with_exit_1(tmp_path: Path) -> None:
    data = copy.deepcopy(DENSE)
    data["training"]["cuda_graphs"] = ["full_iteration", "attn"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    out = invoke(app, "run", path)
    assert out.exit_code == 1
    assert "training.cuda_graphs" in out.output
    assert "Traceback" not in out.output


@pytest.mark.parametrize(("entry", "message"), [
    ("  launch: {us: 13.5}", "launch is a mapping of us"),
    ("  launch: {us: -1, source: here}", "launch.us is -1"),
    ("  launch: {us: 13.5, source: ' '}", "launch needs a source"),
])
def test_a_device_files_launch_time_is_checked(tmp_path: Path, entry: str, message: str) -> None:
    assert refused_device_file(tmp_path, entry, message).field == "hardware.device_file"


def test_a_device_file_may_give_its_host_and_a_scenario_its_own(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(device_entry("  launch: {us: 20, source: my host}"))
    assert read_devices(path)["mine"].launch == LaunchTime(20.0, "my host")
    mine = _stage(scenario(DENSE, hardware={"device": "mine", "device_file": str(path)}))
    assert mine.forward_ms == pytest.approx(4 * 12 * 20e-3)


def test_an_overlapped_schedules_phases_wait_for_their_launches() -> None:
    """Combined 1F1B pairs a MoE layer's halves phase by phase: each half's forward takes at least
    its own launches, and its backward's two grads stretch alike to at least theirs."""
    pipeline = {"stages": 1, "microbatches": 2, "schedule": "combined-1f1b"}
    priced = _stage(scenario(MOE, pipeline=pipeline)).moe_phases
    gpu = _stage(scenario(MOE, pipeline=pipeline, hardware={"device": "h100-sxm", "launch_us": 0})).moe_phases
    s = scenario(MOE)
    attention = layer_launches(s, None, "none", attention=True)
    experts = layer_launches(s, None, "none", mlp="moe")
    assert priced.attention_forward == pytest.approx(max(gpu.attention_forward, attention.forward * 13.48e-3))
    assert priced.mlp_forward == pytest.approx(max(gpu.mlp_forward, experts.forward * 13.48e-3))
    backward = priced.mlp_input_grad + priced.mlp_weight_grad
    assert backward == pytest.approx(max(gpu.mlp_input_grad + gpu.mlp_weight_grad, experts.backward * 13.48e-3))
    assert priced.mlp_input_grad / backward == pytest.approx(gpu.mlp_input_grad / (gpu.mlp_input_grad
                                                                                   + gpu.mlp_weight_grad))
    assert priced.dispatch_forward == gpu.dispatch_forward


def test_the_costs_line_names_whose_launch_time_it_took() -> None:
    mine = build(scenario(DENSE, hardware={"device": "h100-sxm", "launch_us": 20})).workload.costs_source
    assert "(20 us each, hardware.launch_us)" in mine
    catalogue = build(scenario(DENSE)).workload.costs_source
    assert "(13.48 us each, the device's host)" in catalogue and "training.cuda_graphs" in catalogue
    assert "launch-bound" not in build(scenario(DENSE, hardware={"device": "a100-80g"})).workload.costs_source


def test_selective_recomputation_launches_its_modules_again() -> None:
    """The backward launches each recomputed module's forward again: the attention core (1), the
    layer norms (1 a half), the whole MoE half (its 92 forward launches); none of a graphed module."""
    eager = layer_launches(scenario(MOE), None, "none", attention=True, mlp="moe")

    def again(modules: list[str], graphs: list[str] | None = None) -> float:
        s = scenario(MOE, {"recompute": "selective", "recompute_modules": modules, "cuda_graphs": graphs or []})
        plain = layer_launches(scenario(MOE, {"cuda_graphs": graphs or []}), None, "none", attention=True, mlp="moe")
        got = layer_launches(s, None, "selective", attention=True, mlp="moe")
        assert got.forward == plain.forward
        return got.backward - plain.backward

    assert again(["core_attn"]) == 1
    assert again(["layernorm"]) == 2
    assert again(["moe_act", "shared_experts"]) == 1 + 3
    assert again(["moe"]) == 72 + 2 + 1 + 4 + 1 + 9 + 3 == eager.forward - 7
    assert again(["core_attn"], ["attn"]) == 0
