"""From timed matmuls to a device entry of ppsim's catalogue: the shapes to time and the curves.

No torch here: :mod:`ppexec.measure.device_bench` times the shapes this module lists, and this module
turns the timings into the ``gemm`` and ``attention`` curves of a device entry (the format of
``ppsim/inputs/data/devices.yaml`` and of a scenario's ``hardware.device_file``), the way the
catalogue's A100 curve was made: per octave of FLOPs the median fraction of peak, made
non-decreasing by pooling adjacent violators weighted by count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: tokens per GEMM of the transformer-layer sweep (b = 4 sequences of 2,048, as the A100 curve's source)
SWEEP_TOKENS = 8192
#: tensor-parallel splits of the layer sweep
SWEEP_SPLITS = (1, 2, 4, 8)
#: m of the (m x 4096) @ (4096 x m) GEMMs, the small end of the range
SQUARES = tuple(2 ** i for i in range(5, 14))
#: head dimensions of the attention sweep
HEAD_DIMS = (16, 32, 64, 96, 128, 160, 192, 256)


#: the three passes of a weight GEMM, with the operand layout torch gives each: the forward
#: multiplies by the weight's transpose (``F.linear``), the input grad by the weight itself, the
#: weight grad the output grad's transpose by the input (the tokens are its inner dimension)
PASS_LAYOUTS = {"forward": "nt", "input_grad": "nn", "weight_grad": "tn"}


@dataclass(frozen=True)
class MatmulShape:
    """(m x n) @ (n x k), ``batch`` times; ``what`` names it in a report. ``layout``: which
    operand is a transposed view, as torch passes it to the BLAS: "nn" neither, "nt" the second
    (stored k x n), "tn" the first (stored n x m)."""

    m: int
    n: int
    k: int
    what: str
    batch: int = 1
    layout: str = "nn"

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def sweep_hiddens() -> list[int]:
    """Model widths of the layer sweep: dense where efficiency changes fast (small widths), sparse
    where it is flat."""
    return [*range(128, 1024, 128), *range(1024, 4096, 256), *range(4096, 16384, 1024), *range(16384, 32769, 4096)]


def layer_gemm_shapes(hiddens: Iterable[int], tokens: int = SWEEP_TOKENS, splits: Sequence[int] = SWEEP_SPLITS,
                      squares: Iterable[int] = SQUARES, passes: Sequence[str] = tuple(PASS_LAYOUTS)
                      ) -> list[MatmulShape]:
    """A GPT layer's four weight GEMMs at ``tokens`` tokens for each width h and split t (those t
    that leave a multiple of 32): QKV (h -> 3h/t), attention output (h/t -> h), MLP up (h -> 4h/t)
    and down (4h/t -> h), each in the ``passes`` asked for (:data:`PASS_LAYOUTS`: the forward
    tokens x in x out, the input grad tokens x out x in, the weight grad out x tokens x in); plus
    (m x 4096) @ (4096 x m) for each m of ``squares``."""
    shapes = []
    for h in hiddens:
        for t in splits:
            if h % (t * 32):
                continue
            for name, d_in, d_out in (("qkv", h, 3 * h // t), ("proj", h // t, h), ("fc1", h, 4 * h // t),
                                      ("fc2", 4 * h // t, h)):
                what = f"{name} h={h} t={t}"
                dims = {"forward": (tokens, d_in, d_out), "input_grad": (tokens, d_out, d_in),
                        "weight_grad": (d_out, tokens, d_in)}
                shapes += [MatmulShape(*dims[p], f"{what} {p}", layout=PASS_LAYOUTS[p]) for p in passes]
    shapes += [MatmulShape(m, 4096, m, f"square m={m}") for m in squares]
    return shapes


def attention_shapes(head_dim: int, seq_len: int = 2048, batch: int = 4, heads: int = 128,
                     split: int = 1) -> tuple[MatmulShape, MatmulShape]:
    """The unfused attention's two batched matmuls at ``head_dim`` (``batch`` x ``heads`` / ``split``
    of them): scores QK^T (s x d) @ (d x s) and context PV (s x s) @ (s x d)."""
    count = batch * heads // split
    return (MatmulShape(seq_len, head_dim, seq_len, f"QK^T d={head_dim} t={split}", count),
            MatmulShape(seq_len, seq_len, head_dim, f"PV d={head_dim} t={split}", count))


def pool_adjacent_violators(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence nearest ``values`` in weighted least squares: each run that
    decreases is replaced by its weighted mean."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values, weights, strict=True):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return [b[0] for b in blocks for _ in range(int(b[2]))]


def octave_medians(samples: Iterable[tuple[float, float]]) -> dict[int, tuple[float, int]]:
    """Per octave of FLOPs [2^i, 2^(i+1)), keyed by i: the median fraction of its samples and their count."""
    octaves: dict[int, list[float]] = {}
    for flops, fraction in samples:
        if flops > 0 and fraction > 0:
            octaves.setdefault(math.floor(math.log2(flops)), []).append(fraction)
    return {k: (statistics.median(v), len(v)) for k, v in sorted(octaves.items())}


def octave_curve(samples: Iterable[tuple[float, float]], digits: int = 3) -> list[tuple[float, float]]:
    """Curve points from (FLOPs, fraction of peak) samples: per octave of FLOPs the median fraction
    (:func:`octave_medians`) at the octave's lower end, made non-decreasing (weighted by each
    octave's count), to ``digits`` significant digits; the last point repeats at the largest
    octave's upper end so the curve stays flat to there."""
    octaves = octave_medians(samples)
    if not octaves:
        return []
    keys = list(octaves)
    medians = pool_adjacent_violators([octaves[k][0] for k in keys], [octaves[k][1] for k in keys])
    points = [(significant(2.0 ** k), significant(min(m, 1.0), digits)) for k, m in zip(keys, medians)]
    points.append((significant(2.0 ** (keys[-1] + 1)), points[-1][1]))
    return points


def significant(x: float, digits: int = 3) -> float:
    """``x`` to ``digits`` significant digits (as a curve's points are written)."""
    return float(f"{x:.{digits}g}")


def harmonic_mean(a: float, b: float) -> float:
    """The rate of two equal-FLOP kernels run one after the other, from their two rates."""
    return 2.0 / (1.0 / a + 1.0 / b)
