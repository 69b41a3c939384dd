"""The narrow formats' GEMMs and casts, measured against predicted: Transformer Engine's GEMM guide.

Transformer Engine's GEMM profiling guide times the 12 GEMMs of one layer of a 5B model (h 4096, MLP
16384 without a gate, 15,872 tokens; each linear layer's forward, data-gradient and weight-gradient
shapes) on a B300 and an H200 NVL, in bf16 and each narrow recipe, as the kernel alone (operands
quantized beforehand) and as ``te.Linear`` under autocast, each call quantizing its input and its
weight into both layouts (``bench/data/te_gemm_guide.yaml`` says where and how). This bench prices the
same work through ppsim's own functions: the 12 GEMMs by ``matmul_ms`` at the recipe's peak (flat
efficiency, or the device's measured curves), and the autocast calls' casts by
``LowPrecision.cast_traffic``'s bytes per value (read 2, write the two narrow layouts with their
scales, one more read for an amax) at the device's memory rate (the datasheet's, or its measured
copy under the curves). The H200 NVL is priced as the catalogue's H200 SXM (the same GPU at more
power): its figures say more in ratios than in milliseconds. The B300's bf16 and NVFP4 curve points
are these same kernels' figures (the catalogue's ``gemm`` and ``gemm_fp4`` of Blackwell Ultra), and
MXFP8's and NVFP4's cast slowdowns (``low_precision.CAST_SLOWDOWN``) these casts' against the
B300's copy: those rows under the curves check the arithmetic, not the model; the rest is priced by
figures measured elsewhere. Nothing is fitted to these timings.

    .venv/bin/python bench/narrow_layer.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "bench" / "data" / "te_gemm_guide.yaml"
TOKENS, HIDDEN, MLP = 15872, 4096, 16384
#: each linear layer's (input, output) width: QKV, attention output, MLP up, MLP down
LINEARS = ((HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, MLP), (MLP, HIDDEN))
#: the guide's precision names as ppsim's recipes
RECIPES = {"fp8_current": "tensorwise", "fp8_delayed": "delayed", "fp8_block": "blockwise", "mxfp8": "mxfp8",
           "nvfp4": "nvfp4"}
DEVICES = {"b300": "b300", "h200_nvl": "h200"}


def gemm_calls() -> list[tuple[int, int, int]]:
    """The guide's 12 calls as (M, K, N): each linear's forward, its data gradient (the output
    gradient times the weight) and its weight gradient (the input transposed times the gradient)."""
    calls = []
    for k, n in LINEARS:
        calls += [(TOKENS, k, n), (TOKENS, n, k), (k, TOKENS, n)]
    return calls


def predicted_ms(device_name: str, precision: str, curves: bool) -> tuple[float, float]:
    """(the kernels alone, with the autocast calls' casts) of the layer, ppsim's milliseconds."""
    from ppsim.costs.analytic import matmul_ms
    from ppsim.costs.gemms import Gemm
    from ppsim.costs.low_precision import LowPrecision
    from ppsim.inputs.hardware import get_device

    device = get_device(device_name)
    narrow = None if precision == "bf16" else LowPrecision(RECIPES[precision])  # type: ignore[arg-type]
    gemms = tuple(Gemm(m, k, n, linear=True) for m, k, n in gemm_calls())
    kernels = matmul_ms(gemms, device, "bf16", efficiency=None if curves else device.flat_efficiency,
                        narrow=narrow.peak if narrow else None,
                        narrow_speed=narrow.gemm_speed(device.mx_formats) if narrow else 1.0)
    if narrow is None:
        return kernels, kernels
    # each call quantizes its (M x K) input and its (K x N) weight: the values as one cast of 1 token
    values = sum(m * k + k * n for m, k, n in gemm_calls())
    cast = narrow.cast_traffic([(values, 0.0)], 1.0, 2).forward
    return kernels, kernels + cast / (device.memory_gb_s(measured=curves) * 1e6)


def main() -> None:
    data: dict[str, Any] = yaml.safe_load(DATA.read_text())
    print(__doc__.splitlines()[0])
    print(f"measured: {data['source']}\n")
    print(f"{'device':9s} {'precision':12s} {'kernels ms':>10s} {'flat':>13s} {'curves':>13s}   "
          f"{'with casts':>10s} {'flat':>13s} {'curves':>13s}")
    for gpu, name in DEVICES.items():
        alone, autocast = data[gpu]["prequantized"], data[gpu]["autocast"]
        for precision, with_casts in autocast.items():
            cells = []
            for measured, index in ((alone.get(precision), 0), (with_casts, 1)):
                if measured is None or (precision == "fp8_delayed" and index == 0):  # delayed: always autocast
                    cells.append(f"{'-':>10s} {'':>13s} {'':>13s}")
                    continue
                row = f"{measured:10.3f}"
                for curves in (False, True):
                    p = predicted_ms(name, precision, curves)[index]
                    row += f" {p:7.3f} {100 * (p / measured - 1):+4.0f}%"
                cells.append(row)
            print(f"{gpu:9s} {precision:12s} " + "   ".join(cells))
    print("\n(the B300's bf16 and NVFP4 kernels, and its MXFP8 and NVFP4 casts, under the curves are the "
          "catalogue's own figures: arithmetic, not a check)")
    print("speedups over bf16 with their casts (measured / flat / curves):")
    for gpu, name in DEVICES.items():
        autocast = data[gpu]["autocast"]
        base = {c: predicted_ms(name, "bf16", c)[1] for c in (False, True)}
        for precision, with_casts in autocast.items():
            if precision == "bf16":
                continue
            flat, curved = (base[c] / predicted_ms(name, precision, c)[1] for c in (False, True))
            print(f"  {gpu:9s} {precision:12s} {autocast['bf16'] / with_casts:5.2f}x  {flat:5.2f}x  {curved:5.2f}x")


if __name__ == "__main__":
    main()
