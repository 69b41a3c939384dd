"""One MoE layer, measured against predicted: Megatron-LM's CI timings of a Megatron-Core MoELayer.

Megatron-LM's CI times one MoELayer (router, permutation, dispatch, grouped-GEMM experts, combine;
no attention) forward and backward on 8 H100s with expert parallelism 8, for a DeepSeek-V3-like
layer (32 experts of 2,048, top 8, a shared expert, h = 7168) and a Mixtral-like one (8 experts of
14,336, top 2, h = 4096), in bf16 and blockwise FP8, under three dispatchers (NCCL all-to-all,
DeepEP, HybridEP): ``bench/data/megatron_moe_layer.yaml`` says where and how. This bench sets each
beside ppsim's prediction of that layer through its own cost path, as ``bench/device_check.py``
does for a dense block: the difference between a one-stage plan of two such layers (a hybrid
pattern ``EE``: the MoE half of a block, with its norm and residual) and of one, on the catalogue's
``h100-sxm`` at its flat efficiency and with its measured curves (``hardware.gemm_curves``).
Each case names its dispatcher to ppsim (``training.moe_dispatcher``): NCCL's all-to-all with its
two permutations each way, or DeepEP's and HybridEP's kernels, a token sent once to each device it
has experts on at the share of NVLink their kernels were measured to reach (the catalogue's
``dispatch_measured``, from DeepEP's published tables, not from these timings); the host-side work
that differs between them is not modelled. Nothing is fitted to these timings.

    .venv/bin/python bench/moe_layer.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "bench" / "data" / "megatron_moe_layer.yaml"
GPUS, TOKENS = 8, 4096
DISPATCHERS = {"alltoall": "alltoall", "deepep": "deepep", "hybridep": "hybridep"}  #: the data's names, ppsim's


def predicted_layer_ms(arch: dict[str, Any], precision: str, curves: bool, dispatcher: str) -> tuple[float, float]:
    """ppsim's (forward, backward) ms of one MoE layer: a one-stage plan of ``EE`` less one of ``E``."""
    from ppsim.costs.workload import build_workload
    from ppsim.inputs.scenario import parse_scenario

    moe = {"experts": arch["experts"], "top_k": arch["top_k"], "ffn_hidden": arch["ffn_hidden"]}
    if arch.get("shared_ffn_hidden"):
        moe.update(shared_experts=1, shared_ffn_hidden=arch["shared_ffn_hidden"])

    def stage(pattern: str) -> tuple[float, float]:
        training: dict[str, Any] = {"micro_batch": 1, "global_batch": GPUS, "flash_attention": True, "grad_clip": 0,
                                    "moe_dispatcher": DISPATCHERS[dispatcher]}
        if precision == "fp8":
            training["fp8"] = "blockwise"
        s = parse_scenario({
            "model": {"layers": len(pattern), "pattern": pattern, "hidden": arch["hidden"], "heads": 8,
                      "seq_len": TOKENS, "vocab": 1024, "ffn_hidden": arch["ffn_hidden"], "dropout": False,
                      "dtype": "bf16", "mlp": "gelu", "moe": moe},
            "training": training, "expert_parallel": GPUS, "data_parallel": GPUS,
            "pipeline": {"stages": 1, "schedule": "gpipe"},
            "hardware": {"device": "h100-sxm", "gemm_curves": curves},
        })
        cost = build_workload(s).costs.stages[0]
        return cost.forward_ms, cost.backward_ms

    two, one = stage("EE"), stage("E")
    return two[0] - one[0], two[1] - one[1]


def main() -> None:
    data = yaml.safe_load(DATA.read_text())
    print(__doc__.splitlines()[0])
    print(f"measured: {data['source']}\n")
    print(f"{'case':30s} {'meas F':>7s} {'meas B':>7s} {'flat F':>7s} {'err':>5s} {'flat B':>7s} {'err':>5s} "
          f"{'curve F':>7s} {'err':>5s} {'curve B':>7s} {'err':>5s}")
    errors: dict[str, list[float]] = {}
    predicted: dict[tuple[str, str, bool, str], tuple[float, float]] = {}
    for name, (model, dispatcher, precision, fwd, bwd) in data["cases"].items():
        cells = []
        for curves in (False, True):
            key = (model, precision, curves, dispatcher)
            if key not in predicted:
                predicted[key] = predicted_layer_ms(data["models"][model], precision, curves, dispatcher)
            pf, pb = predicted[key]
            for p, m in ((pf, fwd), (pb, bwd)):
                err = p / m - 1
                errors.setdefault(f"{'curves' if curves else 'flat'} {precision}", []).append(err)
                cells.append(f"{p:7.3f} {100 * err:+4.0f}%")
        print(f"{name:30s} {fwd:7.3f} {bwd:7.3f} " + " ".join(cells))
    print()
    for key, errs in errors.items():
        print(f"{key:12s} median |error| {100 * statistics.median(abs(e) for e in errs):5.1f} %, median error "
              f"{100 * statistics.median(errs):+5.1f} %, range {100 * min(errs):+.0f} .. {100 * max(errs):+.0f} % "
              f"({len(errs)} passes)")


if __name__ == "__main__":
    main()
