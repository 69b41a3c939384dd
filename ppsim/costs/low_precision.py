"""FP8 and FP4 training as Transformer Engine runs it under Megatron-LM / NeMo (``training.fp8``,
``training.fp4``).

What runs narrow: the transformer blocks' linear layers (QKV, attention output, the MLP's up and
down projections), forward, input grad and weight grad, at the device's FP8 or FP4 peak. What
stays in 16 bits: the attention core, norms, activations, the embedding, the LM head; the optimizer
keeps its fp32 master weights.

Recipes (Megatron's ``--fp8-recipe`` and ``--fp4-recipe``):

- ``tensorwise`` (FP8 current scaling): a scale per tensor from its amax, found right before the
  cast, so each cast reads its tensor once more;
- ``delayed`` (FP8): the scale from the amax history of earlier steps: no extra read (the amaxes'
  reduction once per step is a few latency-bound all-reduces, not modelled);
- ``blockwise`` (FP8): a 4-byte scale per block of 128 values (DeepSeek-V3's recipe), found in the
  cast kernel;
- ``mxfp8``: a 1-byte scale per 32 values, in Blackwell's Tensor Cores (MX formats);
- ``nvfp4``: 4-bit values (half a byte) with a 1-byte scale per 16, in Blackwell's Tensor Cores,
  under a per-tensor scale from the tensor's amax, found right before the cast (one more read, as
  ``tensorwise``; Transformer Engine's GEMM profiling guide names "the extra memory pass for
  per-tensor amax computation"); the weight grad's inputs pass a 16-point Hadamard transform, done
  in the cast kernel.

Casts are memory-bound work at the device's HBM bandwidth, each recipe's cast kernel at its measured
speed beside a copy's (:data:`CAST_SLOWDOWN`: its bytes counted as the copy-equivalent bytes that
take as long). Per linear layer and micro-batch the
forward casts its input and the backward its output gradient: each read in 16 bits and written
twice narrow (row-wise for the GEMM that follows, column-wise for the weight grad), plus, for
``tensorwise`` and ``nvfp4``, one more read for the amax. Weights are cast once per step (read 2 bytes, write
the two narrow copies), unless ``low_precision_params`` keeps them narrow.

Memory: a linear layer's input kept for the backward is its column-wise narrow copy (with its
scales) instead of 16 bits; weights gain their two narrow copies, or with ``low_precision_params``
hold the two narrow copies instead of the 16-bit weight (the fp32 master copy stays in the optimizer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from ppsim.costs.elementwise import Traffic
from ppsim.errors import ScenarioError
from ppsim.inputs.choices import Fp4Recipe, Fp8Recipe
from ppsim.inputs.hardware import Device
from ppsim.inputs.scenario import Scenario

FP8_RECIPES: tuple[str, ...] = get_args(Fp8Recipe)
FP4_RECIPES: tuple[str, ...] = get_args(Fp4Recipe)
#: bytes of one narrow value, and of its scales per value
VALUE_BYTES = {"tensorwise": 1.0, "delayed": 1.0, "blockwise": 1.0, "mxfp8": 1.0, "nvfp4": 0.5}
SCALE_BYTES = {"tensorwise": 0.0, "delayed": 0.0, "blockwise": 4 / 128, "mxfp8": 1 / 32, "nvfp4": 1 / 16}
#: recipes whose block scales need Blackwell's MX Tensor Cores
MX_RECIPES = ("mxfp8", "nvfp4")
#: recipes whose cast reads each tensor once more, for its per-tensor amax
AMAX_PASS_RECIPES = ("tensorwise", "nvfp4")
#: how much longer than a copy of its bytes a recipe's cast takes: Transformer Engine's GEMM guide on
#: a B300 (bench/data/te_gemm_guide.yaml: each autocast call's casts over their bytes, against the
#: B300's measured copy; tests/costs/test_low_precision.py derives them). MXFP8's block scales 1.2x,
#: NVFP4's Hadamard transforms, stochastic rounding and 2D scales 1.4x; per-tensor scaling ran as a
#: copy (1.04x); the others were not measured apart from their GEMMs
CAST_SLOWDOWN = {"mxfp8": 1.20, "nvfp4": 1.40}
#: how fast a recipe's GEMMs run against per-tensor-scaled FP8's on the same device, where measured
#: apart (Transformer Engine's GEMM guide, bench/data/te_gemm_guide.yaml; tests/costs/test_low_precision.py
#: derives both): MXFP8's on a B300, the kernels alone (a layer's 6.812 ms against 7.161: 0.95);
#: blockwise FP8's on an H200, its scales applied inside the kernel (its autocast layer less its
#: casts, priced as per-tensor scaling's measured casts per byte: 0.82). On Blackwell Transformer
#: Engine runs blockwise as MXFP8
GEMM_SPEED = {"mxfp8": 0.95, "blockwise": 0.82}


@dataclass(frozen=True)
class LowPrecision:
    """The narrow format a scenario asks for: the recipe, and whether the weights are kept narrow."""

    recipe: Fp8Recipe | Fp4Recipe
    params: bool = False

    @property
    def peak(self) -> str:
        """The device peak its GEMMs run at: ``fp8`` or ``fp4``."""
        return "fp4" if self.recipe in FP4_RECIPES else "fp8"

    @property
    def cast_slowdown(self) -> float:
        """The recipe's cast against a copy of its bytes (:data:`CAST_SLOWDOWN`; 1: as fast)."""
        return CAST_SLOWDOWN.get(self.recipe, 1.0)

    def gemm_speed(self, mx_formats: bool) -> float:
        """The recipe's GEMMs against per-tensor-scaled FP8's on a device with or without MX formats
        (:data:`GEMM_SPEED`; 1: as fast; blockwise on a device with MX formats as MXFP8)."""
        return GEMM_SPEED.get("mxfp8" if self.recipe == "blockwise" and mx_formats else self.recipe, 1.0)

    @property
    def value_bytes(self) -> float:
        """Bytes of one narrow value with its share of the scales."""
        return VALUE_BYTES[self.recipe] + SCALE_BYTES[self.recipe]

    def cast_traffic(self, linears: list[tuple[float, float]], tokens: float, dtype_bytes: int) -> Traffic:
        """HBM bytes of the casts of linear layers of (input, output) widths at ``tokens`` tokens:
        the forward's inputs, the backward's output gradients."""
        per_value = self.cast_slowdown * (dtype_bytes + 2 * self.value_bytes
                                          + (dtype_bytes if self.recipe in AMAX_PASS_RECIPES else 0))
        forward = sum(tokens * i for i, _ in linears) * per_value
        backward = sum(tokens * o for _, o in linears) * per_value
        return Traffic(forward=forward, backward=backward, recompute=0.0)

    def weight_cast_bytes(self, params: int, dtype_bytes: int) -> float:
        """HBM bytes of casting ``params`` weights once per step (none when they are kept narrow)."""
        return 0.0 if self.params else params * self.cast_slowdown * (dtype_bytes + 2 * self.value_bytes)

    def weight_bytes_per_param(self, dtype_bytes: int) -> float:
        """Bytes a linear layer's weight takes: its narrow copies beside the 16-bit weight, or with
        ``params`` the narrow copies alone."""
        return 2 * self.value_bytes if self.params else dtype_bytes + 2 * self.value_bytes


def scenario_precision(fp8: Fp8Recipe | None, fp4: Fp4Recipe | None, params: bool) -> LowPrecision | None:
    """The scenario's narrow format (checked by :func:`check_low_precision`), or None."""
    if fp4 is not None:
        return LowPrecision(fp4, params)
    return LowPrecision(fp8, params) if fp8 is not None else None


def check_scenario_precision(s: Scenario, device: Device) -> None:
    """:func:`check_low_precision` of the scenario's recipe on ``device``."""
    check_low_precision(s.training.fp8, s.training.fp4, device_name=device.name, peaks=device.peak_tflops,
                        mx_formats=device.mx_formats, dtype=s.model.dtype if s.model else "bf16",
                        params=s.training.low_precision_params)


def check_low_precision(fp8: str | None, fp4: str | None, *, device_name: str, peaks: dict[str, float],
                        mx_formats: bool, dtype: str, params: bool) -> None:
    """A ScenarioError naming the key when FP8 or FP4 cannot run as asked."""
    if fp8 and fp4:
        raise ScenarioError(f"training.fp8 ({fp8}) and training.fp4 ({fp4}) both set the linear layers' format; keep "
                            "one", field="training.fp4")
    recipe, key = (fp4, "training.fp4") if fp4 else (fp8, "training.fp8")
    if recipe is None:
        if params:
            raise ScenarioError("training.low_precision_params keeps the weights in FP8 or FP4, which needs "
                                "training.fp8 or training.fp4", field="training.low_precision_params")
        return
    peak = "fp4" if fp4 else "fp8"
    if peak not in peaks:
        raise ScenarioError(f"{key} needs a device with {peak.upper()} Tensor Cores; {device_name} has none: choose "
                            f"another hardware.device or drop {key}", field=key)
    if recipe in MX_RECIPES and not mx_formats:
        raise ScenarioError(f"{recipe} needs Blackwell's MX formats; {device_name} has none: use a Blackwell "
                            "device (b200, b300, gb200, gb300)" + (", or tensorwise, delayed or blockwise" if not fp4
                                                                   else ""), field=key)
    if dtype not in ("bf16", "fp16"):
        raise ScenarioError(f"{key} runs the linear layers narrow beside 16-bit values; model.dtype is {dtype}: set it "
                            "to bf16", field="model.dtype")
