"""ppsim against NVIDIA's published mixture-of-experts runs (issue 33's development set).

The rows are ``bench/data/published_moe.yaml``: every MoE pretraining row of the Megatron-Bridge
performance tables (25.09 to 26.08), with the recipe settings that ran them and each model's
architecture (``bench/data/published_moe.md`` says how it was made). Each row ppsim can express is
turned into a scenario by the rules below, the same for every row, and its step predicted against
the published one (the global batch's tokens over the published tokens/s/GPU and the GPU count).
Nothing is fitted to any row.

The rules (what ppsim assumes where a row is silent is printed with it):

- the model: the row's architecture (DeepSeek-V3 and Kimi K2 with multi-head latent attention and
  their dense first layers, Qwen3 with heads of 128), with the multi-token-prediction modules its
  recipe sets (``mtp_num_layers``: DeepSeek-V3's one, on the last stage, as its layout's ``m``),
  GPT-OSS with its sliding windows (``window_size`` (128, 0) on all but every
  ``window_attn_skip_freq``-th layer); biases and attention sinks not counted;
- the layout: TP, PP, VP, EP, ETP as the row gives them, data parallelism the rest; the blocks per
  virtual stage from the recipe's ``pipeline_model_parallel_layout`` (``t`` a block, ``|`` a virtual
  stage; ``E``, ``m``, ``L`` the embedding, the MTP layer and the loss; its stage count sets VP
  where the table's differs), else Megatron's even split (with the embedding and loss counted as
  layers where the recipe says so);
- routing balanced (the recipes force it: ``moe_router_force_load_balancing``), dropless;
- the schedule: Megatron's combined 1F1B (``combined-1f1b``: the all-to-alls hidden under the other
  micro-batch's compute) where the recipe sets ``overlap_moe_expert_parallel_comm`` (40 rows), with
  its ``delay_wgrad_compute`` (``training.delay_wgrad``); elsewhere (interleaved) 1F1B with the all-to-alls
  exposed; the flex dispatcher as the recipe's backend (``moe_dispatcher: hybridep`` or ``deepep``:
  a token crosses the network once per destination node and goes once to each device it has
  experts on, at the share of each link's rate the kernels were measured to reach; with
  ``--copy-dispatch`` priced as the all-to-all it replaces; no recipe sets group-limited routing); where
  HybridEP's all-to-alls overlap compute (combined 1F1B), its kernels hold the recipe's
  ``moe_hybridep_num_sms`` of the device's SMs meanwhile (``training.moe_comm_sms``);
- selective recomputation as the recipe lists its modules (``recompute_modules``: ``core_attn``,
  ``mla_up_proj``, ``moe_act``, ``layernorm``, ``mlp``, ``shared_experts``, ``moe``, each priced);
- precision, devices, the distributed optimizer, its overlaps and its buckets as
  ``bench/published_modern.py`` takes them; the attention in FP8 where the recipe sets
  ``fp8_dot_product_attention`` under an FP8 recipe (``training.fp8_attention``);
- Nemotron 3's hybrid layers from its pattern (``model.pattern``: Mamba-2, attention, MoE layers
  each its own), its vocabulary from its Hugging Face config where the recipe reads the tokenizer;
- not expressible (reported, not predicted): a model whose architecture the sources do not give
  (Nemotron 3 Super and Ultra: built from Hugging Face configs the repository does not hold),
  multi-token prediction in a hybrid model.

    .venv/bin/python bench/published_moe.py [--rows ID_PREFIX] [--json FILE] [--gemm-curves] [--copy-dispatch]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import published_modern as dense  # noqa: E402  # the dense set's rules for precision, devices, partitions

from ppsim.inputs.choices import RecomputeModule  # noqa: E402
from ppsim.inputs.megatron_layout import blocks_per_stage, parse_layout  # noqa: E402
from ppsim.inputs.overrides import sequence_parallel_for_experts  # noqa: E402

DATA = ROOT / "bench" / "data" / "published_moe.yaml"

PRICED_MODULES = get_args(RecomputeModule)  #: the selective recomputation modules ppsim prices
#: Nemotron 3 Nano's vocabulary, which its recipe leaves to the Hugging Face tokenizer (its config: 131,072)
HYBRID_VOCAB = 131072
MLA_MODELS = ("DeepSeekV3", "Kimi-K2")


#: the architectures the rows' repository does not write (it reads them from Hugging Face at run
#: time), from Megatron-LM@d98e8a64 (bench/data/published_moe.md gives the files and lines):
#: Nemotron 3 Super's release test config, Nemotron 3 Ultra's ModelOpt config; both latent MoEs whose
#: MTP module is one `*E` block repeated at each depth (Megatron-Bridge's recipes: mtp_num_layers 2,
#: mtp_use_repeated_layer)
FOUND_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "Nemotron-3-Super": {
        "num_layers": 88, "hidden_size": 4096, "num_attention_heads": 32, "num_query_groups": 2, "kv_channels": 128,
        "ffn_hidden_size": 2688, "vocab_size": 131072,
        "hybrid_layer_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
        "mamba_num_heads": 128, "mamba_head_dim": 64, "mamba_state_dim": 128, "mamba_num_groups": 8,
        "num_moe_experts": 512, "moe_router_topk": 22, "moe_ffn_hidden_size": 2688,
        "moe_shared_expert_intermediate_size": 5376, "moe_latent_size": 1024, "mtp_use_repeated_layer": True},
    "Nemotron-3-Ultra": {
        "num_layers": 108, "hidden_size": 8192, "num_attention_heads": 64, "num_query_groups": 2, "kv_channels": 128,
        "ffn_hidden_size": 5120, "vocab_size": 131072,
        "hybrid_layer_pattern": "MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*"
                                "EMEMEM*EMEMEMEM*EMEMEMEME",
        "mamba_num_heads": 256, "mamba_head_dim": 64, "mamba_state_dim": 128, "mamba_num_groups": 8,
        "num_moe_experts": 512, "moe_router_topk": 22, "moe_ffn_hidden_size": 5120,
        "moe_shared_expert_intermediate_size": 10240, "moe_latent_size": 2048, "mtp_use_repeated_layer": True},
}


def architecture(row: dict[str, Any]) -> dict[str, Any]:
    """The row's model architecture: the one its sources give, or one found since (FOUND_ARCHITECTURES)."""
    arch = row["architecture"]
    if not arch.get("num_layers") and row["model"] in FOUND_ARCHITECTURES:
        return {**arch, **FOUND_ARCHITECTURES[row["model"]]}
    return arch


def unexpressible(row: dict[str, Any]) -> str | None:
    """Why ppsim cannot describe the row yet, or None."""
    if not architecture(row).get("num_layers"):
        return "the sources do not give the model's architecture"
    if not row["tokens_per_s_per_gpu"]:
        return "no tokens/s published"
    return None


def first_dense(arch: dict[str, Any]) -> int:
    """The dense layers before the first MoE one."""
    if arch.get("first_k_dense_layers"):
        return int(arch["first_k_dense_layers"])
    freq = str(arch.get("moe_layer_freq") or "")
    found = re.match(r"\[0\]\s*\*\s*(\d+)", freq) or re.match(r"\[0\]\s*\+", freq)
    if found is None:
        return 0
    return int(found.group(1)) if found.groups() else 1


def model_section(row: dict[str, Any]) -> dict[str, Any]:
    arch = architecture(row)
    model: dict[str, Any] = {
        "layers": arch["num_layers"], "hidden": arch["hidden_size"], "heads": arch["num_attention_heads"],
        "ffn_hidden": arch["ffn_hidden_size"], "seq_len": row["seq_len"], "vocab": arch["vocab_size"],
        "mlp": "swiglu", "positions": "rope", "dropout": False,
        "moe": {"experts": arch["num_moe_experts"], "top_k": arch["moe_router_topk"],
                "ffn_hidden": arch["moe_ffn_hidden_size"], "dense_layers": first_dense(arch)},
    }
    if arch.get("moe_shared_expert_intermediate_size"):
        model["moe"].update(shared_experts=1, shared_ffn_hidden=arch["moe_shared_expert_intermediate_size"])
    if arch.get("moe_latent_size"):
        model["moe"]["latent"] = int(arch["moe_latent_size"])
    if row["model"] in MLA_MODELS:
        model["mla"] = {"q_lora_rank": arch.get("q_lora_rank"), "kv_lora_rank": arch["kv_lora_rank"],
                        "qk_nope_head_dim": arch.get("qk_head_dim", 128),
                        "qk_rope_head_dim": arch.get("qk_pos_emb_head_dim", 64),
                        "v_head_dim": arch.get("v_head_dim", 128)}
    else:
        model["kv_heads"] = arch["num_query_groups"]
        model["head_dim"] = arch["kv_channels"]
    if arch.get("hybrid_layer_pattern"):  # Nemotron 3: Mamba-2, attention and MoE layers, each its own
        model.update(pattern=arch["hybrid_layer_pattern"], mlp="gelu",  # squared ReLU: two matrices, as GELU's
                     vocab=arch.get("vocab_size") or HYBRID_VOCAB,
                     mamba={"heads": arch["mamba_num_heads"], "head_dim": arch["mamba_head_dim"],
                            "state": arch["mamba_state_dim"], "groups": arch["mamba_num_groups"]})
        model["moe"].pop("dense_layers")
    window = arch.get("window_size")
    if window and window[0] > 0:  # Megatron's (keys before, keys after) of each query: (w, 0)
        model["attention_window"] = int(window[0])
        if arch.get("window_attn_skip_freq"):
            model["full_attention_every"] = int(arch["window_attn_skip_freq"])
    return model


def layout_partition(layout: str) -> list[int]:
    """Blocks per virtual stage of a Megatron ``pipeline_model_parallel_layout`` string (the text
    before any remark after a space, as the data writes some), read as Megatron reads it
    (:mod:`ppsim.inputs.megatron_layout`)."""
    return blocks_per_stage(parse_layout(layout.split()[0]))


def scenario_data(row: dict[str, Any], gemm_curves: bool = False, copy_dispatch: bool = False
                  ) -> tuple[dict[str, Any], list[str]]:
    """The row as a ppsim scenario, and what was assumed where its sources are silent
    (``copy_dispatch``: the flex dispatcher's rows priced as NCCL's all-to-all, a message per token copy)."""
    settings, arch = row.get("recipe_settings") or {}, architecture(row)
    device = dense.DEVICES[row["gpu"]][0]
    tp, pp, vp, cp, gpus = row["tp"], row["pp"], row["vp"] or 1, row["cp"] or 1, row["gpus"]
    dp = gpus // (tp * pp * cp)
    assumed = ["routing balanced, dropless"]
    # Megatron's combined 1F1B where the recipe overlaps the all-to-alls (it needs pp = 1 or virtual stages)
    combined = bool(settings.get("overlap_moe_expert_parallel_comm"))
    if not combined:
        assumed.append("the expert-parallel all-to-alls exposed (the recipe does not overlap them)")
    model = model_section(row)
    if "pattern" in model:
        assumed.append("Nemotron 3's vocabulary of 131,072 from its Hugging Face config (its recipe reads the "
                       "tokenizer's) and its squared-ReLU MLPs priced as GELU's two matrices (with biases)")
    # the recipe's MTP modules, on the last stage as its layout puts them, but where the table says the
    # run had none ("DeepSeekV3 (w/o MTP)": its published FLOPs per token leave them out too)
    if settings.get("mtp_num_layers") and "w/o MTP" not in str(row.get("model_as_written", "")):
        model["mtp_layers"] = int(settings["mtp_num_layers"])
        if arch.get("mtp_use_repeated_layer") or settings.get("mtp_use_repeated_layer"):
            model["mtp_repeated"] = True
    modules = list(settings.get("recompute_modules") or [])
    unpriced = [m for m in modules if m not in PRICED_MODULES]
    if unpriced:
        assumed.append(f"selective recomputation of {', '.join(sorted(set(unpriced)))} priced as none")
    layout = settings.get("pipeline_model_parallel_layout")
    if layout:
        partition: list[int] | str = layout_partition(str(layout))
        if len(partition) != pp * vp and len(partition) % pp == 0:  # the layout is what ran
            vp = len(partition) // pp
            assumed.append("virtual stages from the recipe's pipeline layout where the table's VP differs")
    else:
        accounted = bool(settings.get("account_for_embedding_in_pipeline_split"))
        partition = dense.megatron_partition(model["layers"], pp * vp, accounted)
    training: dict[str, Any] = {
        "global_batch": row["gbs"], "micro_batch": row["mbs"] or 1, "flash_attention": True,
        "sequence_parallel": bool(settings.get("sequence_parallel")) and tp > 1,
        "zero_stage": 3 if row.get("fsdp") or settings.get("use_megatron_fsdp") else 1 if dp * cp > 1 else 0,
        "zero_reduce": "reduce_scatter",
        "overlap_grad_reduce": settings.get("overlap_grad_reduce", True) is not False,
    }
    training["overlap_param_gather"] = bool(settings.get("overlap_param_gather")) and training["zero_stage"] == 1
    training["bucket_mb"] = dense.megatron_bucket_mb(dp) if training["overlap_grad_reduce"] else dense.ONE_BUCKET_MB
    if settings.get("recompute_granularity") == "full":
        training["recompute"] = "full"
    elif settings.get("recompute_granularity") == "selective":  # Megatron's modules: unset, the attention core
        listed = ["core_attn"] if settings.get("recompute_modules") is None else modules
        priced = [m for m in listed if m in PRICED_MODULES]
        if priced:
            training.update(recompute="selective", recompute_modules=priced)
    sequence_parallel_for_experts({"tensor_parallel": tp, "expert_parallel": row["ep"]}, training)
    training["tp_comm_overlap"] = bool(settings.get("tp_comm_overlap_effective")) and training["sequence_parallel"]
    # Megatron's delayed weight grads, beside the combined 1F1B that needs them
    training["delay_wgrad"] = combined and bool(settings.get("delay_wgrad_compute")) and row["ep"] * (row.get("etp") or 1) > 1
    # Megatron's flex dispatcher: DeepEP's or HybridEP's kernels, as the recipe names them (with
    # --copy-dispatch priced as the all-to-all it replaces, one message per token copy)
    if not copy_dispatch and settings.get("moe_token_dispatcher_type") == "flex":
        training["moe_dispatcher"] = "hybridep" if settings.get("moe_flex_dispatcher_backend") == "hybridep" else "deepep"
    # HybridEP's kernels take the recipe's SMs from the compute they overlap (combined 1F1B's)
    sms = settings.get("moe_hybridep_num_sms")
    if (settings.get("moe_token_dispatcher_type") == "flex" and settings.get("moe_flex_dispatcher_backend") == "hybridep"
            and isinstance(sms, int) and combined):
        training["moe_comm_sms"] = sms
    training.update(host_launches(settings, model, assumed))
    if row["precision"] != "BF16":
        key, recipe = dense.narrow_recipe(row)
        training[key] = recipe
        training["low_precision_params"] = "param_gather=True" in str(settings.get("precision_recipe", ""))
        training.update(dense.high_precision_layers(settings))
        if settings.get("fp8_dot_product_attention") is True:
            if key == "fp8":
                training["fp8_attention"] = True
            else:
                assumed.append("the attention in 16 bits (its recipe sets FP8 attention, which ppsim prices "
                               "under an FP8 recipe, not FP4)")
    data = {
        "name": row["id"], "model": model,
        "pipeline": {"stages": pp, "chunks": vp, "partition": partition,
                     "schedule": "combined-1f1b" if combined else "interleaved-1f1b" if vp > 1 else "1f1b"},
        "training": training, "tensor_parallel": tp, "context_parallel": cp, "data_parallel": dp,
        "expert_parallel": row["ep"], "expert_tensor_parallel": row.get("etp") or 1,
        "hardware": {"device": device, "gemm_curves": gemm_curves},
        "cluster": dense.cluster_section(row["gpu"], gpus, assumed),
    }
    return data, assumed


#: what Megatron's legacy per-layer CUDA graphs (r0.1.0's enable_cuda_graph) can capture of a dropless
#: MoE layer: not the experts, whose token counts change from step to step
LEGACY_LAYER_GRAPHS = ["attn", "moe_router", "moe_preprocess"]


def host_launches(settings: dict[str, Any], model: dict[str, Any], assumed: list[str]) -> dict[str, Any]:
    """The training keys that say which kernels the host launches one by one: the recipe's CUDA
    graph scopes (those of layers the model has), router fusion, Transformer Engine's fused grouped MLP."""
    impl, scope = str(settings.get("cuda_graph_impl")), settings.get("cuda_graph_scope")
    if impl == "full_iteration":
        graphs = ["full_iteration"]
    elif impl == "transformer_engine":
        graphs = [x for x in scope or [] if x != "mamba" or "pattern" in model]
    elif impl.startswith("enable_cuda_graph=True"):
        graphs = LEGACY_LAYER_GRAPHS + (["mamba"] if "pattern" in model else [])
        assumed.append("the legacy per-layer CUDA graphs as graphs of the attention, the router and the "
                       "dispatcher's preprocessing (a dropless MoE layer's experts stay eager)")
    else:
        graphs = []
    return {"cuda_graphs": graphs, "moe_router_fusion": bool(settings.get("moe_router_fusion")),
            "fused_grouped_mlp": bool(settings.get("te_op_fuser_cutedsl_fused_grouped_mlp"))}


def main() -> None:
    dense.run(dense.Bench(DATA, __doc__.splitlines()[0], unexpressible, scenario_data, "TP PP VP EP",
                          lambda row: f"{row['tp']} {row['pp']} {row['vp'] or 1} {row['ep']}",
                          lambda row: str(row["precision"]), 0.2,
                          (("--copy-dispatch", "the flex dispatcher's rows priced as NCCL's all-to-all (a message "
                            "per token copy, at the links' rates)"),)))


if __name__ == "__main__":
    main()
