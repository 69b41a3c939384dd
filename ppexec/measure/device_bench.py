"""``ppexec device``: time one accelerator's matmuls by shape, its attention matmuls, its memory
bandwidth and (on a GPU) its host's time to launch a kernel, and write what ppsim's analytic model
reads as a device entry (``hardware.device_file``).

Every timing is of calls run back to back on the device's stream, as a training step runs its
kernels (no synchronisation between calls), between two device events; after warm-ups, enough
calls to fill ``min_ms``, three times, the median of the three per-call means. Inputs are random
(a GPU multiplies zeros measurably faster). The same block check a user can run by hand —
:func:`block_times` — times one transformer block of ``ppexec.runtimes.model`` forward and backward, to
set beside ppsim's prediction of it.
"""

from __future__ import annotations

import datetime
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import yaml

from ppexec.measure.device_curves import (
    HEAD_DIMS,
    SWEEP_SPLITS,
    MatmulShape,
    attention_shapes,
    harmonic_mean,
    layer_gemm_shapes,
    octave_curve,
    significant,
    sweep_hiddens,
)
from ppexec.runtimes.model import TORCH_DTYPES, Block
from ppsim.api import DEVICE_FILE_MARKER, Device, ModelSpec


@dataclass(frozen=True)
class Timed:
    """A matmul's shape and its measured milliseconds per call."""

    shape: MatmulShape
    ms: float

    def fraction(self, peak_flops: float) -> float:
        return self.shape.flops / (self.ms / 1e3) / peak_flops


class Stopwatch:
    """Per-call milliseconds of a function run back to back on one device."""

    def __init__(self, device: str, min_ms: float = 20.0, repeats: int = 3) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.min_ms = min_ms
        self.repeats = repeats

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def loop_ms(self, fn: Callable[[], Any], calls: int) -> float:
        """Milliseconds of ``calls`` calls of ``fn`` back to back."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e3

    def ms(self, fn: Callable[[], Any], warmup: int = 2) -> float:
        """Median over ``repeats`` of the mean per-call time of ``fn`` (ms)."""
        for _ in range(warmup):
            fn()
        self.sync()
        once = max(self.loop_ms(fn, 1), 1e-4)
        calls = max(1, min(10_000, round(self.min_ms / once)))
        return statistics.median(self.loop_ms(fn, calls) / calls for _ in range(self.repeats))


def time_matmuls(shapes: Iterable[MatmulShape], dtype: torch.dtype, watch: Stopwatch) -> list[Timed]:
    """Each shape's time as one ``torch.mm`` (``torch.bmm`` when batched) into a preallocated output."""
    out = []
    gen = torch.Generator(device=watch.device).manual_seed(0)
    for shape in shapes:
        lead = (shape.batch,) if shape.batch > 1 else ()
        a = torch.randn(*lead, *((shape.n, shape.m) if shape.layout == "tn" else (shape.m, shape.n)),
                        dtype=dtype, device=watch.device, generator=gen)
        b = torch.randn(*lead, *((shape.k, shape.n) if shape.layout == "nt" else (shape.n, shape.k)),
                        dtype=dtype, device=watch.device, generator=gen)
        if shape.layout == "tn":
            a = a.transpose(-1, -2)
        elif shape.layout == "nt":
            b = b.transpose(-1, -2)
        c = torch.empty(*lead, shape.m, shape.k, dtype=dtype, device=watch.device)
        op = torch.bmm if lead else torch.mm
        out.append(Timed(shape, watch.ms(lambda op=op, a=a, b=b, c=c: op(a, b, out=c))))  # type: ignore[misc]  # mypy#15459: a lambda with a default
        del a, b, c
    return out


def copy_gb_s(watch: Stopwatch, gib: float = 2.0) -> float:
    """Device memory bandwidth: a ``gib``-GiB device-to-device copy, bytes read plus written per second."""
    n = int(gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32, device=watch.device)
    y = torch.empty_like(x)
    ms = watch.ms(lambda: y.copy_(x))
    return 2 * n * 4 / (ms / 1e3) / 1e9


#: the input of the launch timing's matmul: a GEMM far shorter on a GPU than its launch
LAUNCH_INPUT = (16, 64)


def launch_us(watch: Stopwatch, calls: int = 2_000) -> float:
    """The host's microseconds to launch one eager kernel: ``torch.nn.functional.linear`` on a
    :data:`LAUNCH_INPUT` input (one GEMM through PyTorch's dispatcher, as Transformer Engine issue
    2053 timed ``torch.nn.Linear``), ``calls`` of them issued back to back and timed on the host
    (its clock, not the device's: the kernels are shorter than their launches, so the queue never
    makes the host wait), the median over ``watch.repeats``."""
    rows, width = LAUNCH_INPUT
    x = torch.randn(rows, width, device=watch.device)
    w = torch.randn(width, width, device=watch.device)
    times = []
    for _ in range(watch.repeats):
        for _ in range(10):
            torch.nn.functional.linear(x, w)
        watch.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            torch.nn.functional.linear(x, w)
        times.append((time.perf_counter() - t0) / calls * 1e6)
        watch.sync()
    return statistics.median(times)


def gemm_curve(timed: list[Timed], peak_flops: float) -> list[tuple[float, float]]:
    """The ``gemm`` curve's points from the layer sweep's timings."""
    return octave_curve((t.shape.flops, t.fraction(peak_flops)) for t in timed)


def attention_curve(dtype: torch.dtype, peak_flops: float, watch: Stopwatch,
                    head_dims: Iterable[int] = HEAD_DIMS, splits: Iterable[int] = SWEEP_SPLITS,
                    seq_len: int = 2048) -> list[tuple[float, float]]:
    """The ``attention`` curve's points: per head dimension, the rate of the score and context
    matmuls run one after the other (their harmonic mean), the median over the splits, as a
    fraction of peak."""
    points = []
    for d in head_dims:
        rates = []
        for t in splits:
            scores, context = time_matmuls(attention_shapes(d, seq_len, split=t), dtype, watch)
            rates.append(harmonic_mean(scores.fraction(peak_flops), context.fraction(peak_flops)))
        points.append((float(d), significant(min(statistics.median(rates), 1.0))))
    return points


def flash_attention_ms(seq_len: int, heads: int, head_dim: int, micro_batch: int, dtype: torch.dtype,
                       watch: Stopwatch) -> tuple[float, float]:
    """Causal ``scaled_dot_product_attention`` (FlashAttention where torch has it for the device):
    (forward ms, backward ms), the backward as forward-and-backward less the forward."""
    shape = (micro_batch, heads, seq_len, head_dim)
    q, k, v = (torch.randn(shape, dtype=dtype, device=watch.device, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, dtype=dtype, device=watch.device)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    fwd = watch.ms(lambda: sdpa(q, k, v, is_causal=True))
    both = watch.ms(lambda: sdpa(q, k, v, is_causal=True).backward(grad))
    return fwd, both - fwd


def block_times(spec: ModelSpec, micro_batch: int, watch: Stopwatch, seed: int = 0) -> tuple[float, float, float]:
    """One ``ppexec.runtimes.model.Block`` of ``spec`` on the stopwatch's device: (forward ms, backward ms,
    backward ms into fresh gradients). Each backward is forward-and-backward less the forward. The
    first adds into the gradients the block already holds, as every micro-batch after a step's
    first does under plain autograd (one extra read and write of every gradient); the second
    drops them before each backward, as a step's first micro-batch (or a fused accumulation) runs."""
    dtype = TORCH_DTYPES[spec.dtype]
    block = Block(spec, seed).to(device=watch.device, dtype=dtype)
    params = list(block.parameters())
    x = torch.randn(micro_batch, spec.seq_len, spec.hidden, dtype=dtype, device=watch.device, requires_grad=True)
    grad = torch.randn_like(x)

    def forward() -> torch.Tensor:
        return block(x)

    def forward_backward() -> None:
        x.grad = None
        block(x).backward(grad)

    def forward_backward_fresh() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        block(x).backward(grad)

    fwd = watch.ms(forward)
    both = watch.ms(forward_backward)
    fresh = watch.ms(forward_backward_fresh)
    return fwd, both - fwd, fresh - fwd


def flat_figures(base: Device) -> dict[str, Any]:
    """What the flat pricing of the entry rests on: ``base``'s best matmul rates where it has them
    (each dtype's flat efficiency is their share), else its efficiency."""
    best = base.matmul_best
    if best is None:
        return {"efficiency": base.efficiency}
    return {"matmul_best": {**dict(best.tflops), "source": best.source}}


def device_entry(base: Device, gemm_points: list[tuple[float, float]], attention_points: list[tuple[float, float]],
                 hbm_gb_s: float, dtype: str, machine: str, launch: float | None = None) -> dict[str, Any]:
    """A catalogue entry: ``base``'s datasheet figures and links, this machine's measured curves
    and memory bandwidth (``hbm_copy``: what the curves' pricing runs memory-bound work at) and, on
    a GPU, its host's time per launch (``launch``: :func:`launch_us`), each with its source."""
    when = datetime.date.today().isoformat()
    where = f"measured by `ppexec device` on {machine}, {when}, torch {torch.__version__}"
    how = f"{where}: torch.mm / torch.bmm in {dtype} on random inputs, back to back between device events"
    return {
        "description": f"{base.description} (curves and memory bandwidth measured on {machine})",
        "peak_tflops": dict(base.peak_tflops),
        "memory_gb": base.memory_gb,
        "hbm_gb_s": base.hbm_gb_s,
        "hbm_copy": {"gb_s": round(hbm_gb_s), "source": f"{where}: a device-to-device copy, read and write counted"},
        **flat_figures(base),
        "gemm": {"source": how + "; a GPT layer's four GEMMs at 8,192 tokens, widths 128 .. 32,768, split "
                                 "1/2/4/8 ways, each as its forward, input grad and weight grad run it (operand "
                                 "layouts as torch passes them), and (m x 4096) x (4096 x m); per octave of FLOPs "
                                 "the median of all, made non-decreasing",
                 "dtypes": [dtype], "points": [list(p) for p in gemm_points]},
        "attention": {"source": how + "; the unfused attention's QK^T and PV at 2,048 tokens, 4 x 128 / t heads, "
                                      "their harmonic mean, median over t = 1, 2, 4, 8",
                      "dtypes": [dtype], "points": [list(p) for p in attention_points]},
        "intra_node": {"bandwidth_gb_s": base.intra_node_gb_s, "latency_us": base.intra_node_latency_us},
        "inter_node": {"bandwidth_gb_s": base.inter_node_gb_s, "latency_us": base.inter_node_latency_us},
    } | ({} if launch is None else {"launch": {
        "us": significant(launch), "source": f"{where}: torch.nn.functional.linear on a {LAUNCH_INPUT[0]} x "
                                             f"{LAUNCH_INPUT[1]} input, host time per call, calls back to back"}})


@dataclass(frozen=True)
class DeviceMeasurement:
    """A device's catalogue entry and the timings it was made from."""

    entry: dict[str, Any]
    gemms: list[Timed]
    peak_flops: float

    @property
    def above_peak(self) -> list[Timed]:
        """The GEMMs that ran faster than the datasheet peak (that peak is then wrong for this device)."""
        return [t for t in self.gemms if t.fraction(self.peak_flops) > 1.0]

    def device_file(self, name: str) -> str:
        """The entry as a device file (``hardware.device_file``) holding it under ``name``."""
        body = yaml.safe_dump({name: self.entry}, sort_keys=False, width=100, default_flow_style=None)
        return f"{DEVICE_FILE_MARKER}\n{body}"

    def samples_csv(self) -> str:
        """One line per timed GEMM: its shape, layout, FLOPs, milliseconds, TFLOP/s and fraction of peak
        (after a first comment line)."""
        rows = [DEVICE_FILE_MARKER, "what,m,n,k,batch,layout,flops,ms,tflops,fraction_of_peak"]
        rows += [f"{t.shape.what},{t.shape.m},{t.shape.n},{t.shape.k},{t.shape.batch},{t.shape.layout},{t.shape.flops:.0f},"
                 f"{t.ms:.6g},{t.shape.flops / t.ms / 1e9:.4g},{t.fraction(self.peak_flops):.4f}" for t in self.gemms]
        return "\n".join(rows) + "\n"


def measure_device(base: Device, dtype: str = "bf16", device: str = "cuda", quick: bool = False,
                   on_progress: Callable[[str], None] | None = None) -> DeviceMeasurement:
    """Time the sweeps on ``device``: its catalogue entry (:func:`device_entry`) and the GEMM timings."""
    tell = on_progress or (lambda _msg: None)
    torch_dtype = TORCH_DTYPES[dtype]
    peak = base.peak_flops(dtype)
    watch = Stopwatch(device, min_ms=5.0 if quick else 10.0)
    machine = torch.cuda.get_device_name(watch.device) if watch.cuda else "cpu"
    tell("memory bandwidth ...")
    hbm = copy_gb_s(watch, 0.0625 if quick else 2.0)
    # quick: a smoke test small enough for a CPU (its figures mean nothing)
    shapes = (layer_gemm_shapes([128, 256], tokens=256, squares=(32, 64)) if quick
              else layer_gemm_shapes(sweep_hiddens()))
    tell(f"{len(shapes)} GEMMs ...")
    timed = time_matmuls(shapes, torch_dtype, watch)
    tell("attention matmuls ...")
    att = attention_curve(torch_dtype, peak, watch, HEAD_DIMS[::3] if quick else HEAD_DIMS,
                          (1,) if quick else SWEEP_SPLITS, 256 if quick else 2048)
    launch = None
    if watch.cuda:  # a CPU runs each op as it is called: there is no queue for the launches to fall behind
        tell("the host's launches ...")
        launch = launch_us(watch, 200 if quick else 2_000)
    entry = device_entry(base, gemm_curve(timed, peak), att, hbm, dtype, machine, launch)
    if quick:  # its sources name the full sweep: say plainly that this one was not
        entry["description"] += " (--quick: tiny sweeps, a smoke test whose figures mean nothing)"
    return DeviceMeasurement(entry, timed, peak)
