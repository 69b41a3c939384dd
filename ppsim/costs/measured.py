"""Whether a scenario's costs take the device's measured figures (``hardware.gemm_curves``): the
GEMM and attention curves, the fused attention kernel's figures, the memory bandwidth a copy
sustains and the NVLink bandwidth collectives reach, each where the device has it, instead of the
flat efficiency and the datasheet's rates."""

from __future__ import annotations

from ppsim.inputs.hardware import Device
from ppsim.inputs.scenario import Scenario


def uses_curves(s: Scenario, device: Device) -> bool:
    """The costs take ``device``'s measured figures: asked for, not overridden by a flat
    ``hardware.efficiency``, and the device has some."""
    return s.hardware.gemm_curves and s.hardware.efficiency is None and device.measured
