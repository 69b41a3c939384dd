"""Recomputing some of the blocks (``training.recompute_layers``, Megatron's block method): each
virtual stage's first N blocks run their forward again, the rest keep their activations, so every
figure of a stage lies between no recomputation and full, exactly N of its blocks' share along."""

from __future__ import annotations

from typing import Any

import pytest

from ppsim.errors import PpsimError, ScenarioError
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction import build


def scenario(**training: Any) -> dict[str, Any]:
    """8 blocks on 2 stages, 4 each; tensor parallel with its communication overlapped, so that the
    recomputed forward's collectives count too."""
    return {"name": "partial", "model": {"layers": 8, "hidden": 2048, "heads": 16, "seq_len": 4096, "vocab": 32768,
                                         "mlp": "swiglu", "positions": "rope", "dropout": False},
            "pipeline": {"stages": 2, "microbatches": 4}, "tensor_parallel": 2,
            "training": {"micro_batch": 1, "flash_attention": True, "sequence_parallel": True,
                         "tp_comm_overlap": True, **training},
            "hardware": {"device": "gb200", "gemm_curves": True}}


def stages(**training: Any) -> list[Any]:
    return list(build(parse_scenario(scenario(**training))).workload.costs.stages)


FIELDS = ("forward_ms", "backward_ms", "weight_grad_ms", "activation_bytes", "backward_comm_ms")


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_some_blocks_recomputed_lie_that_share_between_none_and_full(layers: int) -> None:
    none, full = stages(), stages(recompute="full")
    some = stages(recompute="full", recompute_layers=layers)
    for a, b, c in zip(none, full, some, strict=True):
        for field in FIELDS:
            want = getattr(a, field) + layers / 4 * (getattr(b, field) - getattr(a, field))
            assert getattr(c, field) == pytest.approx(want, rel=1e-9), field


def test_as_many_layers_as_a_stage_holds_is_full_recomputation() -> None:
    assert stages(recompute="full", recompute_layers=4) == stages(recompute="full")
    assert stages(recompute="full", recompute_layers=8) == stages(recompute="full")


def test_the_peak_falls_with_fewer_blocks_kept() -> None:
    def peak(**training: Any) -> int:
        from ppsim.prediction import predict
        from ppsim.trace.metrics import summarize

        trace = predict(parse_scenario(scenario(**training))).trace
        return int(max(r.peak_memory_bytes or 0 for r in summarize(trace).per_rank))

    peaks = [peak(), *(peak(recompute="full", recompute_layers=n) for n in (1, 2, 3, 4))]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 5


@pytest.mark.parametrize("training, says", [
    ({"recompute_layers": 2}, "needs training.recompute: full"),
    ({"recompute": "selective", "recompute_layers": 2}, "needs training.recompute: full"),
    ({"recompute": "full", "recompute_layers": 9}, "9 is more than model.layers"),
])
def test_what_cannot_be_recomputed_is_refused_naming_the_key(training: dict[str, Any], says: str) -> None:
    with pytest.raises(ScenarioError, match=says) as err:
        parse_scenario(scenario(**training))
    assert err.value.field == "training.recompute_layers"


def test_ppexec_refuses_partial_recomputation_naming_the_key() -> None:
    pytest.importorskip("torch")
    from ppexec.launch.prepare import check_buildable

    data = scenario(recompute="full", recompute_layers=2)
    data.update(tensor_parallel=1, training={"micro_batch": 1, "recompute": "full", "recompute_layers": 2})
    data["model"] = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 256, "vocab": 512}
    with pytest.raises(PpsimError, match="recomputes every block or none") as err:
        check_buildable(parse_scenario(data))
    assert err.value.field == "training.recompute_layers"


def test_a_plan_that_recomputes_otherwise_drops_the_count() -> None:
    """--recompute none (or a tuned plan without full recomputation) on a scenario that recomputes
    some blocks: the count goes with the mode instead of failing the plan."""
    from ppsim.inputs.overrides import PlanOverrides, apply_overrides

    s = parse_scenario(scenario(recompute="full", recompute_layers=2))
    new, _ = apply_overrides(s, PlanOverrides(recompute="none"))
    assert new.training.recompute == "none" and new.training.recompute_layers is None
    kept, _ = apply_overrides(s, PlanOverrides(micro_batch=2))
    assert kept.training.recompute_layers == 2
