"""FP8 training as Transformer Engine runs it under Megatron-LM / NeMo (``training.fp8``).

What runs in FP8: the transformer blocks' linear layers (QKV, attention output, the MLP's up and
down projections), forward, input grad and weight grad, at the device's FP8 peak. What stays in
16 bits: the attention core, norms, activations, the embedding, the LM head; the optimizer keeps its
fp32 master weights.

Recipes (Megatron's ``--fp8-recipe``):

- ``tensorwise`` (current scaling): a scale per tensor from its amax, found right before the cast,
  so each cast reads its tensor once more;
- ``delayed``: the scale from the amax history of earlier steps: no extra read (the amaxes' reduction
  once per step is a few latency-bound all-reduces, not modelled);
- ``blockwise``: a scale per block of 128 values (DeepSeek-V3's recipe), found in the cast kernel;
- ``mxfp8``: a scale per 32 values in Blackwell's Tensor Cores (MX formats): B200, B300, GB200, GB300.

Casts are memory-bound work at the device's HBM bandwidth. Per linear layer and micro-batch the
forward casts its input and the backward its output gradient: each read in 16 bits and written
twice in FP8 (row-wise for the GEMM that follows, column-wise for the weight grad), plus, for
``tensorwise``, one more read for the amax; block scales add 1/32 (``mxfp8``) or 1/128 of a byte
per value. Weights are cast once per step (read 2 bytes, write 2), unless ``fp8_params`` keeps them
in FP8.

Memory: a linear layer's input kept for the backward is its column-wise FP8 copy (1 byte and its
scales) instead of 16 bits; weights gain 2 bytes per parameter of FP8 copies, or with
``fp8_params`` hold 1 byte of FP8 weights and 1 of their column-wise copy instead of 2 of 16-bit
weights (the fp32 master copy stays in the optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from ppsim.costs.elementwise import Traffic
from ppsim.errors import ScenarioError
from ppsim.inputs.choices import Fp8Recipe

RECIPES: tuple[str, ...] = get_args(Fp8Recipe)
#: bytes of scales per FP8 value
SCALE_BYTES = {"tensorwise": 0.0, "delayed": 0.0, "blockwise": 4 / 128, "mxfp8": 1 / 32}


@dataclass(frozen=True)
class Fp8:
    """FP8 as a scenario asks for it: the recipe, and whether the weights are kept in FP8."""

    recipe: Fp8Recipe
    params: bool = False

    @property
    def value_bytes(self) -> float:
        """Bytes of one FP8 value with its share of the scales."""
        return 1.0 + SCALE_BYTES[self.recipe]

    def cast_traffic(self, linears: list[tuple[float, float]], tokens: float, dtype_bytes: int) -> Traffic:
        """HBM bytes of the casts of linear layers of (input, output) widths at ``tokens`` tokens:
        the forward's inputs, the backward's output gradients."""
        per_value = dtype_bytes + 2 * self.value_bytes + (dtype_bytes if self.recipe == "tensorwise" else 0)
        forward = sum(tokens * i for i, _ in linears) * per_value
        backward = sum(tokens * o for _, o in linears) * per_value
        return Traffic(forward=forward, backward=backward, recompute=0.0)

    def weight_cast_bytes(self, params: int, dtype_bytes: int) -> float:
        """HBM bytes of casting ``params`` weights to FP8 once per step (none with FP8 weights)."""
        return 0.0 if self.params else params * (dtype_bytes + 2 * self.value_bytes)

    def weight_bytes_per_param(self, dtype_bytes: int) -> float:
        """Bytes a linear layer's weight takes: its FP8 copies beside the 16-bit weight, or with
        ``params`` its FP8 weight and column-wise copy alone."""
        return 2 * self.value_bytes if self.params else dtype_bytes + 2 * self.value_bytes


def check_fp8(recipe: str | None, *, device_name: str, peaks: dict[str, float], mx_formats: bool, dtype: str,
              fp8_params: bool) -> None:
    """A ScenarioError naming the key when FP8 cannot run as asked."""
    if recipe is None:
        if fp8_params:
            raise ScenarioError("training.fp8_params keeps the weights in FP8, which needs training.fp8 (a recipe: "
                                f"{', '.join(RECIPES)})", field="training.fp8_params")
        return
    if "fp8" not in peaks:
        raise ScenarioError(f"training.fp8 needs a device with FP8 Tensor Cores (Hopper, Blackwell); {device_name} has "
                            "none: choose another hardware.device or drop training.fp8", field="training.fp8")
    if recipe == "mxfp8" and not mx_formats:
        raise ScenarioError(f"training.fp8: mxfp8 needs Blackwell's MX formats; {device_name} has none: use tensorwise, "
                            "delayed or blockwise, or a Blackwell device (b200, b300, gb200, gb300)",
                            field="training.fp8")
    if dtype not in ("bf16", "fp16"):
        raise ScenarioError(f"training.fp8 runs the linear layers in FP8 beside 16-bit values; model.dtype is {dtype}: "
                            "set it to bf16", field="model.dtype")
