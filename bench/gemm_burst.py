"""How fast a GEMM runs depends on how long the GPU has been busy: a few calls after idle, a
sustained loop, inputs of small magnitude, and calls interleaved with memory-bound copies.

    python bench/gemm_burst.py        # needs a CUDA GPU; about 20 s on an H200

Each figure is a fraction of 989 TFLOP/s (the H100 / H200 SXM dense bf16 peak). Output of one run
on an H200: bench/measured/h200-2026-12-04-burst.log; what it says: docs/calibration.md.
"""
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ppexec.measure.device_bench import Stopwatch  # noqa: E402

WATCH = Stopwatch("cuda")
dev = WATCH.device
torch.manual_seed(0)


def per_call(fn: Callable[[], object], n: int) -> float:
    """Mean ms per call of ``fn`` over ``n`` calls back to back, after three warm-ups."""
    for _ in range(3):
        fn()
    WATCH.sync()
    return WATCH.loop_ms(fn, n) / n


SHAPES = [(2048, 5120, 15360), (2048, 5120, 20480), (2048, 20480, 5120), (8192, 5120, 20480), (2048, 12288, 49152),
          (8192, 12288, 49152), (4096, 4096, 4096), (8192, 8192, 8192)]


def fraction(m: int, n: int, k: int, scale: float, reps: int, interleave: bool) -> float:
    """(m x n) @ (k x n)^T's fraction of 989 TFLOP/s over ``reps`` calls of inputs ``scale`` x randn,
    with a memory-bound copy between calls (its own time taken off) when ``interleave``."""
    a = torch.randn(m, n, device=dev, dtype=torch.bfloat16) * scale
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16) * scale
    c = torch.empty(m, k, device=dev, dtype=torch.bfloat16)
    if interleave:
        x = torch.randn(m, 4 * max(n, k), device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        ms = per_call(lambda: (torch.mm(a, b.t(), out=c), y.copy_(x)), reps) - per_call(lambda: y.copy_(x), reps)
    else:
        ms = per_call(lambda: torch.mm(a, b.t(), out=c), reps)
    return 2 * m * n * k / ms / 1e9 / 989


if __name__ == "__main__":
    print("m n k | fraction of 989 TFLOP/s: randn x5 calls, randn x200, 0.02*randn x200, "
          "randn interleaved with a copy x200")
    for m, n, k in SHAPES:
        row = [fraction(m, n, k, scale, reps, inter)
               for scale, reps, inter in ((1.0, 5, False), (1.0, 200, False), (0.02, 200, False), (1.0, 200, True))]
        print(m, n, k, " ".join(f"{r:.3f}" for r in row), flush=True)
