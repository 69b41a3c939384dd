"""An A/B Megatron-Bridge measured: the expert-parallel all-to-alls overlapped or not, one layout.

Megatron-Bridge's expert-parallel-overlap skill (NVIDIA-NeMo/Megatron-Bridge@067f987,
``skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md``, "HybridEP Production-Shape
Benchmark", 2026-07-25) trained Qwen3-30B-A3B on 16 H100s (two nodes), BF16, sequences of 4,096,
TP1 PP1 CP1 EP16, micro-batches of 1 in global batches of 1,024, routing forced balanced, the flex
dispatcher with HybridEP, and changed only ``overlap_moe_expert_parallel_comm``: 24.7138 s a step
without it, 20.9920 s with it (its independent run; 21.0725 s in the search run). Its profile of
rank 0: communication beside compute 0.11 % of it without, 36.55 % (3,959 ms) with.

This bench builds the layout from the development set's row of the same model, GPUs and layout
(``bench/published_moe.py``'s, container 26.06, FP8 there) in BF16, with HybridEP's kernels and the
recipe's 32 SMs for them, and prints ppsim's step against the measured one, both ways. Not part of
the development set; nothing is fitted to it.

    .venv/bin/python bench/ep_overlap.py [--gemm-curves]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

ROW = "mb-26.06-pretrain-qwen3_30b_a3b-h100-fp8-16g"
MEASURED_S = {"exposed": 24.7138, "overlapped": 20.9920}
SOURCE = "NVIDIA-NeMo/Megatron-Bridge@067f987 skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md"


def scenario(overlapped: bool, gemm_curves: bool) -> dict[str, Any]:
    """The measured run as a scenario: the row's layout in BF16, HybridEP, overlapped or not."""
    import published_moe

    row = next(r for r in yaml.safe_load(published_moe.DATA.read_text()) if r["id"] == ROW)
    data, _ = published_moe.scenario_data(row, gemm_curves)
    training = data["training"]
    for key in ("fp8", "fp4", "low_precision_params", "high_precision_first_layers", "high_precision_last_layers"):
        training.pop(key, None)
    training["moe_dispatcher"] = "hybridep"
    if overlapped:
        data["pipeline"]["schedule"] = "combined-1f1b"
        training["moe_comm_sms"] = 32  # the recipe's moe_hybridep_num_sms
    data["name"] = f"qwen3-30b-a3b-16xh100-bf16-hybridep-{'overlapped' if overlapped else 'exposed'}"
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm-curves", action="store_true", help="price by the devices' measured curves")
    args = ap.parse_args()
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.prediction import predict
    from ppsim.trace.metrics import headline

    print(__doc__.splitlines()[0])
    print("Qwen3-30B-A3B on 16 H100s (two nodes), BF16, TP1 PP1 EP16, micro-batches of 1, global batch 1,024, "
          "HybridEP")
    print(f"measured: {SOURCE}\n")
    predicted = {}
    for case in ("exposed", "overlapped"):
        head = headline(predict(parse_scenario(scenario(case == "overlapped", args.gemm_curves))).trace)
        predicted[case] = head.step_time_ms / 1e3
        measured = MEASURED_S[case]
        print(f"all-to-alls {case:10s}  measured {measured:6.2f} s  ppsim {predicted[case]:6.2f} s  "
              f"error {100 * (predicted[case] / measured - 1):+5.1f} %")
    gain = MEASURED_S["exposed"] / MEASURED_S["overlapped"]
    print(f"\nthe overlap's gain: measured {gain:.3f}x, ppsim {predicted['exposed'] / predicted['overlapped']:.3f}x")


if __name__ == "__main__":
    main()
