"""model_layers remembers a layer's costs by everything it reads: plans that differ only in what
the layers do not depend on share them; any training key, parallelism or argument that changes
them gets its own."""

from __future__ import annotations

from typing import Any

from ppsim.costs.workload import model_layers
from ppsim.inputs.scenario import Scenario, parse_scenario

MOE: dict[str, Any] = {
    "name": "memo",
    "model": {"layers": 4, "hidden": 256, "heads": 4, "kv_heads": 2, "seq_len": 128, "vocab": 1024,
              "mlp": "swiglu", "positions": "rope", "dropout": False,
              "moe": {"experts": 8, "top_k": 2, "ffn_hidden": 128}},
    "pipeline": {"stages": 2, "microbatches": 4},
    "training": {"micro_batch": 1, "flash_attention": True},
    "data_parallel": 4,
    "expert_parallel": 2,
    "hardware": {"device": "h100-sxm"},
}


def scenario(**changes: Any) -> Scenario:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in MOE.items()}
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section] = {**data[section], field: value}
        else:
            data[section] = value
    return parse_scenario(data)


def test_plans_alike_in_what_the_layers_read_share_them() -> None:
    base = model_layers(scenario(), moe=True)
    assert base is not None
    for other in (scenario(pipeline__stages=4), scenario(pipeline__microbatches=8, data_parallel=2),
                  scenario(pipeline__schedule="gpipe")):
        assert model_layers(other, moe=True) is base


def test_what_the_layers_read_gives_them_their_own() -> None:
    base = model_layers(scenario(), moe=True)
    assert base is not None
    _, block, _ = base
    doubled = model_layers(scenario(training__micro_batch=2), moe=True)
    assert doubled is not None and doubled[1].forward_flops == 2 * block.forward_flops
    graphed = model_layers(scenario(training__cuda_graphs=["attn"]), moe=True)
    assert graphed is not None and graphed[1].forward_launches < block.forward_launches
    wider = model_layers(scenario(expert_parallel=4), moe=True)  # half the experts per device
    assert wider is not None and wider[1].expert_params == block.expert_params / 2
    assert model_layers(scenario(), moe=False)[1].expert_params == 0  # type: ignore[index]
    assert model_layers(scenario(), moe=True, recompute="full")[1].recompute_flops > block.recompute_flops  # type: ignore[index]
