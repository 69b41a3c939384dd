"""ppsim against NVIDIA's published training runs of 2024-2026: issue 32's development set.

The rows are ``bench/data/published_modern.yaml``: every dense pretraining row of the NeMo and
Megatron-Bridge performance tables (H100, B200, GB200, GB300; BF16-free: FP8, MXFP8, NVFP4), with
the recipe settings that ran them. Each row is turned into a ppsim scenario by the rules below, the
same for every row, and its step time predicted; the published step is the global batch's tokens
over the published tokens/s/GPU and the GPU count. Printed: per row the published and predicted
step and the error, then the median |error|, the largest, how many rows are within 15 %, and every
row ppsim cannot express yet with the reason. Nothing is fitted to any row.

The rules (what ppsim assumes where a row is silent is printed with it):

- the model: the architecture of the row's model (the table below; the recipes' files, with the
  vocabulary where they are silent); Llama and Nemotron without dropout, GPT-3 with it;
- the device: the catalogue's ``h100-sxm``, ``b200`` (8 per node) or ``gb200`` / ``gb300`` (trays
  of 4 in NVLink racks of 72, of which a job larger than one rack uses 16 trays, 64 GPUs, so that its
  ranks split evenly over the racks), its datasheet peaks and flat efficiency, links as the catalogue gives;
- the layout: TP, PP, VP (the interleaved schedule with VP chunks, else 1F1B), the blocks split
  evenly over the virtual stages as Megatron does (Llama 3.1 405B's recipe counts the embedding and
  the loss as one layer each: the first and last virtual stage hold one block fewer), data parallelism
  the rest of the GPUs, micro-batches GBS / (MBS x DP); sequence parallelism where the recipe sets
  it (else with TP > 1, as Megatron-Bridge's performance recipes do), and with it the tensor-parallel
  communication overlapped with the GEMMs where the recipe says so (else on); FlashAttention (Transformer
  Engine's fused attention, cuDNN's; NeMo 24.03 and 24.07, whose launcher turned it off, the flash-attn
  package's FlashAttention-2); the distributed optimizer as ZeRO-1 with reduce-scatter, its gradient
  reduction overlapped with the backward and its parameter all-gather with the next forward where
  the recipe says so (else both on), in Megatron-Core's buckets of max(40M, 1M x DP) parameters (no
  recipe sets one);
- precision: FP8 and FP8-CS are current scaling (``tensorwise``; NeMo 24.07's FP8 is ``delayed``,
  the only recipe of its time), MXFP8 / FP8-MX ``mxfp8``; a 25.09 row without a precision is
  ``tensorwise`` (its parenthesized variant ``mxfp8``); FP8 weights where the recipe sets
  ``fp8_param_gather``; the first and last layers its ``first_last_layers_bf16`` keeps in BF16
  (``num_layers_at_start_in_bf16`` / ``_end_``, 0 where unset);
- context parallelism: CP ranks, their K/V by Megatron's default p2p ring;
- pipeline sends and receives: every recipe with PP > 1 sets ``overlap_p2p_comm``, which is
  ppsim's ``pipeline.comm: async`` (the default);
- NVFP4 is ``training.fp4: nvfp4``;
- Megatron FSDP is ZeRO-3 over the data-parallel replicas, activation offloading
  ``training.offload_layers`` (the recipe's ``cpu_offloading_num_layers``);
- recomputation as the recipe sets it (Megatron's block method: ``training.recompute_layers``);
- the long-sequence tables publish model TFLOP/s alone: the published step is the batch's model
  FLOPs as NeMo counted them in that release (``nemo_flops_per_token``: the attention's s x s in
  full, as NeMo did until 2025-08) over those, micro-batch 1, FP8 NeMo's default ``delayed``.

    .venv/bin/python bench/published_modern.py [--rows ID_PREFIX] [--json FILE] [--gemm-curves]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsim.errors import PpsimError  # noqa: E402
from ppsim.frameworks.megatron_read import ONE_BUCKET_MB, megatron_bucket_params  # noqa: E402
from ppsim.inputs.scenario import parse_scenario  # noqa: E402

DATA = ROOT / "bench" / "data" / "published_modern.yaml"


@dataclass(frozen=True)
class Arch:
    layers: int
    hidden: int
    heads: int
    ffn: int
    kv_heads: int | None
    vocab: int
    llama: bool  #: SwiGLU, RoPE, RMSNorm, untied, no dropout (else GPT: GELU, learned positions, tied, dropout)
    assumed: str = ""  #: what the row's sources do not say
    accounted: bool = False  #: the recipe counts the embedding and the loss as layers of the pipeline split


LLAMA3_VOCAB = 128256
MODELS: dict[str, Arch] = {
    "Llama3-8B": Arch(32, 4096, 32, 14336, 8, LLAMA3_VOCAB, True),
    "Llama3-70B": Arch(80, 8192, 64, 28672, 8, LLAMA3_VOCAB, True),
    "Llama3.1-405B": Arch(126, 16384, 128, 53248, 8, LLAMA3_VOCAB, True, accounted=True),
    "LLAMA2-7B": Arch(32, 4096, 32, 11008, None, 32000, True, "vocabulary 32,000 (Llama 2's tokenizer)"),
    "LLAMA2-13B": Arch(40, 5120, 40, 13824, None, 32000, True, "vocabulary 32,000 (Llama 2's tokenizer)"),
    "LLAMA2-70B": Arch(80, 8192, 64, 28672, 8, 32000, True, "vocabulary 32,000 (Llama 2's tokenizer)"),
    "GPT3-5B": Arch(24, 4096, 32, 16384, None, 51200, False, "vocabulary 51,200 (GPT-2's, padded); GELU"),
    "GPT3-20B": Arch(44, 6144, 48, 24576, None, 51200, False, "vocabulary 51,200 (GPT-2's, padded); GELU"),
    "GPT3-175B": Arch(96, 12288, 96, 49152, None, 51200, False, "vocabulary 51,200 (GPT-2's, padded); GELU"),
    # squared-ReLU MLPs: two matrices, as ppsim's GELU MLP (the same matmuls)
    "Nemotron-8B": Arch(32, 4096, 32, 16384, None, 256000, True,
                        "vocabulary 256,000; squared ReLU priced as a two-matrix MLP"),
    "Nemotron-22B": Arch(40, 6144, 48, 24576, None, 256000, True,
                         "vocabulary 256,000; squared ReLU priced as a two-matrix MLP"),
    "Nemotron-340B": Arch(96, 18432, 96, 73728, 8, 256000, True,
                          "vocabulary 256,000; squared ReLU priced as a two-matrix MLP"),
}
ALIASES = {"LLAMA3-8B": "Llama3-8B", "LLAMA3-70B": "Llama3-70B"}
#: a table's GPU: (the catalogue's device, GPUs per node, NVLink domain where it spans nodes); B300 for the MoE set
DEVICES = {"H100": ("h100-sxm", 8, None), "B200": ("b200", 8, None), "B300": ("b300", 8, None),
           "GB200": ("gb200", 4, 72), "GB300": ("gb300", 4, 72)}


def unexpressible(row: dict[str, Any]) -> str | None:
    """Why ppsim cannot describe the row yet, or None."""
    if row["tokens_per_s_per_gpu"] is None and not row["release"].startswith(NEMO_FULL_ATTENTION_RELEASES):
        return "published as model TFLOP/s alone, whose FLOP count is not known for its release"
    return None


#: NeMo's releases whose model FLOPs (nemo/utils/flops_formulas.py) counted the attention in full,
#: before NVIDIA/NeMo@6251117f (2025-08-09, "Discount FLOPs in dot-product att") halved it for causal masks
NEMO_FULL_ATTENTION_RELEASES = ("24.03", "24.07", "25.04")

#: NeMo's releases launched by a NeMo-Framework-Launcher that turned cuDNN's fused attention off in
#: every job (launcher_scripts/conf/config.yaml, tags 24.05 and 24.07: ``NVTE_FUSED_ATTN: 0 # Disable
#: cudnn FA until we've tested it more``; tag 24.05's container is nemo:24.03.01.framework), so that
#: Transformer Engine ran the flash-attn package's FlashAttention-2
FLASH2_RELEASES = ("24.03", "24.07")


def nemo_flops_per_token(arch: Arch, seq_len: int) -> float:
    """Model FLOPs per token (forward and backward) as NeMo's llama2 / llama3 formulas counted them
    up to 2025-08: the linear layers (with grouped-query K and V and a gated MLP), the attention's
    two matmuls over the whole s x s (not halved for the causal mask), the LM head."""
    h, layers, heads = arch.hidden, arch.layers, arch.heads
    groups = arch.kv_heads or heads
    return layers * h * h * (12 + 12 * groups / heads + 18 * arch.ffn / h + 12 * seq_len / h
                             + 6 * arch.vocab / (layers * h))


def recompute_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The training keys of a recipe's recomputation (Megatron's granularity, method, layer count)."""
    text = str(settings.get("recompute", ""))
    if "recompute_granularity=full" not in text:
        return {}
    count = re.search(r"recompute_num_layers=(\d+)", text)
    if "recompute_method=block" in text and count:
        return {"recompute": "full", "recompute_layers": int(count.group(1))}
    return {"recompute": "full"}


def narrow_recipe(row: dict[str, Any]) -> tuple[str, str]:
    """(the scenario key, the recipe) of the row's precision."""
    precision, variant = row["precision"], row["variant"]
    if precision == "NVFP4":
        return "fp4", "nvfp4"
    return "fp8", fp8_recipe(precision, variant, row["release"])


def high_precision_layers(settings: dict[str, Any]) -> dict[str, int]:
    """The layers the recipe keeps out of FP8 / FP4 (Megatron-Bridge's ``first_last_layers_bf16``
    with ``num_layers_at_start_in_bf16`` / ``_end_``, 0 where unset: its MixedPrecisionConfig's
    defaults), as ppsim's training keys; none without ``first_last_layers_bf16``."""
    recipe = str(settings.get("precision_recipe") or "")
    if "first_last_layers_bf16=True" not in recipe:
        return {}
    found = {end: re.search(rf"num_layers_at_{end}_in_bf16=(\d+)", recipe) for end in ("start", "end")}
    return {f"high_precision_{'first' if end == 'start' else 'last'}_layers": int(m.group(1))
            for end, m in found.items() if m and int(m.group(1))}


def fp8_recipe(precision: str | None, variant: str, release: str) -> str:
    if precision in ("MXFP8", "FP8-MX") or (precision is None and variant == "parenthesized"):
        return "mxfp8"
    if release.startswith(NEMO_FULL_ATTENTION_RELEASES):  # NeMo's only FP8 recipe then, its default after
        return "delayed"
    return "tensorwise"


def scenario_data(row: dict[str, Any], gemm_curves: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The row as a ppsim scenario, and what was assumed where the row's sources are silent."""
    arch = MODELS[ALIASES.get(row["model"], row["model"])]
    device = DEVICES[row["gpu"]][0]
    settings = row.get("recipe_settings", {})
    tp, pp, vp, cp, gpus = row["tp"], row["pp"], row["vp"] or 1, row["cp"] or 1, row["gpus"]
    dp = gpus // (tp * pp * cp)
    assumed = [arch.assumed] if arch.assumed else []
    sp = settings.get("sequence_parallel")
    if sp is None:
        sp = tp > 1
        assumed.append(f"sequence parallel {'on' if sp else 'off'} (TP {tp})")
    if "recompute" not in settings:
        assumed.append("no recomputation")
    micro_batch = row["mbs"]
    if micro_batch is None:
        micro_batch = 1
        assumed.append("micro-batch 1 (the long-sequence tables give none)")
    if row["tokens_per_s_per_gpu"] is None:
        assumed.append("the published step from its model TFLOP/s and NeMo's FLOP count of its release (the "
                       "attention counted in full)")
    kernel = "flash2" if row["release"].startswith(FLASH2_RELEASES) else "cudnn"
    if kernel == "flash2":
        assumed.append("the attention by FlashAttention-2 (NeMo's launcher of the release set NVTE_FUSED_ATTN=0; "
                       "the tables do not say how they were launched)")
    if cp > 1:
        assumed.append("context parallelism's K/V by the p2p ring (Megatron's default cp_comm_type; no recipe sets it)")
    overlap = settings.get("overlap_grad_reduce")
    if overlap is None:
        overlap = True
        assumed.append("gradient reduce-scatter overlapped with the backward")
    param_overlap = settings.get("overlap_param_gather")
    if param_overlap is None:
        param_overlap = True
        assumed.append("parameter all-gather overlapped with the next forward")
    tp_overlap = settings.get("tp_comm_overlap_effective")
    if tp_overlap is None:
        tp_overlap = sp and tp > 1
        if tp > 1:
            assumed.append(f"tensor-parallel communication overlap {'on' if tp_overlap else 'off'} (TP {tp})")
    fsdp = bool(row["fsdp"] or settings.get("use_megatron_fsdp"))
    offloaded = re.search(r"cpu_offloading_num_layers=(\d+)", str(settings.get("activation_cpu_offloading") or ""))
    key, recipe = narrow_recipe(row)
    low_precision_params = any(f"{k}_param_gather=True" in str(settings.get("precision_recipe", ""))
                               for k in ("fp8", "fp4"))
    model: dict[str, Any] = {
        "layers": arch.layers, "hidden": arch.hidden, "heads": arch.heads, "ffn_hidden": arch.ffn,
        "seq_len": row["seq_len"], "vocab": arch.vocab, "dtype": "bf16",
    }
    if arch.kv_heads:
        model["kv_heads"] = arch.kv_heads
    if arch.llama:
        model.update(mlp="swiglu" if "Nemotron" not in row["model"] else "gelu", positions="rope", dropout=False)
    else:
        model.update(tie_embeddings=True)
    data = {
        "name": row["id"],
        "model": model,
        "pipeline": {"stages": pp, "chunks": vp, "schedule": "interleaved-1f1b" if vp > 1 else "1f1b",
                     "partition": megatron_partition(arch.layers, pp * vp, arch.accounted)},
        "training": {"global_batch": row["gbs"], "micro_batch": micro_batch, "sequence_parallel": sp and tp > 1,
                     "flash_attention": True, "attention_kernel": kernel,
                     "tp_comm_overlap": bool(tp_overlap and sp and tp > 1), key: recipe,
                     "low_precision_params": low_precision_params, **high_precision_layers(settings),
                     "zero_stage": 3 if fsdp else 1 if dp * cp > 1 else 0,
                     "offload_layers": int(offloaded.group(1)) if offloaded else 0,
                     "zero_reduce": "reduce_scatter", "overlap_grad_reduce": overlap,
                     "overlap_param_gather": bool(param_overlap and dp * cp > 1 and not fsdp),
                     "bucket_mb": megatron_bucket_mb(dp) if overlap else ONE_BUCKET_MB, **recompute_settings(settings)},
        "tensor_parallel": tp,
        "context_parallel": cp,
        "data_parallel": dp,
        "hardware": {"device": device, "gemm_curves": gemm_curves},
        "cluster": cluster_section(row["gpu"], gpus, assumed),
    }
    return data, assumed


def megatron_bucket_mb(data_parallel: int) -> float:
    """Megatron-Core's gradient bucket where none is given (no recipe sets one), in MB of 2-byte
    gradients (the recipes reduce in bf16, ``grad_reduce_in_fp32`` off; Kimi K2's sets it on: not
    read): :func:`~ppsim.frameworks.megatron_read.megatron_bucket_params`; without the gradient
    reduction's overlap, one bucket of every gradient (:data:`ONE_BUCKET_MB`), as Megatron takes."""
    return megatron_bucket_params(data_parallel) * 2 / 1e6


def cluster_section(gpu: str, gpus: int, assumed: list[str]) -> dict[str, Any]:
    """The cluster a row's ``gpus`` devices of kind ``gpu`` make: nodes of the system's size, and
    for NVL72 racks their NVLink domain (a job larger than a rack: 64 GPUs of each, said in ``assumed``)."""
    _, per_node, domain = DEVICES[gpu]
    cluster: dict[str, Any] = {"nodes": max(1, gpus // per_node), "devices_per_node": min(per_node, gpus)}
    if domain:
        cluster["nvlink_domain"] = domain if gpus <= domain else 64
        if gpus > domain:
            assumed.append("a job larger than an NVL72 rack uses 64 GPUs (16 trays) of each")
    return cluster


def megatron_partition(layers: int, virtual_stages: int, accounted: bool) -> list[int] | str:
    """Blocks per virtual stage as Megatron splits them: evenly (``uniform``), or with the embedding
    and the loss each counted as a layer (``account_for_embedding/loss_in_pipeline_split``): the
    first and the last virtual stage one block fewer."""
    if not accounted:
        return "uniform"
    each, rest = divmod(layers + 2, virtual_stages)
    if rest:
        raise PpsimError(f"{layers} layers and the embedding and loss do not split evenly over {virtual_stages} "
                         "virtual stages", field="pipeline.partition")
    return [each - 1] + [each] * (virtual_stages - 2) + [each - 1] if virtual_stages > 1 else [layers]


def published_step_s(row: dict[str, Any]) -> float:
    """The published step: the global batch's tokens over the published tokens/s of all GPUs, or,
    where only model TFLOP/s are published, the batch's model FLOPs as NeMo counted them over those."""
    tokens = row["gbs"] * row["seq_len"]
    if row["tokens_per_s_per_gpu"] is not None:
        return tokens / (row["tokens_per_s_per_gpu"] * row["gpus"])
    flops = nemo_flops_per_token(MODELS[ALIASES.get(row["model"], row["model"])], row["seq_len"]) * tokens
    return flops / (row["model_tflops_per_gpu"] * 1e12 * row["gpus"])


@dataclass(frozen=True)
class Bench:
    """What differs between the benches of the development sets (this one, published_moe.py): their
    rows, which they can express, how a row becomes a scenario, and how its layout and precision print."""

    data: Path
    description: str
    unexpressible: Callable[[dict[str, Any]], str | None]
    #: (row, gemm_curves, **extra_flags) -> (the scenario mapping, what was assumed)
    scenario_data: Callable[..., tuple[dict[str, Any], list[str]]]
    layout_header: str  #: e.g. "TP PP VP"
    layout: Callable[[dict[str, Any]], str]
    precision: Callable[[dict[str, Any]], str]
    band: float  #: the issue's target: every row within this relative error
    #: the bench's own on/off flags, (``--flag``, help): each given to scenario_data as ``flag=``
    extra_flags: tuple[tuple[str, str], ...] = ()


def run(bench: Bench) -> None:
    """Predict the bench's rows and print each against its published step, the summary, what could
    not be expressed and what was assumed (``--rows``, ``--json``, ``--gemm-curves`` on the command line)."""
    ap = argparse.ArgumentParser(description=bench.description)
    ap.add_argument("--rows", default="", help="only rows whose id starts with this")
    ap.add_argument("--json", type=Path, help="write every row's figures to this file")
    ap.add_argument("--gemm-curves", action="store_true",
                    help="price the matmuls by the devices' measured curves (hardware.gemm_curves)")
    for flag, words in bench.extra_flags:
        ap.add_argument(flag, action="store_true", help=words)
    args = ap.parse_args()
    extra = {name: getattr(args, name) for name in (flag.lstrip("-").replace("-", "_") for flag, _ in bench.extra_flags)}
    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize

    rows = [r for r in yaml.safe_load(bench.data.read_text()) if r["id"].startswith(args.rows)]
    t0 = time.perf_counter()
    errors: list[float] = []
    skipped: dict[str, list[str]] = {}
    results = []
    width = len(bench.layout_header) + 1
    print(f"{'row':58s} {'GPUs':>5s} {bench.layout_header:>{width}s} {'prec':>6s} {'published s':>11s} "
          f"{'ppsim s':>8s} {'error':>7s}  fits")
    for row in rows:
        why = bench.unexpressible(row)
        if why:
            skipped.setdefault(why, []).append(row["id"])
            continue
        data, assumed = bench.scenario_data(row, args.gemm_curves, **extra)
        published = published_step_s(row)
        try:
            pred = predict(parse_scenario(data))
        except PpsimError as exc:
            skipped.setdefault(f"refused: {exc}", []).append(row["id"])
            continue
        summary = summarize(pred.trace, waits=False)
        step = summary.step_time_ms / 1e3
        error = step / published - 1
        errors.append(error)
        print(f"{row['id'][:58]:58s} {row['gpus']:5d} {bench.layout(row):>{width}s} {bench.precision(row):>6.6s} "
              f"{published:11.2f} {step:8.2f} {100 * error:+6.1f}%  "
              f"{'yes' if summary.fits else 'NO' if summary.fits is False else '?'}")
        results.append({"id": row["id"], "source": row["source"], "gpu": row["gpu"], "model": row["model"],
                        "published_step_s": published,
                        "predicted_step_s": step, "error": error, "fits": summary.fits, "assumed": assumed})
    if errors:
        within = sum(abs(e) <= bench.band for e in errors)
        print(f"\n{len(errors)} of {len(rows)} rows predicted in {time.perf_counter() - t0:.0f} s: median |error| "
              f"{100 * statistics.median(abs(e) for e in errors):.1f} %, median error "
              f"{100 * statistics.median(errors):+.1f} %, largest |error| {100 * max(abs(e) for e in errors):.1f} %, "
              f"{within} within {100 * bench.band:.0f} %")
        print_by(results, bench.band, "gpu", "system")
        print_by(results, bench.band, "model", "model")
    print(f"\nnot expressible yet ({sum(len(v) for v in skipped.values())} rows):")
    for why, ids in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ids):3d}  {why}")
    assumptions = sorted({a for r in results for a in r["assumed"]})
    if assumptions:
        print("\nassumed where a row's sources are silent: " + "; ".join(assumptions))
    if args.json:
        args.json.write_text(json.dumps({"rows": results, "not_expressible": skipped}, indent=1))


def print_by(results: list[dict[str, Any]], band: float, key: str, title: str) -> None:
    """The rows of each ``key`` (the system, the model): how many, their median error and its range,
    and how many lie within ``band``."""
    groups: dict[str, list[float]] = {}
    for r in results:
        groups.setdefault(str(r[key]), []).append(r["error"])
    width = max(6, *(len(name) for name in groups))
    print(f"by {title}: rows, median error (range), within {100 * band:.0f} %")
    for name, errs in sorted(groups.items()):
        print(f"  {name:{width}s} {len(errs):4d}  {100 * statistics.median(errs):+6.1f} % ({100 * min(errs):+.0f} .. "
              f"{100 * max(errs):+.0f})  {sum(abs(e) <= band for e in errs)}")


def main() -> None:
    run(Bench(DATA, __doc__.splitlines()[0], unexpressible, scenario_data, "TP PP VP",
              lambda row: f"{row['tp']} {row['pp']} {row['vp'] or 1}", lambda row: narrow_recipe(row)[1], 0.15))


if __name__ == "__main__":
    main()
