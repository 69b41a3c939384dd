"""Whether a scenario's costs take the device's measured figures (``hardware.gemm_curves``): the
GEMM and attention curves, the fused attention kernel's figures, the memory bandwidth a copy
sustains and the NVLink bandwidth collectives reach, each where the device has it, instead of the
flat efficiency and the datasheet's rates."""

from __future__ import annotations

from ppsim.inputs.hardware import DEFAULT_ATTENTION_KERNEL, DEVICES, Device
from ppsim.inputs.scenario import Scenario


def uses_curves(s: Scenario, device: Device) -> bool:
    """The costs take ``device``'s measured figures: asked for, not overridden by a flat
    ``hardware.efficiency``, and the device has some."""
    return s.hardware.gemm_curves and s.hardware.efficiency is None and device.measured


#: a large linear layer's GEMM (about 8192 x 8192 x 8192): where a narrow curve is read for the note below
LAYER_GEMM_FLOPS = 1e12


def flat_narrow_notes(s: Scenario, device: Device) -> list[str]:
    """Where the device's flat efficiency prices the scenario's FP8 / FP4 GEMMs much faster (by more
    than a sixth) than the device's own measured narrow curve at a layer's sizes: one line saying
    so, and how to price them by the measurement."""
    from ppsim.costs.low_precision import scenario_precision

    tr = s.training
    narrow = scenario_precision(tr.fp8, tr.fp4, tr.low_precision_params)
    if narrow is None or uses_curves(s, device) or s.hardware.efficiency is not None:
        return []
    curve = device.gemm_fp4 if narrow.peak == "fp4" else device.gemm_fp8
    if curve is None or narrow.peak not in curve.dtypes:
        return []
    measured, flat = curve(LAYER_GEMM_FLOPS), device.flat_efficiency(narrow.peak)
    if measured >= flat * 5 / 6:
        return []
    peak = device.peak_tflops[narrow.peak]
    key = "training.fp4" if narrow.peak == "fp4" else "training.fp8"
    return [f"{key}: the flat {flat:.0%} prices {device.name}'s {narrow.peak.upper()} GEMMs at {flat * peak:,.0f} "
            f"TFLOP/s; its measured kernels reach {measured:.0%} of peak ({measured * peak:,.0f}) at a layer's sizes "
            f"({curve.source.split(' (')[0]}): set hardware.gemm_curves: true to price them so"]


def dispatch_notes(s: Scenario, device: Device) -> list[str]:
    """Where the scenario names DeepEP's or HybridEP's dispatch and the device has no measured share
    of its links for it: one line saying its all-to-alls run at the links' own rates, and how to give one."""
    which = s.training.moe_dispatcher
    if s.model is None or s.model.moe is None or which == "alltoall" or device.dispatch_rate(which) is not None:
        return []
    shares = [rate.nvlink for d in DEVICES.values() for _, rate in d.dispatch_measured]
    return [f"training.moe_dispatcher: {device.name} has no measured share of its links for {which}'s kernels, so "
            f"its all-to-alls are priced at the links' own rates (the devices measured reach {min(shares):.2f}-"
            f"{max(shares):.2f} of NVLink): give dispatch_measured in a hardware.device_file"]


def attention_kernel_notes(s: Scenario, device: Device) -> list[str]:
    """Where the scenario names a fused attention kernel the device's figures cannot price: one line
    saying its attention is priced as the default kernel's, and what to give."""
    if s.model is None or not s.training.flash_attention:
        return []
    kernel, dtype, curves = s.training.priced_attention_kernel, s.model.dtype, uses_curves(s, device)
    missing = device.kernel_unpriced(kernel, dtype, measured=curves)
    if missing is None:
        return []
    own = "" if curves or device.kernel_unpriced(kernel, dtype, measured=True) else \
        f", or price it by {kernel}'s own figures (hardware.gemm_curves: true)"
    key = "training.fp8_attention" if s.training.fp8_attention else "training.attention_kernel"
    return [f"{key}: {device.name} has no measured figures to price {kernel} by, so its attention "
            f"is priced as {DEFAULT_ATTENTION_KERNEL}'s: give {missing} in a hardware.device_file{own}"]
