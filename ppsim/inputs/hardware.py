"""The device catalogue (``ppsim/data/devices.yaml``) and user-supplied device files.

Figures are vendor datasheet values (dense, no sparsity). ``efficiency`` is the fraction of peak a
large GPT matmul reaches in a training step; a scenario may override it (``hardware.efficiency``).
Where an entry gives its best matmul's measured rate instead (``matmul_best``, per dtype), the
flat figure of each dtype is :data:`STEP_SHARE` of that rate (:meth:`Device.flat_efficiency`). A
device may also carry measured curves (:class:`Curve`, each with its ``source``): ``gemm``, the
fraction of peak one GEMM reaches as a function of its FLOPs (2mnk), and ``attention``, that of the
attention's score and context matmuls (unfused, one per head) as a function of the head dimension;
and ``flash_attention`` (:class:`FusedAttention`), the fraction of peak of the fused attention
kernel in its forward and its backward (``attention_kernels``: other kernels', by name); with
``hardware.gemm_curves`` the analytic cost model prices each matmul by them, falling back to
``efficiency`` where a device has no such figure and for a dtype it was not measured in;
``hardware.efficiency`` overrides all of them. A scenario may also describe its own device in a
YAML file of the catalogue's format (``hardware.device_file``: one entry, or several with
``hardware.device`` naming one).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from ppsim.errors import ScenarioError
from ppsim.inputs.yaml_files import load_yaml, problem

CATALOGUE = Path(__file__).parent / "data" / "devices.yaml"
#: the fused attention kernels a scenario may name (training.attention_kernel): cuDNN's (Transformer
#: Engine's fused attention, the catalogue's ``flash_attention`` figures) and the flash-attn package's
#: FlashAttention-2 (``attention_kernels.flash2``)
ATTENTION_KERNELS = ("cudnn", "flash2")
DEFAULT_ATTENTION_KERNEL = "cudnn"
#: cuDNN's kernel with FP8 inputs (per-tensor scaled, and MXFP8): what a scenario's
#: training.fp8_attention prices its attention by (``attention_kernels.cudnn_fp8`` / ``cudnn_mxfp8``)
FP8_ATTENTION_KERNELS = ("cudnn_fp8", "cudnn_mxfp8")
#: the share of a device's best matmul rate (``matmul_best``) its matmuls reach in a training step,
#: one figure for every device: the H100's flat efficiency before devices had their best matmul
#: (0.55) over the H100's measured best bf16 matmul, 794.5 of 989 TFLOP/s (docs/calibration.md,
#: "Each device's flat efficiency from its best matmul"; the A100's own 0.6 is this share of its
#: best within 1 %, tests/inputs/test_matmul_best.py)
STEP_SHARE = 0.55 / (794.5 / 989)


def step_share_of(best_tflops: float, peak_tflops: float) -> float:
    """The fraction of a peak of ``peak_tflops`` a step's matmuls reach where the best matmul
    reaches ``best_tflops``: :data:`STEP_SHARE` of it."""
    return STEP_SHARE * best_tflops / peak_tflops


@dataclass(frozen=True)
class Curve:
    """A measured fraction of peak as a function of a size: piecewise linear in log(size) between
    the ``points`` (size, fraction), each end held flat beyond the last point on its side."""

    points: tuple[tuple[float, float], ...]  #: (size, fraction of peak), sizes strictly increasing
    source: str  #: where the measurements come from
    dtypes: tuple[str, ...] = ("bf16", "fp16")  #: the dtypes it was measured in (others use the flat efficiency)

    def __call__(self, size: float) -> float:
        pts = self.points
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_right([x for x, _ in pts], size)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return y0 + w * (y1 - y0)


#: every FP8 device's FP8 peak over its 16-bit one (Hopper's and Blackwell's Tensor Cores alike)
FP8_OVER_16_BIT = 2.0


@dataclass(frozen=True)
class FusedAttention:
    """The fraction of peak a fused (Flash) attention kernel reaches on a causal model, its forward
    and its backward (the input grads and the recomputed scores), counted on the score and context
    entries it computes (the causal half, or a sliding window's band): one figure per pass, or
    ``points`` measured by shape, looked up by :meth:`fraction`."""

    source: str  #: where the measurements come from
    forward: float = 0.0  #: the one figure of each pass, without ``points``
    backward: float = 0.0
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    #: (head dim, keys a query attends on average, forward, backward) of each measured shape; a head
    #: dim of (query/key + value) / 2 where the two differ (multi-head latent attention's kernels)
    points: tuple[tuple[float, float, float, float], ...] = ()
    #: where the kernel's backward runs a sliding window's whole causal triangle, not its band (cuDNN's
    #: FP8 backward): (keys of the causal half, backward fraction) measured on windows, counted on
    #: the triangle; empty: its backward runs the band, as the forward does
    window_backward: tuple[tuple[float, float], ...] = ()
    #: the kernel multiplies FP8 inputs (``fp8``: Transformer Engine's FP8 attention), its fractions
    #: still of the model dtype's peak and so up to :data:`FP8_OVER_16_BIT` of it; "": 16-bit inputs
    inputs: str = ""

    @property
    def ceiling(self) -> float:
        """The highest fraction of the 16-bit peak the kernel can reach: its inputs' peak over it."""
        return FP8_OVER_16_BIT if self.inputs == "fp8" else 1.0

    def window_backward_fraction(self, keys: float) -> float:
        """The fraction of peak of a window's backward run as the whole causal triangle of a
        sequence whose causal half is ``keys`` (:attr:`window_backward`, log-linear in the keys)."""
        return Curve(self.window_backward, self.source)(keys)

    @cached_property
    def _series(self) -> tuple[tuple[float, float, float, Curve, Curve], ...]:
        """Each measured head dim's (head dim, fewest keys, most keys, forward curve, backward curve)."""
        dims = sorted({p[0] for p in self.points})
        found = []
        for dim in dims:
            rows = sorted(p[1:] for p in self.points if p[0] == dim)
            found.append((dim, rows[0][0], rows[-1][0], Curve(tuple((k, f) for k, f, _ in rows), self.source),
                          Curve(tuple((k, b) for k, _, b in rows), self.source)))
        return tuple(found)

    def fraction(self, head_dim: float, keys: float, *, backward: bool) -> float:
        """The fraction of peak of a kernel of ``head_dim`` whose queries attend ``keys`` keys on
        average: the one figure of the pass without ``points``; else the measured head dims whose
        keys span ``keys`` (between two of them, log-linear in the head dim; beyond them, the
        nearest), each piecewise log-linear in the keys; where none spans them, the nearest head
        dim's figure at its own ends."""
        if not self.points:
            return self.backward if backward else self.forward
        series = self._series
        spanning = [x for x in series if x[1] <= keys <= x[2]] or [min(series, key=lambda x: abs(math.log(x[0] / head_dim)))]
        below = [x for x in spanning if x[0] <= head_dim]
        above = [x for x in spanning if x[0] >= head_dim]
        lo, hi = (below[-1] if below else above[0]), (above[0] if above else below[-1])
        at_lo, at_hi = ((x[4] if backward else x[3])(keys) for x in (lo, hi))
        if lo[0] == hi[0]:
            return at_lo
        w = math.log(head_dim / lo[0]) / math.log(hi[0] / lo[0])
        return at_lo + w * (at_hi - at_lo)


@dataclass(frozen=True)
class Rate:
    """A rate measured on the device (GB/s), with where the measurement comes from."""

    gb_s: float
    source: str


@dataclass(frozen=True)
class LaunchTime:
    """The host's time to launch one kernel eagerly (an op through PyTorch's dispatcher), measured on
    the device's host CPU, with where the measurement comes from."""

    us: float
    source: str


@dataclass(frozen=True)
class MatmulBest:
    """The highest rate a matmul reached on the device in a search over shapes, per dtype (TFLOP/s),
    with where the measurement comes from."""

    tflops: tuple[tuple[str, float], ...]  #: (dtype, TFLOP/s)
    source: str

    def get(self, dtype: str) -> float | None:
        return dict(self.tflops).get(dtype)


@dataclass(frozen=True)
class DispatchRate:
    """The share of a link's rate a MoE dispatcher's kernels reach (dispatch and combine alike),
    measured: over NVLink (``nvlink``) and, where measured, out of the NIC (``network``: points of
    (NVLink domains the group spans, share), linear between them, the nearest beyond)."""

    nvlink: float
    source: str
    network: tuple[tuple[float, float], ...] = ()

    def network_share(self, domains: int) -> float:
        """The NIC's share of its rate at ``domains`` domains: 1 where nothing was measured."""
        pts = self.network
        if not pts:
            return 1.0
        if domains <= pts[0][0]:
            return pts[0][1]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
            if domains <= x1:
                return y0 + (y1 - y0) * (domains - x0) / (x1 - x0)
        return pts[-1][1]


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    peak_tflops: dict[str, float]  #: dense peak per dtype (bf16, fp16, fp32; fp8, fp4 where the device has them)
    memory_gb: float
    hbm_gb_s: float  #: memory bandwidth, used for the (memory-bound) optimizer step
    efficiency: float  #: fraction of peak GPT-sized matmuls reach in a step (the 16-bit figure; flat_efficiency)
    intra_node_gb_s: float  #: per-direction bandwidth to a device in the same node (NVLink)
    intra_node_latency_us: float
    inter_node_gb_s: float  #: per-device NIC bandwidth to another node
    inter_node_latency_us: float
    mx_formats: bool = False  #: Tensor Cores with MX block-scaled formats (MXFP8: Blackwell)
    host_link_gb_s: float | None = None  #: per direction to host memory (PCIe, NVLink-C2C): activation offloading
    gemm: Curve | None = None  #: fraction of peak per GEMM, by its FLOPs (2mnk)
    attention: Curve | None = None  #: fraction of peak of the unfused attention matmuls, by head dimension
    #: fraction of peak of the default fused attention kernel (``cudnn``: Transformer Engine's), per pass
    flash_attention: FusedAttention | None = None
    #: the other fused attention kernels' figures, by name (``flash2``)
    attention_kernels: tuple[tuple[str, FusedAttention], ...] = ()
    gemm_fp8: Curve | None = None  #: fraction of the FP8 peak per FP8 GEMM, by its FLOPs
    gemm_fp4: Curve | None = None  #: fraction of the FP4 peak per FP4 GEMM, by its FLOPs
    sms: int | None = None  #: streaming multiprocessors: what communication kernels beside compute take a share of
    hbm_copy: Rate | None = None  #: the memory bandwidth a copy sustains (read + write), measured
    #: the per-direction bandwidth collectives reach between devices of a node (NVLink), measured
    intra_node_measured: Rate | None = None
    #: per MoE dispatcher (``deepep``, ``hybridep``): the share of each link's rate its kernels reach
    dispatch_measured: tuple[tuple[str, DispatchRate], ...] = ()
    #: the host's time to launch one eager kernel (ppsim.costs.launches); None: not measured, not priced
    launch: LaunchTime | None = None
    #: the best matmul rate measured per dtype: the flat efficiencies' base (:meth:`flat_efficiency`)
    matmul_best: MatmulBest | None = None

    def flat_efficiency(self, dtype: str) -> float:
        """The fraction of ``dtype``'s peak a step's matmuls reach under the flat pricing:
        :data:`STEP_SHARE` of the device's best ``dtype`` matmul where it was measured, else
        ``efficiency``."""
        return self._flat_efficiencies.get(dtype, self.efficiency)

    @cached_property
    def _flat_efficiencies(self) -> dict[str, float]:
        """:meth:`flat_efficiency` of each dtype whose best matmul was measured (a search asks for it
        once per GEMM of every plan)."""
        measured = dict(self.matmul_best.tflops) if self.matmul_best is not None else {}
        return {dtype: step_share_of(best, self.peak_tflops[dtype]) for dtype, best in measured.items()}

    def dispatch_rate(self, dispatcher: str) -> DispatchRate | None:
        """The measured share of each link's rate ``dispatcher``'s kernels reach (None: not measured)."""
        return dict(self.dispatch_measured).get(dispatcher)

    @property
    def measured(self) -> bool:
        """The device has a measured figure for the curves' pricing (``hardware.gemm_curves``)."""
        return bool(self.attention_kernels) or any(
            m is not None for m in (self.gemm, self.attention, self.flash_attention, self.gemm_fp8, self.gemm_fp4,
                                    self.hbm_copy, self.intra_node_measured))

    def memory_gb_s(self, measured: bool) -> float:
        """The memory bandwidth memory-bound kernels run at: the measured copy's where ``measured``
        figures are asked for and the device has one, else the datasheet's."""
        return self.hbm_copy.gb_s if measured and self.hbm_copy is not None else self.hbm_gb_s

    def collective_rate(self) -> float:
        """The per-direction bandwidth collectives reach between devices of a node: the measured
        figure where the device has one (no collective reaches the datasheet's rate), else the
        datasheet's. Under both pricings: the flat efficiency is a figure of matmuls alone."""
        found = self.intra_node_measured
        return found.gb_s if found is not None else self.intra_node_gb_s

    def dispatch_on(self, dispatcher: str, link_gb_s: float | None) -> DispatchRate | None:
        """``dispatcher``'s measured shares (:meth:`dispatch_rate`) as shares of a node's link priced
        at ``link_gb_s`` (the device's :meth:`collective_rate`) instead of the datasheet rate they were
        measured against; None for ``link_gb_s``: a link the scenario gives, taken at its shares."""
        rate = self.dispatch_rate(dispatcher)
        if rate is None or link_gb_s is None or link_gb_s == self.intra_node_gb_s:
            return rate
        return replace(rate, nvlink=rate.nvlink * self.intra_node_gb_s / link_gb_s)

    def peak_flops(self, dtype: str) -> float:
        return self.peak_tflops[dtype] * 1e12

    def gemm_efficiency(self, m: float, n: float, k: float, dtype: str) -> float:
        """The fraction of peak an (m x n) x (n x k) GEMM reaches: the ``gemm`` curve (``gemm_fp8``
        for ``fp8``, ``gemm_fp4`` for ``fp4``) at its FLOPs (2mnk), or the flat ``efficiency``
        without a curve for ``dtype``."""
        curve = {"fp8": self.gemm_fp8, "fp4": self.gemm_fp4}.get(dtype, self.gemm)
        if curve is None or dtype not in curve.dtypes:
            return self.flat_efficiency(dtype)
        return curve(2.0 * m * n * k)

    def attention_efficiency(self, head_dim: float, dtype: str) -> float:
        """The fraction of peak of the attention's score and context matmuls at ``head_dim``: the
        ``attention`` curve, or the flat ``efficiency`` without one for ``dtype``."""
        if self.attention is None or dtype not in self.attention.dtypes:
            return self.flat_efficiency(dtype)
        return self.attention(head_dim)

    def fused_attention(self, kernel: str = DEFAULT_ATTENTION_KERNEL) -> FusedAttention | None:
        """The measured figures of fused attention ``kernel`` (None: not measured on this device)."""
        if kernel == DEFAULT_ATTENTION_KERNEL:
            return self.flash_attention
        return dict(self.attention_kernels).get(kernel)

    def flash_attention_efficiency(self, dtype: str, *, backward: bool, head_dim: float, keys: float,
                                   kernel: str = DEFAULT_ATTENTION_KERNEL) -> float:
        """The fraction of peak of fused attention ``kernel`` in the forward or the ``backward``, at
        ``head_dim`` with queries attending ``keys`` keys on average: its measured figures
        (:meth:`FusedAttention.fraction`), the default kernel's where it has none, or the flat
        ``efficiency`` without either for ``dtype``."""
        fused = self.flash_attention if self.kernel_unpriced(kernel, dtype, measured=True) else \
            self.fused_attention(kernel)
        if fused is None or dtype not in fused.dtypes:
            return self.flat_efficiency(dtype)
        return fused.fraction(head_dim, keys, backward=backward)

    def kernel_unpriced(self, kernel: str, dtype: str, *, measured: bool) -> str | None:
        """What this device lacks to price fused attention ``kernel`` in ``dtype`` (None: nothing,
        or the default kernel): under the ``measured`` figures, the kernel's own in that dtype;
        under the flat efficiency, the kernel's and the default kernel's both in it (the one's speed
        over the other's scales it)."""
        if kernel == DEFAULT_ATTENTION_KERNEL:
            return None
        fused, default = self.fused_attention(kernel), self.flash_attention
        if fused is None:
            return f"attention_kernels.{kernel}"
        if dtype not in fused.dtypes:
            return f"attention_kernels.{kernel} in {dtype} (measured in {', '.join(fused.dtypes)})"
        if measured:
            return None
        if default is None:
            return f"flash_attention ({DEFAULT_ATTENTION_KERNEL}'s figures, which the flat efficiency is scaled from)"
        if dtype not in default.dtypes:
            return (f"flash_attention in {dtype} ({DEFAULT_ATTENTION_KERNEL}'s figures, measured in "
                    f"{', '.join(default.dtypes)}, which the flat efficiency is scaled from)")
        return None

    def kernel_ceiling(self, kernel: str) -> float:
        """The highest fraction of the 16-bit peak fused attention ``kernel`` can reach (1 but for a
        kernel of FP8 inputs: :attr:`FusedAttention.ceiling`)."""
        fused = self.fused_attention(kernel)
        return fused.ceiling if fused is not None else 1.0

    def kernel_speed(self, kernel: str, dtype: str, *, backward: bool, head_dim: float, keys: float) -> float:
        """Fused attention ``kernel``'s speed over the default kernel's at one shape, both measured
        on this device (1.0 where either is not, in ``dtype``): what the flat efficiency, a figure
        of steps run with the default kernel, is scaled by for another kernel."""
        if kernel == DEFAULT_ATTENTION_KERNEL:
            return 1.0
        fused, default = self.fused_attention(kernel), self.flash_attention
        if self.kernel_unpriced(kernel, dtype, measured=False) is not None or fused is None or default is None:
            return 1.0
        return fused.fraction(head_dim, keys, backward=backward) / default.fraction(head_dim, keys, backward=backward)


#: the keys of a device entry, each with its valid range: (lowest, highest, whether the lowest is
#: allowed); the rates that divide a size have a least value far below any machine's (a kFLOP/s, a
#: kB/s), so that a time computed from them stays a number (2e-309 GB/s would make a transfer infinite)
_RANGES: dict[str, tuple[float, float, bool]] = {
    "peak_tflops": (1e-9, 1e6, True), "memory_gb": (0.0, 1e5, False), "hbm_gb_s": (1e-6, 1e6, True),
    "efficiency": (1e-6, 1.0, True), "bandwidth_gb_s": (1e-6, 1e6, True), "latency_us": (0.0, 1e7, True),
    "host_link_gb_s": (1e-6, 1e6, True),
}
REQUIRED_PEAKS = ("bf16", "fp16", "fp32")  #: every device has these
OPTIONAL_PEAKS = ("fp8", "fp4")  #: a device with FP8 (Hopper, Blackwell) or FP4 (Blackwell) Tensor Cores
_KEYS = {"description", "peak_tflops", "memory_gb", "hbm_gb_s", "efficiency", "intra_node", "inter_node", "gemm",
         "attention", "flash_attention", "mx_formats", "host_link_gb_s", "gemm_fp8", "gemm_fp4", "hbm_copy",
         "intra_node_measured", "sms", "dispatch_measured", "attention_kernels", "launch", "matmul_best"}
_CURVE_KEYS = {"source", "dtypes", "points"}
_FUSED_KEYS = {"source", "dtypes", "forward", "backward", "points", "window_backward", "inputs"}


def _measured(name: str, key: str, entry: Any, source: str, keys: set[str],
              dtypes_allowed: tuple[str, ...] = ("bf16", "fp16", "fp32")) -> tuple[str, tuple[str, ...]]:
    """The ``source`` and ``dtypes`` of a measured entry ``key`` of device ``name``, checked: a
    mapping of ``keys`` only, a source, dtypes of ``dtypes_allowed`` (the first two when absent)."""
    def bad(what: str) -> ScenarioError:
        return ScenarioError(f"{source}: device {name!r}: {key} {what}", field="hardware.device_file")

    if not isinstance(entry, dict):
        raise bad(f"is a mapping of {', '.join(sorted(keys))}")
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise bad(f"has an unknown key {unknown[0]!r}; the keys are {', '.join(sorted(keys))}")
    where = entry.get("source")
    if not isinstance(where, str) or not where.strip():
        raise bad("needs a source: where its measurements come from")
    dtypes = entry.get("dtypes", list(dtypes_allowed[:2]))
    if not isinstance(dtypes, list) or not dtypes or any(d not in dtypes_allowed for d in dtypes):
        raise bad(f"dtypes is {dtypes!r}; it must be a list of {', '.join(dtypes_allowed)}")
    return where.strip(), tuple(dtypes)


def _fused(name: str, entry: Any, source: str, key: str = "flash_attention", fp8: bool = False
           ) -> FusedAttention | None:
    """Device ``name``'s figures of a fused attention kernel under ``key`` (None when absent),
    checked: a fraction of peak in (0, 1] for each pass, or ``points`` of [head dim, keys, forward,
    backward] (sizes > 0, no shape twice, fractions in (0, 1])."""
    if entry is None:
        return None
    where, dtypes = _measured(name, key, entry, source, _FUSED_KEYS)

    def bad(what: str) -> ScenarioError:
        return ScenarioError(f"{source}: device {name!r}: {key}{what}", field="hardware.device_file")

    inputs = entry.get("inputs", "")
    if not fp8 and ("inputs" in entry or "window_backward" in entry):
        raise bad(" gives inputs or window_backward, which only cuDNN's FP8 kernels carry "
                  f"(attention_kernels.{' and '.join(FP8_ATTENTION_KERNELS)}): drop them")
    if fp8 and inputs != "fp8":
        raise bad(f".inputs is {inputs!r}; an FP8 kernel's figures say inputs: fp8 (fractions of the 16-bit peak, "
                  f"up to {FP8_OVER_16_BIT:g} of it)")
    ceiling = FusedAttention(source="", inputs=inputs).ceiling

    def fraction(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= ceiling

    if "points" in entry:
        if "forward" in entry or "backward" in entry:
            raise bad(" gives points and forward/backward: give one of them (points: figures by shape)")
        points = entry["points"]
        if not isinstance(points, list) or not points:
            raise bad(".points must be a list of [head dim, keys, forward, backward] rows")
        rows: list[tuple[float, float, float, float]] = []
        for p in points:
            ok = (isinstance(p, list) and len(p) == 4
                  and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p)
                  and p[0] > 0 and p[1] > 0 and fraction(p[2]) and fraction(p[3]))
            if not ok:
                raise bad(f".points has {p!r}; each row is [head dim > 0, keys > 0, forward, backward], the "
                          f"last two fractions of peak > 0 and <= {ceiling:g}")
            if any(r[0] == p[0] and r[1] == p[1] for r in rows):
                raise bad(f".points gives head dim {p[0]} at {p[1]} keys twice; give each shape once")
            rows.append((float(p[0]), float(p[1]), float(p[2]), float(p[3])))
        return FusedAttention(source=where, dtypes=dtypes, points=tuple(rows),
                              window_backward=_window_backward(entry.get("window_backward"), bad, fraction,
                                                               ceiling),
                              inputs=inputs)
    passes = []
    for pass_ in ("forward", "backward"):
        value = entry.get(pass_)
        if not fraction(value):
            raise bad(f".{pass_} is {value!r}; it must be a fraction of peak > 0 and <= {ceiling:g} (or give points)")
        passes.append(float(value))
    if "window_backward" in entry:
        raise bad(".window_backward goes with points (figures by shape); give points too, or drop it")
    return FusedAttention(source=where, forward=passes[0], backward=passes[1], dtypes=dtypes, inputs=inputs)


def _window_backward(points: Any, bad: Callable[[str], ScenarioError], fraction: Callable[[Any], bool],
                     ceiling: float) -> tuple[tuple[float, float], ...]:
    """A fused kernel's ``window_backward`` points, checked: [keys > 0, fraction], keys increasing."""
    if points is None:
        return ()
    ok = isinstance(points, list) and bool(points) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], (int, float)) and not isinstance(p[0], bool)
        and math.isfinite(p[0]) and p[0] > 0 and fraction(p[1]) for p in points)
    if not ok or any(a[0] >= b[0] for a, b in zip(points, points[1:], strict=False)):
        raise bad(f".window_backward is {points!r}; give [keys > 0, fraction of peak > 0 and <= {ceiling:g}] rows, "
                  "the keys increasing")
    return tuple((float(k), float(f)) for k, f in points)


def _kernels(name: str, entry: Any, source: str) -> tuple[tuple[str, FusedAttention], ...]:
    """Device ``name``'s figures of the fused attention kernels other than the default one
    (``attention_kernels``: a mapping of kernel name to figures in ``flash_attention``'s format), checked."""
    if entry is None:
        return ()
    others = [k for k in ATTENTION_KERNELS + FP8_ATTENTION_KERNELS if k != DEFAULT_ATTENTION_KERNEL]
    if not isinstance(entry, dict) or not entry:
        raise ScenarioError(f"{source}: device {name!r}: attention_kernels is a mapping of kernel name ({', '.join(others)}) "
                            "to its figures, in flash_attention's format", field="hardware.device_file")
    found = []
    for kernel, figures in entry.items():
        if kernel not in others:
            why = " (flash_attention holds its figures)" if kernel == DEFAULT_ATTENTION_KERNEL else ""
            raise ScenarioError(f"{source}: device {name!r}: attention_kernels has {kernel!r}{why}; the kernels are "
                                f"{', '.join(others)}", field="hardware.device_file")
        fused = _fused(name, figures, source, f"attention_kernels.{kernel}", fp8=kernel in FP8_ATTENTION_KERNELS)
        if fused is None:
            raise ScenarioError(f"{source}: device {name!r}: attention_kernels.{kernel} is empty; give its figures in "
                                "flash_attention's format (source, and forward and backward or points)",
                                field="hardware.device_file")
        found.append((kernel, fused))
    return tuple(found)


def _curve(name: str, key: str, entry: Any, source: str,
           dtypes_allowed: tuple[str, ...] = ("bf16", "fp16", "fp32")) -> Curve | None:
    """The ``key`` curve of device ``name`` (None when absent), checked: a source, dtypes the device
    knows, and at least two [size, fraction] points, sizes > 0 and strictly increasing, fractions in (0, 1]."""
    if entry is None:
        return None

    def bad(what: str) -> ScenarioError:
        return ScenarioError(f"{source}: device {name!r}: {key} {what}", field="hardware.device_file")

    where, dtypes = _measured(name, key, entry, source, _CURVE_KEYS, dtypes_allowed)
    points = entry.get("points")
    if not isinstance(points, list) or len(points) < 2:
        raise bad("points must be a list of at least two [size, fraction of peak] pairs")
    pairs = []
    for p in points:
        ok = (isinstance(p, list) and len(p) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in p)
              and p[0] > 0 and 0 < p[1] <= 1)
        if not ok:
            raise bad(f"point {p!r} must be [size > 0, fraction of peak > 0 and <= 1]")
        pairs.append((float(p[0]), float(p[1])))
    if any(b[0] <= a[0] for a, b in zip(pairs, pairs[1:])):
        raise bad("points must have strictly increasing sizes")
    return Curve(points=tuple(pairs), source=where, dtypes=dtypes)


def _figure(name: str, key: str, entry: Any, source: str, unit: str, meaning: str,
            bounds: tuple[float, float, bool]) -> tuple[float, str] | None:
    """Device ``name``'s measured figure ``key`` as (value, source) (None when absent), checked: a
    mapping of ``unit`` (``meaning``) within ``bounds`` (lowest, highest, whether the lowest is allowed)
    and a source."""
    if entry is None:
        return None
    if not isinstance(entry, dict) or set(entry) != {unit, "source"}:
        raise ScenarioError(f"{source}: device {name!r}: {key} is a mapping of {unit} ({meaning}) and source "
                            "(where it was measured)", field="hardware.device_file")
    value, where = entry[unit], entry["source"]
    low, high, inclusive = bounds
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and (value >= low if inclusive else value > low) and value <= high):
        raise ScenarioError(f"{source}: device {name!r}: {key}.{unit} is {value!r}; it must be a number "
                            f"{'>=' if inclusive else '>'} {low:g} and <= {high:g}", field="hardware.device_file")
    if not isinstance(where, str) or not where.strip():
        raise ScenarioError(f"{source}: device {name!r}: {key} needs a source: where it was measured",
                            field="hardware.device_file")
    return float(value), where.strip()


def _rate(name: str, key: str, entry: Any, source: str) -> Rate | None:
    """Device ``name``'s measured rate ``key`` (None when absent), checked: ``gb_s`` > 0 and a source."""
    low, high, _ = _RANGES["hbm_gb_s"]
    figure = _figure(name, key, entry, source, "gb_s", "the measured GB/s", (low, high, True))
    return None if figure is None else Rate(gb_s=figure[0], source=figure[1])


def _launch(name: str, entry: Any, source: str) -> LaunchTime | None:
    """Device ``name``'s measured launch time (None when absent), checked: ``us`` in (0, 10^4] and a source."""
    figure = _figure(name, "launch", entry, source, "us", "the host's microseconds to launch one kernel",
                     (0.0, 1e4, False))
    return None if figure is None else LaunchTime(us=figure[0], source=figure[1])


def _matmul_best(name: str, entry: dict[str, Any], source: str) -> tuple[float, MatmulBest | None]:
    """Device ``name``'s flat efficiency and best matmul rates, checked: ``efficiency`` or
    ``matmul_best`` (a source and TFLOP/s per dtype of its peaks, each > 0 and at most that peak,
    bf16 among them), not both."""
    def bad(what: str) -> ScenarioError:
        return ScenarioError(f"{source}: device {name!r}: {what}", field="hardware.device_file")

    best = entry.get("matmul_best")
    if best is None:
        if "efficiency" not in entry:
            raise bad("give efficiency (the fraction of peak its matmuls reach in a step) or matmul_best "
                      "(its best matmul's measured TFLOP/s per dtype, with a source)")
        return float(entry["efficiency"]), None
    if "efficiency" in entry:
        raise bad("give efficiency or matmul_best, not both: the flat efficiency is a share of the best matmul")
    given = entry.get("peak_tflops")
    peaks: dict[str, Any] = given if isinstance(given, dict) else {}
    if not isinstance(best, dict) or "bf16" not in best:
        raise bad("matmul_best maps dtypes (bf16 among them) to the best matmul's measured TFLOP/s, with a source")
    where = best.get("source")
    if not isinstance(where, str) or not where.strip():
        raise bad("matmul_best needs a source: where its measurements come from")
    rates = []
    for dtype, value in best.items():
        if dtype == "source":
            continue
        if dtype not in peaks:
            raise bad(f"matmul_best.{dtype}: the device has no {dtype} peak; give rates of its peak_tflops' dtypes")
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= peaks[dtype]
        if not ok:
            raise bad(f"matmul_best.{dtype} is {value!r}; it must be TFLOP/s > 0 and at most the {dtype} peak "
                      f"({peaks[dtype]:g})")
        rates.append((str(dtype), float(value)))
    return step_share_of(best["bf16"], peaks["bf16"]), MatmulBest(tuple(rates), where.strip())


DISPATCHERS = ("deepep", "hybridep")  #: the dispatchers a device can have measured rates of


def _dispatch(name: str, entry: Any, source: str) -> tuple[tuple[str, DispatchRate], ...]:
    """Device ``name``'s measured dispatchers, checked: each a mapping of nvlink (a share in (0, 1]),
    source and, optionally, network points [domains, share] with increasing domains."""
    if entry is None:
        return ()

    def bad(what: str) -> ScenarioError:
        return ScenarioError(f"{source}: device {name!r}: dispatch_measured{what}", field="hardware.device_file")

    def share(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1

    if not isinstance(entry, dict) or not entry:
        raise bad(f" maps a dispatcher ({', '.join(DISPATCHERS)}) to the share of each link's rate its kernels reach")
    out: list[tuple[str, DispatchRate]] = []
    for which, figures in entry.items():
        if which not in DISPATCHERS:
            raise bad(f" has an unknown dispatcher {which!r}; use {' or '.join(DISPATCHERS)}")
        if not isinstance(figures, dict) or not {"nvlink", "source"} <= set(figures) <= {"nvlink", "network", "source"}:
            raise bad(f".{which} is a mapping of nvlink (a share of the rate), source and optionally network")
        if not share(figures["nvlink"]):
            raise bad(f".{which}.nvlink is {figures['nvlink']!r}; it must be a share of the rate, > 0 and <= 1")
        where = figures["source"]
        if not isinstance(where, str) or not where.strip():
            raise bad(f".{which} needs a source: where it was measured")
        points = figures.get("network", [])
        form = f".{which}.network is a list of [NVLink domains, share of the NIC's rate] points"
        if not isinstance(points, list):
            raise bad(form)
        for k, pt in enumerate(points):
            if not (isinstance(pt, list) and len(pt) == 2):
                raise bad(f"{form}; point {k + 1} is {pt!r}")
            if not (isinstance(pt[0], int) and not isinstance(pt[0], bool) and pt[0] >= 2):
                raise bad(f".{which}.network point {k + 1}: {pt[0]!r} domains; give a whole number >= 2")
            if not share(pt[1]):
                raise bad(f".{which}.network point {k + 1}: share {pt[1]!r}; it must be > 0 and <= 1")
            if k and pt[0] <= points[k - 1][0]:
                raise bad(f".{which}.network point {k + 1}: {pt[0]} domains after {points[k - 1][0]}; give the "
                          "points in increasing domains")
        out.append((which, DispatchRate(float(figures["nvlink"]), where.strip(),
                                        tuple((float(d), float(v)) for d, v in points))))
    return tuple(out)


def _count(name: str, key: str, value: Any, source: str) -> int | None:
    """Device ``name``'s whole number ``key`` (None when absent), checked: at least 1."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ScenarioError(f"{source}: device {name!r}: {key} is {value!r}; it must be a whole number >= 1",
                            field="hardware.device_file")
    return value


def _flag(name: str, key: str, value: Any, source: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(f"{source}: device {name!r}: {key} is {value!r}; it must be true or false",
                            field="hardware.device_file")
    return value


def _check_ranges(name: str, entry: dict[str, Any], source: str) -> None:
    """Refuse, naming the key, an unknown key or a number outside its range (NaN and inf included)."""
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise ScenarioError(f"{source}: device {name!r} has an unknown key {unknown[0]!r}; the keys are "
                            f"{', '.join(sorted(_KEYS))}", field="hardware.device_file")

    def check(key: str, value: Any, rule: str) -> None:
        low, high, inclusive = _RANGES[rule]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
            (value >= low if inclusive else value > low) and value <= high)
        if not ok:
            bound = f"{'>=' if inclusive else '>'} {low:g} and <= {high:g}"
            raise ScenarioError(f"{source}: device {name!r}: {key} is {value!r}; it must be a number {bound}",
                                field="hardware.device_file")

    for key in ("memory_gb", "hbm_gb_s", "efficiency", "host_link_gb_s"):
        if key in entry:
            check(key, entry[key], key)
    if isinstance(entry.get("peak_tflops"), dict):
        for dtype, value in entry["peak_tflops"].items():
            check(f"peak_tflops.{dtype}", value, "peak_tflops")
    for link in ("intra_node", "inter_node"):
        if isinstance(entry.get(link), dict):
            for key, value in entry[link].items():
                if key not in ("bandwidth_gb_s", "latency_us"):
                    raise ScenarioError(f"{source}: device {name!r}: unknown key {link}.{key}; use bandwidth_gb_s and "
                                        "latency_us", field="hardware.device_file")
                check(f"{link}.{key}", value, key)


def _device(name: str, entry: Any, source: str) -> Device:
    if not isinstance(entry, dict):
        raise ScenarioError(f"{source}: device {name!r} is a mapping of its figures; see ppsim/data/devices.yaml for "
                            "the format", field="hardware.device_file")
    _check_ranges(name, entry, source)
    efficiency, best = _matmul_best(name, entry, source)
    try:
        return Device(
            name=name,
            description=str(entry.get("description", name)),
            peak_tflops={k: float(entry["peak_tflops"][k]) for k in (*REQUIRED_PEAKS, *OPTIONAL_PEAKS)
                         if k in REQUIRED_PEAKS or k in entry["peak_tflops"]},
            memory_gb=float(entry["memory_gb"]),
            hbm_gb_s=float(entry["hbm_gb_s"]),
            efficiency=efficiency,
            intra_node_gb_s=float(entry["intra_node"]["bandwidth_gb_s"]),
            intra_node_latency_us=float(entry["intra_node"]["latency_us"]),
            inter_node_gb_s=float(entry["inter_node"]["bandwidth_gb_s"]),
            inter_node_latency_us=float(entry["inter_node"]["latency_us"]),
            mx_formats=_flag(name, "mx_formats", entry.get("mx_formats", False), source),
            host_link_gb_s=float(entry["host_link_gb_s"]) if "host_link_gb_s" in entry else None,
            gemm=_curve(name, "gemm", entry.get("gemm"), source),
            attention=_curve(name, "attention", entry.get("attention"), source),
            flash_attention=_fused(name, entry.get("flash_attention"), source),
            attention_kernels=_kernels(name, entry.get("attention_kernels"), source),
            gemm_fp8=_curve(name, "gemm_fp8", entry.get("gemm_fp8"), source, ("fp8",)),
            gemm_fp4=_curve(name, "gemm_fp4", entry.get("gemm_fp4"), source, ("fp4",)),
            sms=_count(name, "sms", entry.get("sms"), source),
            hbm_copy=_rate(name, "hbm_copy", entry.get("hbm_copy"), source),
            intra_node_measured=_rate(name, "intra_node_measured", entry.get("intra_node_measured"), source),
            dispatch_measured=_dispatch(name, entry.get("dispatch_measured"), source),
            launch=_launch(name, entry.get("launch"), source),
            matmul_best=best,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ScenarioError(f"{source}: device {name!r} lacks or has a bad {exc}; see ppsim/data/devices.yaml for the format",
                            field="hardware.device_file") from None


def read_devices(path: Path) -> dict[str, Device]:
    """The devices of a catalogue-format YAML file."""
    if not path.is_file():
        raise ScenarioError(f"device file {str(path)!r} does not exist; check the path", field="hardware.device_file")
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not a readable YAML file{problem(exc)}", field="hardware.device_file") from None
    except (OSError, UnicodeDecodeError):
        raise ScenarioError(f"{path}: not a readable YAML file", field="hardware.device_file") from None
    if not isinstance(data, dict) or not data:
        raise ScenarioError(f"{path}: a device file maps device names to their figures", field="hardware.device_file")
    return {str(name): _device(str(name), entry, str(path)) for name, entry in data.items()}


DEVICES: dict[str, Device] = read_devices(CATALOGUE)


def get_device(name: str, device_file: str | Path | None = None) -> Device:
    """A device by name from ``device_file`` (if given) or the catalogue. A file with a single
    device returns it whatever ``name`` says."""
    if device_file is not None:
        devices = read_devices(Path(device_file))
        if len(devices) == 1:
            return next(iter(devices.values()))
        if name in devices:
            return devices[name]
        raise ScenarioError(f"{device_file} has no device {name!r}; it has: {', '.join(devices)}", field="hardware.device")
    try:
        return DEVICES[name]
    except KeyError:
        raise ScenarioError(
            f"unknown device {name!r}; choose one of: {', '.join(DEVICES)} (or describe yours in hardware.device_file)",
            field="hardware.device",
        ) from None
