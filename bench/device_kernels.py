"""What ppsim assumes of a GPU's kernels, set beside what they take on the GPU at hand: the best
matmul, FP8 GEMMs by shape, a GEMM beside a copy, a MoE layer's pieces at the shapes ppsim
prices, and the shortest a kernel takes. One prepared run for a lent accelerator (issues 32, 33).

    python bench/device_kernels.py --like h200 --out DIR    # a CUDA GPU: a few minutes on an H200
    python bench/device_kernels.py --device cpu --quick      # the same code, small: figures mean nothing

1. **Best matmul** (what each dtype's flat figure is a share of, ``matmul_best``): bf16 and FP8
   (e4m3, per-tensor scales, ``torch._scaled_mm``) over a grid of large shapes, the best of each,
   beside the catalogue's entry for ``--like``.
2. **FP8 GEMMs by shape**: a layer sweep's GEMMs (``ppexec device``'s shapes, fewer widths) with
   per-tensor and row-wise scales: the curve as a ``gemm_fp8`` entry would hold it.
3. **A GEMM beside a copy** (what overlapped communication costs compute): a bf16 8192^3 GEMM
   alone, then with a copy streaming on a second stream: a device-to-device ``cudaMemcpyAsync`` and
   a copy to pinned host memory (the copy engine's); each copy's rate alone and beside the GEMMs.
   (A copy kernel on a few SMs, as NCCL's, needs a kernel of its own: Triton is not a dependency.)
4. **A MoE layer's pieces** at the busiest device's shapes of four scenarios (ppsim's own
   ``ExpertShard``): the router (fp32, as the recipes run it), the permutation to the experts and
   back, the experts' GEMMs forward (``torch._grouped_mm`` where torch has it, else one GEMM per
   expert), each beside ppsim's flat price of the same work on ``--like``.
5. **The shortest kernel**: 2,000 tiny additions back to back, eager and replayed from a CUDA
   graph: the GPU's time per kernel, which ppsim does not price (it prices a kernel's work).
6. **The host's time per launch, each way**: a chain of small bias-free linear layers (their GEMMs
   far shorter than their launches), the host's time per GEMM forward (one a layer) and in the
   backward autograd runs (two a layer: the input's and the weight's grads), and one
   device-to-host round trip (a dropless MoE layer's sync): ppsim prices every launch at the
   device's one ``launch`` figure, measured forward; Transformer Engine's modules were measured
   at 4.4x their forward's host time in the backward (its PR 3523, on a GB200), how much of it
   autograd's own is what this tells.

7. **Attention where the catalogue holds no measurement**: torch's SDPA (cuDNN's kernel where torch
   has it, as Transformer Engine runs) causal at head dim 64 (GPT-OSS's full-attention layers, 64
   query heads on 8 KV heads) beside head dim 128 (32 on 8), 4K-16K tokens, forward and backward;
   and a context-parallel rank's ring of kernels (its causal diagonal block, then cp - 1 blocks of
   its 2c queries on c keys unmasked, c = s / 2cp) against one causal pass of the same entries:
   each as a fraction of the bf16 peak counted as the catalogue counts, beside the fraction ppsim
   prices it at on ``--like`` (for head dim 64 without a window, the nearest measured head dim's).

Each section runs on its own: one that fails prints its error and the others go on. Printed, and
written to ``DIR/device-kernels.yaml`` with the versions it ran on.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: (name, scenario): the MoE layers whose pieces are timed, each at its scenario's layout
MOE_SCENARIOS = (("Qwen3-30B-A3B", "qwen3-30b-a3b.yaml"), ("GPT-OSS-120B", "gpt-oss-120b.yaml"),
                 ("Nemotron 3 Nano", "nemotron3-nano.yaml"), ("DeepSeek-V3", "deepseek-v3.yaml"))
#: the best-matmul grid: (m, n, k) with the inner dimension n, each a multiple of 256
BEST_GRID = tuple((m, n, k) for m in (4096, 8192, 16384) for n in (4096, 8192, 16384) for k in (4096, 8192))
QUICK_GRID = ((64, 128, 64), (128, 128, 128))
#: the FP8 sweep's model widths (ppexec device's layer GEMMs at each)
FP8_WIDTHS = (1024, 2048, 4096, 6144, 8192, 12288, 16384)
#: section 7's heads, (head dim, query heads, KV heads): GPT-OSS's, then Llama's (query width 4,096 each)
ATTENTION_HEADS = ((64, 64, 8), (128, 32, 8))
ATTENTION_SEQS = (4096, 8192, 16384)
#: a context-parallel ring's sequence and its sizes (head dim 128)
RING_SEQ, RING_CP = 16384, (2, 4)


def moe_pieces(scenario_file: str) -> dict[str, Any]:
    """The busiest device's MoE layer of a scenario as ppsim prices it: its tokens, the routed
    experts' GEMMs (tokens per local expert, widths), the router's size and the permutation's."""
    from ppsim.costs.moe import ExpertShard
    from ppsim.inputs.scenario import load

    s = load(ROOT / "scenarios" / scenario_file)
    model, training = s.model, s.training
    assert model is not None and model.moe is not None
    shard = ExpertShard.of(model, s.expert_parallel, s.expert_tensor, training.moe_dispatcher)
    t = s.tensor_parallel
    tokens = shard.tokens(model.seq_len // s.context_parallel, training.micro_batch, t)
    width = shard.routed_width(model.hidden)
    per_expert = tokens * model.moe.top_k * shard.skew * s.expert_tensor / shard.local_experts
    return {"tokens": int(tokens), "hidden": model.hidden, "width": width, "experts": model.moe.experts,
            "top_k": model.moe.top_k, "local_experts": shard.local_experts, "per_expert": int(per_expert),
            "ffn": model.moe.ffn_hidden // s.expert_tensor, "swiglu": model.mlp == "swiglu",
            "dtype_bytes": 2, "permutes": shard.permutes, "shard": shard, "tensor_parallel": t}


def priced_ms(pieces: dict[str, Any], device: Any) -> dict[str, float]:
    """ppsim's flat price on ``device`` of the pieces :func:`moe_pieces` lists, forward, in bf16:
    the router's GEMM, the permutation's HBM bytes, the routed experts' GEMMs."""
    from ppsim.costs.analytic import matmul_ms
    from ppsim.costs.gemms import Gemm

    p, eff = pieces, device.flat_efficiency
    up = 2 if p["swiglu"] else 1
    experts = (Gemm(p["per_expert"], p["width"], up * p["ffn"], p["local_experts"], linear=True),
               Gemm(p["per_expert"], p["ffn"], p["width"], p["local_experts"], linear=True))
    router = (Gemm(p["tokens"], p["hidden"], p["experts"]),)
    permute = p["shard"].permute_bytes(p["tokens"], p["hidden"], p["dtype_bytes"])
    return {"router": matmul_ms(router, device, "bf16", efficiency=eff),
            "permute": permute / (device.hbm_gb_s * 1e6),
            "experts": matmul_ms(experts, device, "bf16", efficiency=eff)}


class Bench:
    """The timing helpers on one device (ppexec's stopwatch: calls back to back between events)."""

    def __init__(self, device: str, quick: bool) -> None:
        import torch

        from ppexec.measure.device_bench import Stopwatch

        self.torch = torch
        self.quick = quick
        self.watch = Stopwatch(device, min_ms=2.0 if quick else 20.0, repeats=1 if quick else 3)
        self.dev = self.watch.device
        self.cuda = self.watch.cuda
        self.gen = torch.Generator(device=self.dev).manual_seed(0)

    def randn(self, *shape: int, dtype: Any = None) -> Any:
        torch = self.torch
        return torch.randn(*shape, generator=self.gen, device=self.dev, dtype=dtype or torch.bfloat16)

    def fp8(self) -> bool:
        """The device runs FP8 GEMMs (compute capability 8.9 or later)."""
        return self.cuda and self.torch.cuda.get_device_capability(self.dev) >= (8, 9)

    def bf16_mm_ms(self, m: int, n: int, k: int) -> float:
        a, b = self.randn(m, n), self.randn(n, k)
        c = self.torch.empty(m, k, dtype=self.torch.bfloat16, device=self.dev)
        return float(self.watch.ms(lambda: self.torch.mm(a, b, out=c)))

    def fp8_mm_ms(self, m: int, n: int, k: int, rowwise: bool = False) -> float:
        """(m x n) @ (n x k) in e4m3 with per-tensor (or row- and column-wise) scales, bf16 out."""
        torch = self.torch
        a = self.randn(m, n).to(torch.float8_e4m3fn)
        b = self.randn(k, n).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt takes it
        if rowwise:
            sa = torch.ones(m, 1, device=self.dev, dtype=torch.float32)
            sb = torch.ones(1, k, device=self.dev, dtype=torch.float32)
        else:
            sa = sb = torch.ones((), device=self.dev, dtype=torch.float32)
        return float(self.watch.ms(lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)))


def best_matmul(b: Bench, peaks: dict[str, float]) -> dict[str, Any]:
    """Section 1: the best rate over the grid, per dtype, in TFLOP/s and as a fraction of peak."""
    grid = QUICK_GRID if b.quick else BEST_GRID
    out: dict[str, Any] = {}
    timers: dict[str, Callable[[int, int, int], float]] = {"bf16": b.bf16_mm_ms}
    if b.fp8():
        timers["fp8"] = b.fp8_mm_ms
    for dtype, timer in timers.items():
        rates = [(2 * m * n * k / (timer(m, n, k) / 1e3) / 1e12, (m, n, k)) for m, n, k in grid]
        tflops, shape = max(rates)
        out[dtype] = {"tflops": float(f"{tflops:.4g}"), "shape": list(shape),
                      "of_peak": round(tflops / peaks[dtype], 3) if dtype in peaks else None}
    if "fp8" not in timers:
        out["fp8"] = "skipped: no FP8 Tensor Cores here"
    return out


def fp8_curve(b: Bench, peak_tflops: float) -> dict[str, Any]:
    """Section 2: the layer sweep's GEMMs in FP8 (per-tensor and row-wise scales), as fractions of
    the FP8 peak, and their curve by FLOPs (``ppexec device``'s octave medians)."""
    from ppexec.measure.device_curves import layer_gemm_shapes, octave_curve

    if not b.fp8():
        return {"skipped": "no FP8 Tensor Cores here"}
    widths = (1024, 2048) if b.quick else FP8_WIDTHS
    shapes = [s for s in layer_gemm_shapes(widths, passes=("forward",), squares=()) if s.batch == 1
              and s.m % 16 == 0 and s.n % 16 == 0 and s.k % 16 == 0]
    out: dict[str, Any] = {}
    for scaling, rowwise in (("tensorwise", False), ("rowwise", True)):
        samples = [(s.flops, s.flops / (b.fp8_mm_ms(s.m, s.n, s.k, rowwise) / 1e3) / (peak_tflops * 1e12))
                   for s in shapes]
        out[scaling] = {"gemms": len(samples), "points": [[float(f"{x:.4g}"), y] for x, y in octave_curve(samples)]}
    return out


def beside_copies(b: Bench) -> dict[str, Any]:
    """Section 3: a bf16 GEMM's time alone and beside a copy on another stream — a device-to-device
    ``cudaMemcpyAsync`` (``copy_``), a copy to pinned host memory (the copy engine's, as activation
    offloading's) — each copy's rate alone and while the GEMMs ran (bytes read and written)."""
    torch = b.torch
    if not b.cuda:
        return {"skipped": "needs a CUDA GPU (streams)"}
    n = 8192
    a, w = b.randn(n, n), b.randn(n, n)
    c = torch.empty(n, n, dtype=torch.bfloat16, device=b.dev)

    def gemm() -> Any:
        return torch.mm(a, w, out=c)
    alone = b.watch.ms(gemm)
    src = torch.empty(2**30 // 2, dtype=torch.bfloat16, device=b.dev).normal_()
    dst = torch.empty_like(src)
    host = torch.empty(src.numel() // 4, dtype=torch.bfloat16, pin_memory=True)
    copiers: dict[str, tuple[Callable[[], Any], float]] = {  # the copy, and its bytes read and written
        "memcpy_d2d": (lambda: dst.copy_(src), 2 * src.numel() * 2),
        "to_pinned_host": (lambda: host.copy_(src[:host.numel()], non_blocking=True), 2 * host.numel() * 2)}
    out: dict[str, Any] = {"gemm_alone_ms": round(alone, 4)}
    side = torch.cuda.Stream(device=b.dev)
    calls = max(1, round(200 / alone))
    for name, (copy, moved) in copiers.items():
        try:
            copy_ms = b.watch.ms(copy)
            repeats = max(1, round(2 * calls * alone / copy_ms))  # the copies outlast the GEMMs
            b.watch.sync()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(side):
                start.record()
                for _ in range(repeats):
                    copy()
                end.record()
            beside = b.watch.loop_ms(gemm, calls) / calls
            b.watch.sync()
            out[name] = {"copy_gb_s": round(moved / (copy_ms / 1e3) / 1e9, 1),
                         "copy_beside_gb_s": round(repeats * moved / (start.elapsed_time(end) / 1e3) / 1e9, 1),
                         "gemm_beside_ms": round(beside, 4), "gemm_slowdown": round(beside / alone, 3)}
        except Exception as exc:  # noqa: BLE001 - one copy's failure must not cost the others
            out[name] = {"failed": f"{type(exc).__name__}: {exc}"}
            b.watch.sync()
    return out


def moe_layer(b: Bench, device: Any) -> dict[str, Any]:
    """Section 4: each scenario's MoE pieces, forward, measured and priced (ms)."""
    torch = b.torch
    out: dict[str, Any] = {}
    for name, scenario in MOE_SCENARIOS:
        p = moe_pieces(scenario)
        if b.quick:  # the same code on a CPU, a hundredth of the tokens
            p = {**p, "tokens": max(64, p["tokens"] // 100), "per_expert": max(8, p["per_expert"] // 100),
                 "local_experts": min(p["local_experts"], 4)}
        priced = priced_ms(p, device)
        measured = {"router": router_ms(b, p), "permute": permute_ms(b, p)}
        measured["experts"], how = experts_ms(b, p)
        out[name] = {"shape": {k: v for k, v in p.items() if k != "shard"}, "grouped_by": how,
                     "measured_ms": {k: round(v, 4) for k, v in measured.items()},
                     "priced_ms": {k: round(v, 4) for k, v in priced.items()}}
        if b.cuda:
            torch.cuda.empty_cache()
    return out


def router_ms(b: Bench, p: dict[str, Any]) -> float:
    """The router's forward in fp32: logits, softmax, top-k (Megatron's ``moe_router_dtype: fp32``)."""
    torch = b.torch
    x, w = b.randn(p["tokens"], p["hidden"]), b.randn(p["experts"], p["hidden"], dtype=torch.float32)

    def route() -> Any:
        logits = torch.nn.functional.linear(x.float(), w)
        return torch.topk(torch.softmax(logits, dim=-1), p["top_k"], dim=-1)
    return float(b.watch.ms(route))


def permute_ms(b: Bench, p: dict[str, Any]) -> float:
    """The token copies gathered into their experts' order and back, as many times each way as
    ppsim's permutation counts: ``index_select`` there, ``index_select`` back into token order and
    each token's k copies summed with their router weights (one batched product), the gathers a
    fused permutation's kernels do."""
    torch = b.torch
    tokens, k = p["tokens"], p["top_k"]
    x = b.randn(tokens, p["width"])
    order = torch.randperm(tokens * k, device=b.dev, generator=b.gen)  # copy j of the experts' order
    back = torch.argsort(order)  # and where each token's copies sit in it
    weights = b.randn(tokens, 1, k)

    def there_and_back() -> Any:
        for _ in range(p["permutes"]):
            routed = x.index_select(0, order // k)
            combined = torch.bmm(weights, routed.index_select(0, back).view(tokens, k, -1))
        return combined
    return float(b.watch.ms(there_and_back))


def experts_ms(b: Bench, p: dict[str, Any]) -> tuple[float, str]:
    """The routed experts' forward GEMMs of the busiest device, each expert its ``per_expert``
    tokens: up (with the gate) and down, timed apart (the activation between them left out);
    grouped in one call each where torch has ``_grouped_mm`` here, else one GEMM per expert."""
    torch = b.torch
    e, n, w, f = p["local_experts"], p["per_expert"], p["width"], p["ffn"]
    up = (2 if p["swiglu"] else 1) * f
    x, act = b.randn(e * n, w), b.randn(e * n, f)
    w_up, w_down = b.randn(e, up, w), b.randn(e, w, f)
    if b.cuda and hasattr(torch, "_grouped_mm"):
        offsets = torch.arange(1, e + 1, device=b.dev, dtype=torch.int32) * n

        def grouped(a: Any, weights: Any) -> Any:
            return torch._grouped_mm(a, weights.transpose(-2, -1), offs=offsets)
        try:
            return sum(b.watch.ms(partial(grouped, *pair)) for pair in ((x, w_up), (act, w_down))), "torch._grouped_mm"
        except Exception as exc:  # noqa: BLE001 - then the per-expert loop
            print(f"    torch._grouped_mm failed ({exc}); one GEMM per expert", flush=True)

    def looped(a: Any, weights: Any) -> list[Any]:
        return [torch.nn.functional.linear(chunk, weights[i]) for i, chunk in enumerate(a.split(n))]
    return sum(b.watch.ms(partial(looped, *pair)) for pair in ((x, w_up), (act, w_down))), "one GEMM per expert"


def shortest_kernel(b: Bench, kernels: int = 2000) -> dict[str, Any]:
    """Section 5: GPU microseconds per tiny kernel, eager (the host's launch pace) and replayed from
    a CUDA graph (the GPU's own)."""
    torch = b.torch
    x = torch.zeros(256, device=b.dev)
    if b.quick:
        kernels = 100

    def burst() -> None:
        for _ in range(kernels):
            x.add_(1.0)
    out: dict[str, Any] = {"kernels": kernels, "eager_us": round(1e3 * b.watch.ms(burst) / kernels, 3)}
    if b.cuda:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream(device=b.dev)
        side.wait_stream(torch.cuda.current_stream(b.dev))
        with torch.cuda.stream(side):
            burst()  # warm-up on a side stream, as torch's graph capture asks
        torch.cuda.current_stream(b.dev).wait_stream(side)
        with torch.cuda.graph(graph):
            burst()
        out["graph_us"] = round(1e3 * b.watch.ms(graph.replay) / kernels, 3)
    return out


def host_launches(b: Bench, layers: int = 200, repeats: int = 20) -> dict[str, Any]:
    """Section 6: the host's microseconds per GEMM launched forward and by autograd backward, through
    a chain of ``layers`` small linear layers (each timed unsynchronised, the GPU drained before and
    after), and per device-to-host round trip; the best of ``repeats``."""
    import time

    torch = b.torch
    if b.quick:
        layers, repeats = 10, 2
    chain = [b.randn(128, 128).requires_grad_() for _ in range(layers)]
    x = b.randn(64, 128)

    def sync() -> None:
        if b.cuda:
            torch.cuda.synchronize(b.dev)

    forward_s, backward_s, trip_s = [], [], []
    for _ in range(repeats):
        for w in chain:
            w.grad = None
        sync()
        t0 = time.perf_counter()
        y = x
        for w in chain:
            y = torch.nn.functional.linear(y, w)
        t1 = time.perf_counter()
        loss = y.sum()
        sync()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        sync()
        small = torch.ones(1, device=b.dev)
        t4 = time.perf_counter()
        small.add_(1.0).item()
        trip_s.append(time.perf_counter() - t4)
        forward_s.append(t1 - t0)
        backward_s.append(t3 - t2)
    forward_us, backward_us = 1e6 * min(forward_s) / layers, 1e6 * min(backward_s) / (2 * layers)
    return {"layers": layers, "forward_us": round(forward_us, 3), "backward_us": round(backward_us, 3),
            "backward_over_forward": round(backward_us / forward_us, 3), "round_trip_us": round(1e6 * min(trip_s), 3)}


def attention_passes_ms(b: Bench, d: int, heads: int, kv_heads: int, queries: int, keys: int, causal: bool
                        ) -> tuple[float, float]:
    """(forward, backward) ms of one SDPA call: ``heads`` x ``queries`` queries of width ``d`` on
    ``keys`` keys of ``kv_heads`` heads, causal or unmasked; its input grads by autograd."""
    torch = b.torch
    q = b.randn(1, heads, queries, d).requires_grad_()
    k, v = (b.randn(1, kv_heads, keys, d).requires_grad_() for _ in range(2))

    def forward() -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    out = forward()
    grad = torch.ones_like(out)
    return (float(b.watch.ms(forward)),
            float(b.watch.ms(lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))))


def attention_fraction(ms: float, entries: float, d: int, peak_tflops: float, backward: bool) -> float:
    """The fraction of the peak a pass of ``entries`` score entries of head dim ``d`` ran at, counted
    as the catalogue counts (forward 4 x entries x d FLOPs, backward 2.5 x that)."""
    flops = (10 if backward else 4) * entries * d
    return float(f"{flops / (ms / 1e3) / (peak_tflops * 1e12):.4g}")


def sdpa_backend(b: Bench) -> tuple[Any, str]:
    """The context that holds torch's SDPA to cuDNN's kernel where torch has it here, and its name."""
    import contextlib

    if b.cuda:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            if b.torch.backends.cudnn.is_available():
                return sdpa_kernel([SDPBackend.CUDNN_ATTENTION]), "cudnn"
            return sdpa_kernel([SDPBackend.FLASH_ATTENTION]), "flash"
        except ImportError:
            pass
    return contextlib.nullcontext(), "torch's default"


def attention(b: Bench, device: Any, peak_tflops: float) -> dict[str, Any]:
    """Section 7: causal SDPA by head dim and length, and a context-parallel rank's ring of kernels,
    each measured and priced as fractions of the bf16 peak."""
    from ppsim.costs.gemms import attended_keys

    kernel = device.flash_attention
    heads_of = ((64, 8, 1), (128, 4, 1)) if b.quick else ATTENTION_HEADS
    seqs = (128, 256) if b.quick else ATTENTION_SEQS
    ring_seq, ring_cps = (256, (2,)) if b.quick else (RING_SEQ, RING_CP)

    def figures(ms: tuple[float, float], entries: float, d: int, keys: float) -> dict[str, Any]:
        """A shape's two passes: their times, the fractions of peak they ran at, and the fractions
        ppsim prices them at (its kernel's, with queries attending ``keys`` on average)."""
        passes = ("forward", "backward")
        return {"ms": {p: round(x, 4) for p, x in zip(passes, ms)},
                "of_peak": {p: attention_fraction(x, entries, d, peak_tflops, p == "backward")
                            for p, x in zip(passes, ms)},
                "priced_of_peak": {p: round(kernel.fraction(d, keys, backward=p == "backward"), 4) if kernel else None
                                   for p in passes}}

    context, backend = sdpa_backend(b)
    out: dict[str, Any] = {"backend": backend, "causal": [], "ring": []}
    with context:
        for d, heads, kv_heads in heads_of:
            for s in seqs:
                ms = attention_passes_ms(b, d, heads, kv_heads, s, s, causal=True)
                out["causal"].append({"head_dim": d, "heads": heads, "kv_heads": kv_heads, "seq": s,
                                      **figures(ms, heads * s * attended_keys(s), d, attended_keys(s))})
        d, heads, kv_heads = heads_of[-1]
        for cp in ring_cps:
            c = ring_seq // (2 * cp)  # each rank holds two chunks of c (the causal balance)
            diagonal = attention_passes_ms(b, d, heads, kv_heads, 2 * c, 2 * c, causal=True)
            step = attention_passes_ms(b, d, heads, kv_heads, 2 * c, c, causal=False)
            ring = (diagonal[0] + (cp - 1) * step[0], diagonal[1] + (cp - 1) * step[1])
            entries = heads * (ring_seq // cp) * attended_keys(ring_seq)  # = heads x 2c x c x cp
            # priced as ppsim prices a rank's share: its queries on the whole sequence's causal half
            out["ring"].append({"cp": cp, "seq": ring_seq, "chunk": c, "head_dim": d,
                                **figures(ring, entries, d, attended_keys(ring_seq))})
            if b.cuda:
                b.torch.cuda.empty_cache()
    return out


SECTIONS: tuple[tuple[str, str], ...] = (("best_matmul", "best matmul"), ("fp8_gemms", "FP8 GEMMs by shape"),
                                         ("beside_copies", "a GEMM beside a copy"), ("moe_layer", "MoE pieces"),
                                         ("shortest_kernel", "the shortest kernel"),
                                         ("host_launches", "the host's time per launch, each way"),
                                         ("attention", "attention where the catalogue holds no measurement"))


def run(like: str, device: str, quick: bool) -> dict[str, Any]:
    """Every section in turn, each caught on its own; the results by section."""
    import torch

    from ppsim.inputs.hardware import get_device

    base = get_device(like)
    b = Bench(device, quick)
    peaks = {k: v for k, v in base.peak_tflops.items() if k in ("bf16", "fp8")}
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(b.dev) if b.cuda else device, "like": like,
        "torch": str(torch.__version__), "quick": quick,
        "catalogue": {"matmul_best": dict(base.matmul_best.tflops) if base.matmul_best else None,
                      "flat_efficiency": {d: round(base.flat_efficiency(d), 4) for d in peaks},
                      "hbm_gb_s": base.hbm_gb_s, "launch_us": base.launch.us if base.launch else None}}
    work: dict[str, Callable[[], Any]] = {
        "best_matmul": lambda: best_matmul(b, peaks), "fp8_gemms": lambda: fp8_curve(b, peaks.get("fp8", 0.0)),
        "beside_copies": lambda: beside_copies(b), "moe_layer": lambda: moe_layer(b, base),
        "shortest_kernel": lambda: shortest_kernel(b), "host_launches": lambda: host_launches(b),
        "attention": lambda: attention(b, base, peaks["bf16"])}
    for key, title in SECTIONS:
        print(f"== {title}", flush=True)
        try:
            results[key] = work[key]()
        except Exception as exc:  # noqa: BLE001 - one section's failure must not cost the others
            traceback.print_exc()
            results[key] = {"failed": f"{type(exc).__name__}: {exc}"}
        print(yaml.safe_dump({key: results[key]}, sort_keys=False, width=120), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--like", default="h200", help="the catalogue's entry to price against (default h200)")
    parser.add_argument("--device", default="cuda", help="torch device (default cuda)")
    parser.add_argument("--quick", action="store_true", help="small shapes: a smoke test, figures mean nothing")
    parser.add_argument("--out", type=Path, help="folder to write device-kernels.yaml in")
    args = parser.parse_args()
    results = run(args.like, args.device, args.quick)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "device-kernels.yaml").write_text(yaml.safe_dump(results, sort_keys=False, width=120))
        print(f"wrote {args.out / 'device-kernels.yaml'}")


if __name__ == "__main__":
    main()
