"""Check ppsim's analytic compute model on the accelerator at hand.

1. Measure the device (``ppexec device``'s sweeps: GEMMs by shape, the unfused attention matmuls,
   memory bandwidth) and write its catalogue entry to ``--out``.
2. Time one transformer block (ppexec.runtimes.model.Block: LayerNorm, QKV, FlashAttention through
   scaled_dot_product_attention, output projection, GELU MLP) forward and backward at several
   model sizes, and set each beside ppsim's prediction of that block — the difference between a
   one-stage plan of two blocks and of one, through ppsim's own cost path — on the catalogue's
   entry for ``--like`` (flat efficiency) and on the measured entry with its curves.

    python bench/device_check.py --like h200 --out h200-measured.yaml

Needs torch with an accelerator for real figures; ``--device cpu --quick`` runs the same code
small on a CPU (a smoke test: its figures mean nothing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: (name, model, micro-batch): the blocks timed against their prediction
BLOCKS: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("GPT 350M-like  h=1024", {"hidden": 1024, "heads": 16, "seq_len": 2048, "vocab": 51200}, 8),
    ("GPT 1.3B-like  h=2048", {"hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 51200}, 4),
    ("GPT-3 13B      h=5120", {"hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 51200}, 1),
    ("GPT-3 13B mb=4 h=5120", {"hidden": 5120, "heads": 40, "seq_len": 2048, "vocab": 51200}, 4),
    ("GPT-3 175B     h=12288", {"hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200}, 1),
)
QUICK_BLOCKS: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("tiny h=256", {"hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1024}, 2),
)


def predicted_block_ms(model: dict[str, Any], micro_batch: int, device: str, device_file: str | None,
                       curves: bool) -> tuple[float, float]:
    """ppsim's (forward, backward) ms of one block: a one-stage plan of two blocks less one of one."""
    from ppsim.costs.workload import build_workload
    from ppsim.inputs.scenario import parse_scenario

    def stage(layers: int) -> tuple[float, float]:
        hardware: dict[str, Any] = {"device": device, "gemm_curves": curves}
        if device_file is not None:
            hardware["device_file"] = device_file
        s = parse_scenario({
            "model": {**model, "layers": layers, "dropout": False, "dtype": "bf16"},
            "training": {"micro_batch": micro_batch, "global_batch": micro_batch, "flash_attention": True,
                         "grad_clip": 0},
            "pipeline": {"stages": 1, "schedule": "gpipe"},
            "hardware": hardware,
        })
        c = build_workload(s).costs.stages[0]
        return c.forward_ms, c.backward_ms

    (f2, b2), (f1, b1) = stage(2), stage(1)
    return f2 - f1, b2 - b1


def sweep(args: argparse.Namespace) -> tuple[str, str | None, float]:
    """Measure the device, write its entry to ``--out`` and print the curves: (entry name, its file,
    the peak its fractions are of)."""
    import torch

    from ppexec.measure.device_bench import measure_device
    from ppexec.measure.device_curves import PASS_LAYOUTS, octave_medians
    from ppsim.inputs.hardware import get_device

    base = get_device(args.like)
    t0 = time.perf_counter()
    measured = measure_device(base, "bf16", args.device, quick=args.quick,
                              on_progress=lambda m: print(f"  [{time.perf_counter() - t0:6.1f} s] {m}", flush=True))
    entry = measured.entry
    args.out.with_suffix(".csv").write_text(measured.samples_csv())
    if measured.above_peak:
        print(f"WARNING: {len(measured.above_peak)} GEMMs ran above the datasheet peak of {args.like}; "
              "its fractions are capped at 1")
    name = f"{args.like}-measured"
    args.out.write_text(measured.device_file(name))
    print(f"device sweeps: {time.perf_counter() - t0:.1f} s; wrote {args.out} ({name}) and its GEMM timings "
          f"{args.out.with_suffix('.csv')}")
    print(f"torch {torch.__version__}, device {entry['description']}")
    print(f"memory bandwidth (copy, read + write): {entry['hbm_copy']['gb_s']} GB/s (catalogue {base.hbm_gb_s:g})")
    print("gemm curve (FLOPs, fraction of the datasheet peak):")
    for flops, frac in entry["gemm"]["points"]:
        print(f"  {flops:10.3g}  {frac:.3f}")
    print("attention curve (head dim, fraction of peak):", ", ".join(f"{int(d)}: {f:.3f}"
                                                                   for d, f in entry["attention"]["points"]))
    print("\nGEMMs by pass: median fraction of peak per octave of FLOPs (count)")
    by_pass = {p: octave_medians((t.shape.flops, t.fraction(measured.peak_flops)) for t in measured.gemms
                                 if t.shape.what.endswith(p)) for p in PASS_LAYOUTS}
    print(f"{'FLOPs from':>10} " + " ".join(f"{p:>16}" for p in PASS_LAYOUTS))
    for k in sorted({k for m in by_pass.values() for k in m}):
        cells = [f"{by_pass[p][k][0]:10.3f} ({by_pass[p][k][1]:3d})" if k in by_pass[p] else " " * 16
                 for p in PASS_LAYOUTS]
        print(f"{2.0 ** k:10.3g} " + " ".join(cells))
    return name, str(args.out.resolve()), measured.peak_flops


def attention_report(blocks: tuple[tuple[str, dict[str, Any], int], ...], peak_flops: float, efficiency: float,
                     watch: Any) -> None:
    """FlashAttention's measured speed as a fraction of peak, counted as ppsim counts its FLOPs."""
    import torch

    from ppexec.measure.device_bench import flash_attention_ms

    print("\ncausal scaled_dot_product_attention, as a fraction of peak counted as ppsim counts it "
          "(forward 4bs^2h, backward 10bs^2h: both grads and the recomputed scores; ppsim prices it at the "
          f"flat efficiency {efficiency})")
    for label, model, mb in blocks:
        s_len, h, a = model["seq_len"], model["hidden"], model["heads"]
        fwd, bwd = flash_attention_ms(s_len, a, h // a, mb, torch.bfloat16, watch)
        unit = mb * s_len * s_len * h / peak_flops * 1e3  # ms of b s^2 h FLOPs at peak
        print(f"  {label:24} mb={mb} d={h // a:3d}: forward {fwd:7.3f} ms ({4 * unit / fwd:.3f}), "
              f"backward {bwd:7.3f} ms ({10 * unit / bwd:.3f})", flush=True)


def block_report(blocks: tuple[tuple[str, dict[str, Any], int], ...], like: str, curve_device: tuple[str, str | None],
                 watch: Any) -> None:
    """Each block's measured forward and backward beside ppsim's two predictions of them."""
    import torch

    from ppexec.measure.device_bench import block_times
    from ppsim.inputs.hardware import get_device
    from ppsim.inputs.scenario import ModelSpec

    print("\none block, forward / backward (ms): measured (backward into fresh gradients, and adding into "
          f"held ones: acc B); ppsim on {like} with the flat efficiency {get_device(like).efficiency}, and with "
          f"the curves of {curve_device[0]}; errors against the fresh backward")
    print(f"{'block':24} {'mb':>3} {'meas F':>8} {'meas B':>8} {'acc B':>8} {'flat F':>8} {'err':>6} {'flat B':>8}"
          f" {'err':>6} {'curve F':>8} {'err':>6} {'curve B':>8} {'err':>6}")
    errors: dict[str, list[float]] = {"flat": [], "curve": []}
    for label, model, mb in blocks:
        spec = ModelSpec(**model, layers=1, dropout=False, dtype="bf16")
        fwd, acc, bwd = block_times(spec, mb, watch)
        flat = predicted_block_ms(model, mb, like, None, curves=False)
        curve = predicted_block_ms(model, mb, *curve_device, curves=True)
        row = f"{label:24} {mb:3d} {fwd:8.3f} {bwd:8.3f} {acc:8.3f}"
        for key, (pf, pb) in (("flat", flat), ("curve", curve)):
            ef, eb = pf / fwd - 1, pb / bwd - 1
            errors[key] += [ef, eb]
            row += f" {pf:8.3f} {ef:+6.0%} {pb:8.3f} {eb:+6.0%}"
        print(row, flush=True)
        torch.cuda.empty_cache() if watch.cuda else None
    for key, errs in errors.items():
        print(f"{key}: median |error| {statistics.median(abs(e) for e in errs):.1%}, max {max(abs(e) for e in errs):.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--like", default="h200", help="catalogue device whose datasheet figures and links to keep")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, help="where to write the measured device entry (YAML; its GEMM "
                                             "timings go beside it as .csv)")
    ap.add_argument("--skip-sweep", action="store_true",
                    help="measure no curves: check the blocks against the curves --like has in the catalogue")
    ap.add_argument("--quick", action="store_true", help="small sweeps (a smoke test)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = ap.parse_args()
    from ppsim.inputs.hardware import get_device

    base = get_device(args.like)
    if args.skip_sweep:
        if base.gemm is None:
            ap.error(f"{args.like} has no measured curves in the catalogue: measure them (leave out --skip-sweep)")
    elif args.out is None:
        ap.error("--out is required (or --skip-sweep)")
    elif args.out.exists() and not args.force:
        ap.error(f"{args.out} exists; give another --out, or --force to replace it")

    from ppexec.measure.device_bench import Stopwatch

    t0 = time.perf_counter()
    name, device_file, peak = ((args.like, None, base.peak_flops("bf16")) if args.skip_sweep else sweep(args))
    blocks = QUICK_BLOCKS if args.quick else BLOCKS
    watch = Stopwatch(args.device)
    attention_report(blocks, peak, base.efficiency, watch)
    block_report(blocks, args.like, (name, device_file), watch)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
