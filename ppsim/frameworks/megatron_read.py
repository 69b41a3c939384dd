"""Megatron-LM's command-line arguments read back into a ppsim scenario mapping: what
``ppsim import`` does with an argument list (a ``pretrain_gpt.py`` command line, a file of
arguments, or the bash array ``ppsim export --to megatron`` writes). The reverse of
:mod:`ppsim.frameworks.megatron`, through the same names table; Megatron's defaults where a flag
is absent (LayerNorm-free pricing aside: tied embeddings, learned positions, dropout 0.1, fp32).

What Megatron does not say is the cluster: the data-parallel size is the GPUs over t x p x cp,
so the GPUs come from ``gpus`` (or the base scenario's plan); the device and the network from the
base scenario.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, get_args

from ppsim.errors import ScenarioError
from ppsim.frameworks.names import MEGATRON as N
from ppsim.frameworks.placement import base_devices
from ppsim.inputs.choices import CudaGraphScope
from ppsim.inputs.megatron_layout import blocks_per_stage, check_layout, parse_layout
from ppsim.inputs.scenario import BUCKET_MB, DTYPE_BYTES
from ppsim.plan import schedules as registry

FIELD = "megatron arguments"
UNREAD_SHOWN = 12  #: the flags a note names of those the import does not read
#: flags that take no value (the rest take one, or several: --recompute-modules, --hierarchical-...)
_SWITCHES = {N[k].name for k in ("sequence_parallel", "distributed_optimizer", "overlap_grad_reduce",
                                 "overlap_param_gather", "tp_comm_overlap", "moe_overlap", "delay_wgrad",
                                 "fp8_param_gather", "gqa", "swiglu", "untie", "bf16", "fp16", "grouped_gemm", "mla",
                                 "first_last_bf16", "fp8_attention", "router_fusion", "op_fuser")}


#: the largest bucket a scenario takes: one bucket of every gradient
ONE_BUCKET_MB = BUCKET_MB[1]


def megatron_bucket_params(data_parallel: int) -> int:
    """Megatron-Core's gradient bucket where ``--ddp-bucket-size`` is not given: max(40M, 1M x d)
    parameters (``megatron/core/distributed/distributed_data_parallel.py``: larger data-parallel
    groups take larger buckets, so that their ring collectives stay bandwidth-bound)."""
    return max(40_000_000, 1_000_000 * data_parallel)


def _bucket_mb(f: dict[str, list[str]], data_parallel: int, dtype: str, notes: list[str]) -> float:
    """training.bucket_mb of a Megatron run: --ddp-bucket-size (what ``ppsim export`` writes: the
    buckets ppsim priced), else Megatron-Core's own: one bucket of every gradient without
    --overlap-grad-reduce, :func:`megatron_bucket_params` with it; held within bucket_mb's bounds."""
    given = _one(f, "ddp_bucket_size")
    if given is None and N["overlap_grad_reduce"].name not in f:
        return ONE_BUCKET_MB
    params = given or megatron_bucket_params(data_parallel)
    mb = params * DTYPE_BYTES[dtype] / 1e6
    held = min(max(mb, BUCKET_MB[0]), BUCKET_MB[1])
    if held != mb:
        notes.append(f"--ddp-bucket-size {params} is {mb:g} MB of gradients, priced as {held:g} MB (training.bucket_mb "
                     f"takes {BUCKET_MB[0]:g} to {BUCKET_MB[1]:,.0f})")
    return held


def argument_tokens(text: str) -> list[str]:
    """The words of a Megatron command line or argument file, from its first ``--flag`` on: shell
    comments, line continuations, a bash array's brackets and what comes before the first flag
    (``torchrun ... pretrain_gpt.py``) dropped."""
    text = text.replace("\\\n", " ")
    words = [w for w in shlex.split(text, comments=True) if not re.fullmatch(r"[A-Za-z_]\w*=\(|\(|\)", w)]
    first = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
    return words[first:]


def flags(words: list[str]) -> dict[str, list[str]]:
    """Each flag and its values (a switch: none); a flag given twice keeps its last values, as argparse does."""
    out: dict[str, list[str]] = {}
    key = None
    for w in words:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            key = name
            out[key] = [value] if eq else []
            if key in _SWITCHES:
                key = None
        elif key is not None:
            out[key].append(w)
    return out


def _one(f: dict[str, list[str]], key: str, kind: type = int) -> Any:
    values = f.get(N[key].name)
    if values is None:
        return None
    if len(values) != 1:
        raise ScenarioError(f"{N[key].name} takes one value, got {len(values)}", field=FIELD)
    try:
        return kind(values[0])
    except ValueError:
        raise ScenarioError(f"{N[key].name} must be {'a whole number' if kind is int else 'a number'}, got "
                            f"{values[0]!r}", field=FIELD) from None


def scenario_mapping(f: dict[str, list[str]], base: dict[str, Any], gpus: int | None, notes: list[str]
                     ) -> dict[str, Any]:
    """The scenario the arguments describe, laid over ``base`` (a scenario mapping: its device, cluster
    and what Megatron does not say)."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    model = _model(f, dict(data.get("model") or {}), notes)
    data["model"] = model
    t = _one(f, "tensor_parallel") or 1
    p = _one(f, "stages") or 1
    cp = _one(f, "context_parallel") or 1
    for key, value in (("tensor_parallel", t), ("context_parallel", cp)):
        data[key] = value
    if (ep := _one(f, "expert_parallel")) is not None:
        data["expert_parallel"] = ep
    if (etp := _one(f, "expert_tensor")) is not None:
        data["expert_tensor_parallel"] = etp
    devices = gpus or base_devices(base)
    if devices is None:
        raise ScenarioError("Megatron's arguments do not say how many GPUs run the job (its data-parallel size is "
                            "the GPUs over tensor x pipeline x context parallel): give --gpus", field="--gpus")
    if devices % (t * p * cp):
        raise ScenarioError(f"{devices} GPUs do not split into tensor x pipeline x context parallel = {t} x {p} x {cp}; "
                            "give --gpus a multiple of it", field="--gpus")
    d = devices // (t * p * cp)
    data["data_parallel"] = d
    training = dict(data.get("training") or {})
    pipeline = dict(data.get("pipeline") or {})
    mb = _one(f, "micro_batch") or 1
    gb = _one(f, "global_batch") or mb * d
    if gb % (mb * d):
        raise ScenarioError(f"--global-batch-size {gb} is not a multiple of --micro-batch-size x data parallel = "
                            f"{mb} x {d}", field=FIELD)
    training["micro_batch"] = mb
    training.pop("global_batch", None)
    training["bucket_mb"] = _bucket_mb(f, d, str(model.get("dtype", "bf16")), notes)
    pipeline["stages"] = p
    pipeline["microbatches"] = gb // (mb * d)
    _layout(f, model, p, pipeline, notes)
    _training(f, training, notes)
    _graphs_and_fusions(f, model, training, notes)
    unread = sorted(set(f) - {n.name for n in N.values()})
    if unread:
        more = len(unread) - UNREAD_SHOWN
        shown = ", ".join(unread[:UNREAD_SHOWN]) + (f" and {more} more" if more > 0 else "")
        notes.append(f"not read (ppsim's plan does not depend on them, or it does not model them): {shown}")
    data["training"], data["pipeline"] = training, pipeline
    return data


def _graphs_and_fusions(f: dict[str, list[str]], model: dict[str, Any], tr: dict[str, Any], notes: list[str]) -> None:
    """What the host launches one by one: the CUDA graphs' implementation and scopes, the router's
    fusion, Transformer Engine's fused grouped MLP (Megatron's defaults: none of them)."""
    impl = (f.get(N["cuda_graph_impl"].name) or ["none"])[0]
    modules = f.get(N["cuda_graph_modules"].name) or f.get(N["cuda_graph_scope"].name) or []
    moe, hybrid = "moe" in model, "M" in str(model.get("pattern") or "")
    graphs: list[str] = []
    if impl == "full_iteration" or "full_iteration" in modules:
        graphs = ["full_iteration"]
    elif impl in ("local", "transformer_engine"):
        graphs = [m for m in modules if m != "full"]  # "full": the deprecated name of the whole layer
        if not graphs:
            graphs = ["attn", *(["moe_router", "moe_preprocess"] if moe else ["mlp"]), *(["mamba"] if hybrid else [])]
            notes.append(f"--cuda-graph-impl {impl} without --cuda-graph-modules graphs whole layers: read as "
                         f"{', '.join(graphs)} (a dropless MoE layer's experts are launched one by one)")
        unknown = sorted(set(graphs) - set(get_args(CudaGraphScope)))
        if unknown:
            raise ScenarioError(f"--cuda-graph-modules {' '.join(unknown)}: ppsim knows "
                                f"{', '.join(get_args(CudaGraphScope)[:-1])}", field=FIELD)
    elif impl != "none":
        raise ScenarioError(f"--cuda-graph-impl {impl}: Megatron's are none, local, transformer_engine and "
                            "full_iteration", field=FIELD)
    tr["cuda_graphs"] = graphs
    tr["moe_router_fusion"] = N["router_fusion"].name in f and moe
    tr["fused_grouped_mlp"] = N["op_fuser"].name in f and N["grouped_gemm"].name in f and moe


def _layout(f: dict[str, list[str]], model: dict[str, Any], p: int, pipeline: dict[str, Any], notes: list[str]) -> None:
    """Virtual stages and the partition: the layout string, or the virtual-stage counts and the
    first and last stages' block counts."""
    layers = int(model["layers"])
    layout = f.get(N["layout"].name)
    chunks = 1
    if layout:
        stages = parse_layout(layout[0])
        check_layout(stages, layers, p, int(model.get("mtp_layers") or 0))
        pipeline["partition"] = blocks_per_stage(stages)
        chunks = len(stages) // p
    else:
        if (v := _one(f, "virtual_stages")) is not None:
            chunks = v
        elif (per := _one(f, "layers_per_virtual_stage")) is not None:
            chunks = layers // (p * per)
        first, last = (f.get(N[k].name) for k in ("first_stage_layers", "last_stage_layers"))
        if first or last:
            n = p * chunks
            a = int(first[0]) if first else None
            b = int(last[0]) if last else None
            rest = layers - (a or 0) - (b or 0)
            inner = n - (a is not None) - (b is not None)
            if inner <= 0 or rest % inner:
                raise ScenarioError(f"the first and last stages' blocks leave {rest} for {inner} stages: Megatron needs "
                                    "them to divide evenly", field=FIELD)
            pipeline["partition"] = ([a] if a is not None else []) + [rest // inner] * inner + ([b] if b is not None else [])
        else:
            pipeline["partition"] = "uniform"  # Megatron's own split: the blocks evenly
    pipeline["chunks"] = chunks
    overlap = N["moe_overlap"].name in f
    if p > 1 or overlap:  # Megatron's own schedule of these virtual stages, with the all-to-all overlap or not
        kinds = [info for info in registry.native(registry.MEGATRON) if info.overlaps == overlap]
        fits = [info for info in kinds if info.allows_chunks(p, chunks)]
        pipeline["schedule"] = (fits or kinds)[0].name  # none that fits: the scenario's checks say why
    else:  # one stage without the overlap: plain gradient accumulation, whatever the base's schedule
        pipeline["schedule"] = registry.DEFAULT


def _training(f: dict[str, list[str]], tr: dict[str, Any], notes: list[str]) -> None:
    granularity = f.get(N["recompute_granularity"].name)
    if granularity == ["full"]:
        tr["recompute"] = "full"
        method, count = f.get(N["recompute_method"].name), _one(f, "recompute_layers")
        if method == ["block"] and count:
            tr["recompute_layers"] = count
        elif method == ["uniform"] and count and count > 1:
            notes.append(f"--recompute-method uniform checkpoints groups of {count} blocks; ppsim recomputes each "
                         "block (the same work, more activations kept)")
    elif granularity == ["selective"]:
        tr["recompute"] = "selective"
        modules = f.get(N["recompute_modules"].name)
        if modules and modules != ["core_attn"]:
            tr["recompute_modules"] = modules
    else:
        tr["recompute"] = "none"
    tr["zero_stage"] = 1 if N["distributed_optimizer"].name in f else 0
    for key, field in (("sequence_parallel", "sequence_parallel"), ("overlap_grad_reduce", "overlap_grad_reduce"),
                       ("overlap_param_gather", "overlap_param_gather"), ("tp_comm_overlap", "tp_comm_overlap"),
                       ("delay_wgrad", "delay_wgrad")):
        tr[field] = N[key].name in f
    if (comm := f.get(N["cp_comm"].name)) is not None:
        if len(set(comm)) != 1:
            raise ScenarioError("--cp-comm-type per layer is not read: give one type", field=FIELD)
        tr["cp_comm"] = comm[0].replace("allgather", "all_gather")
        if tr["cp_comm"] == "a2a+p2p" and (sizes := f.get(N["cp_hierarchy"].name)):
            tr["cp_a2a_size"] = int(sizes[0])
    # Megatron trains in 16 bits unless told otherwise: no FP8 or FP4 flag is no FP8 or FP4, whatever the base's
    tr["fp8"] = tr["fp4"] = None
    if (recipe := f.get(N["fp8_recipe"].name)) is not None or N["fp8_format"].name in f:
        tr["fp8"] = (recipe or ["delayed"])[0]  # Megatron's default recipe
    if N["fp4_format"].name in f:
        tr["fp4"] = (f.get(N["fp4_recipe"].name) or ["nvfp4"])[0]
    tr["low_precision_params"] = N["fp8_param_gather"].name in f
    tr["fp8_attention"] = N["fp8_attention"].name in f and tr.get("fp8") is not None
    if N["fp8_attention"].name in f and not tr["fp8_attention"]:
        notes.append("--fp8-dot-product-attention without an FP8 recipe: ppsim prices FP8 attention under training.fp8, "
                     "so this attention is priced in 16 bits")
    if N["first_last_bf16"].name in f:  # Megatron keeps one layer at each end unless told otherwise
        tr["high_precision_first_layers"] = _one(f, "bf16_at_start") if N["bf16_at_start"].name in f else 1
        tr["high_precision_last_layers"] = _one(f, "bf16_at_end") if N["bf16_at_end"].name in f else 1
    if (clip := _one(f, "clip_grad", float)) is not None:
        tr["grad_clip"] = clip
    backend = f.get(N["attention_backend"].name, ["auto"])[0]
    tr["flash_attention"] = backend in ("flash", "fused", "auto")
    # Transformer Engine's fused attention (auto's choice on Hopper and Blackwell); the default, also
    # unfused, where a base scenario's flash2 would otherwise stay beside an attention the files unfuse
    tr["attention_kernel"] = "cudnn"
    if backend == "flash":
        version = _one(f, "flash_attention_version")
        tr["attention_kernel"] = "flash2" if version in (None, 2) else "cudnn"
        if version is None:
            notes.append("--attention-backend flash is read as FlashAttention-2, the flash-attn package's (Transformer "
                         "Engine runs FlashAttention-3 instead where it is installed, on Hopper: not measured here)")
        elif version != 2:
            notes.append(f"--flash-attention-version {version} is not measured here: its attention is priced as "
                         "cuDNN's fused kernel")
    if f.get(N["dispatcher"].name) == ["flex"]:  # DeepEP's kernels unless HybridEP's are named
        backend = f.get(N["flex_backend"].name, ["deepep"])[0]
        tr["moe_dispatcher"] = "hybridep" if backend == "hybridep" else "deepep"
        if backend not in ("deepep", "hybridep"):
            notes.append(f"--moe-flex-dispatcher-backend {backend} is read as DeepEP's kernels (ppsim knows deepep "
                         "and hybridep)")


def _window(f: dict[str, list[str]], model: dict[str, Any]) -> None:
    """Sliding-window attention: --window-size "w,0" (w keys before each query; -1: every key) and
    --window-attn-skip-freq N (every N-th layer attends to every key); none given, none."""
    model.pop("attention_window", None)
    model.pop("full_attention_every", None)
    if (size := f.get(N["window_size"].name)) is None:
        return
    try:
        left, right = (int(x) for x in size[0].strip("()").split(","))
    except ValueError:
        raise ScenarioError(f"--window-size {' '.join(size)}: give the window as left,right (GPT-OSS: 128,0)",
                            field=FIELD) from None
    if right != 0:
        raise ScenarioError(f"--window-size {left},{right}: ppsim prices causal windows, whose right side is 0",
                            field=FIELD)
    if left < 0:  # Megatron's "infinite" window: every earlier key
        return
    model["attention_window"] = left
    if (skip := f.get(N["window_skip"].name)) is not None:
        if not skip[0].isdigit():
            raise ScenarioError(f"--window-attn-skip-freq {skip[0]}: ppsim reads a whole number N (every N-th layer "
                                "attends to every key), not a list", field=FIELD)
        model["full_attention_every"] = int(skip[0])


def _model(f: dict[str, list[str]], model: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    for key, field in (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("seq_len", "seq_len"),
                       ("vocab", "vocab"), ("ffn_hidden", "ffn_hidden"), ("head_dim", "head_dim"),
                       ("mtp_layers", "mtp_layers")):
        if (value := _one(f, key)) is not None:
            model[field] = value
    missing = [N[k].name for k in ("layers", "hidden", "heads", "seq_len", "vocab") if k not in model]
    if missing:
        raise ScenarioError(f"the arguments do not give {', '.join(missing)} (nor does a --base scenario): add them "
                            "(--vocab-size is the tokenizer's vocabulary)", field=FIELD)
    if N["gqa"].name in f:
        model["kv_heads"] = _one(f, "kv_heads") or 1
    model["mlp"] = "swiglu" if N["swiglu"].name in f else "gelu"
    positions = f.get(N["positions"].name, ["learned_absolute"])[0]
    model["positions"] = "rope" if positions in ("rope", "yarn") else "learned"
    model["tie_embeddings"] = N["untie"].name not in f
    dropouts = [_one(f, k, float) for k in ("attention_dropout", "hidden_dropout")]
    model["dropout"] = any(x is None or x > 0 for x in dropouts)
    model["dtype"] = "bf16" if N["bf16"].name in f else "fp16" if N["fp16"].name in f else "fp32"
    _window(f, model)
    if (experts := _one(f, "experts")) is not None:
        moe = dict(model.get("moe") or {})
        moe["experts"] = experts
        moe["top_k"] = _one(f, "top_k") or 2
        moe["ffn_hidden"] = _one(f, "expert_ffn") or model.get("ffn_hidden") or 4 * int(model["hidden"])
        if (shared := _one(f, "shared_ffn")) is not None:
            moe["shared_experts"], moe["shared_ffn_hidden"] = 1, shared
        if (freq := f.get(N["moe_layers"].name)) is not None:
            moe["dense_layers"], moe["layer_freq"] = moe_layers(freq[0], int(model["layers"]))
        if (limit := _one(f, "router_group_topk")) is not None and (_one(f, "router_groups") or 1) > 1:
            moe["node_limit"] = limit  # an expert group a node, as Megatron's DeepSeek recipes group them
        model["moe"] = moe
    if N["mla"].name in f:
        mla: dict[str, Any] = {"kv_lora_rank": _one(f, "kv_lora_rank") or 512}
        for key, field in (("q_lora_rank", "q_lora_rank"), ("qk_head_dim", "qk_nope_head_dim"),
                           ("qk_pos_dim", "qk_rope_head_dim"), ("v_head_dim", "v_head_dim")):
            if (value := _one(f, key)) is not None:
                mla[field] = value
        model["mla"] = mla
    return model


def moe_layers(text: str, layers: int) -> tuple[int, int]:
    """(dense layers first, then every n-th a MoE layer) of --moe-layer-freq: an int n, or a list
    expression of runs ``([0]*3+[1]*58)`` / ``[0,1,1]`` (read without evaluating it)."""
    if text.strip().isdigit():
        return 0, int(text)
    body = text.strip().strip("()")
    flags_: list[int] = []
    for part in body.split("+"):
        m = re.fullmatch(r"\s*\[([01\s,]*)\](?:\s*\*\s*(\d+))?\s*", part)
        if not m:
            raise ScenarioError(f"--moe-layer-freq {text!r}: ppsim reads an int or runs such as ([0]*3+[1]*58)",
                                field=FIELD)
        items = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
        flags_ += items * int(m.group(2) or 1)
    if len(flags_) != layers:
        raise ScenarioError(f"--moe-layer-freq lists {len(flags_)} layers, the model has {layers}", field=FIELD)
    dense = next((i for i, x in enumerate(flags_) if x), layers)
    rest = flags_[dense:]
    gaps = {b - a for a, b in zip([i for i, x in enumerate(rest) if x], [i for i, x in enumerate(rest) if x][1:])}
    freq = gaps.pop() if len(gaps) == 1 else 1 if not gaps else 0
    if freq == 0 or rest != [int(i % freq == 0) for i in range(len(rest))]:
        raise ScenarioError(f"--moe-layer-freq {text!r}: ppsim describes dense layers first, then every n-th layer a "
                            "MoE layer; this pattern is not one", field=FIELD)
    return dense, freq
