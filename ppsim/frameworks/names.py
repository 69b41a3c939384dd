"""Each framework's names for what a plan sets, one table per framework; every row says which
release (and file) of the framework it was read from, so that a renamed setting shows where to
look. The exporters and importers read names only from here; each framework's own schedules, and its
names for them, are the schedule registry's (``ScheduleInfo.native``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    """A framework's name for a setting of a plan, where it was read, and what of ppsim's it carries."""

    name: str
    carries: str
    read_from: str


def _table(*rows: tuple[str, str, str, str]) -> dict[str, Name]:
    """A framework's names from rows of (ppsim's key, the framework's name, what it carries, read from)."""
    return {key: Name(name, carries, read_from) for key, name, carries, read_from in rows}


_MEGATRON_ARGS = "Megatron-LM core 0.20.0, megatron/training/arguments.py (d96d76c0, 2026-08-22)"
_MEGATRON_LAYOUT = "Megatron-LM core 0.20.0, megatron/core/transformer/pipeline_parallel_layer_layout.py (d98e8a64)"
_MEGATRON_CONFIG = ("Megatron-LM core 0.20.0, TransformerConfig.flash_attention_version (d98e8a64), an argument "
                    "through megatron/training/arguments.py's ArgumentGroupFactory")
_MEGATRON_CONFIG_FLAG = ("Megatron-LM core 0.20.0, a TransformerConfig field (d98e8a64) as a switch through "
                         "megatron/training/arguments.py's ArgumentGroupFactory")
_MEGATRON_TE = "Megatron-LM core 0.20.0, TransformerConfig.cp_comm_type (d98e8a64): Transformer Engine's spelling"

#: Megatron-LM's command-line arguments (pretrain_gpt.py)
MEGATRON: dict[str, Name] = _table(
    ("tensor_parallel", "--tensor-model-parallel-size", "tensor_parallel", _MEGATRON_ARGS),
    ("stages", "--pipeline-model-parallel-size", "pipeline.stages", _MEGATRON_ARGS),
    ("context_parallel", "--context-parallel-size", "context_parallel", _MEGATRON_ARGS),
    ("cp_comm", "--cp-comm-type", "training.cp_comm (all_gather spelled as Transformer Engine reads it)", _MEGATRON_TE),
    ("cp_hierarchy", "--hierarchical-context-parallel-sizes", "training.cp_a2a_size, then cp over it", _MEGATRON_ARGS),
    ("expert_parallel", "--expert-model-parallel-size", "expert_parallel", _MEGATRON_ARGS),
    ("expert_tensor", "--expert-tensor-parallel-size", "expert_tensor_parallel", _MEGATRON_ARGS),
    ("sequence_parallel", "--sequence-parallel", "training.sequence_parallel", _MEGATRON_ARGS),
    ("layout", "--pipeline-model-parallel-layout", "pipeline.partition and chunks, the embedding and the loss",
     _MEGATRON_LAYOUT),
    ("virtual_stages", "--num-virtual-stages-per-pipeline-rank", "pipeline.chunks", _MEGATRON_ARGS),
    ("layers_per_virtual_stage", "--num-layers-per-virtual-pipeline-stage", "blocks / (stages x chunks)",
     _MEGATRON_ARGS),
    ("first_stage_layers", "--decoder-first-pipeline-num-layers", "pipeline.partition's first stage", _MEGATRON_ARGS),
    ("last_stage_layers", "--decoder-last-pipeline-num-layers", "pipeline.partition's last stage", _MEGATRON_ARGS),
    ("micro_batch", "--micro-batch-size", "training.micro_batch", _MEGATRON_ARGS),
    ("global_batch", "--global-batch-size", "micro_batch x microbatches x data_parallel", _MEGATRON_ARGS),
    ("recompute_granularity", "--recompute-granularity", "training.recompute (full, selective)", _MEGATRON_ARGS),
    ("recompute_method", "--recompute-method", "uniform: every block; block: the first n of each stage", _MEGATRON_ARGS),
    ("recompute_layers", "--recompute-num-layers", "training.recompute_layers", _MEGATRON_ARGS),
    ("recompute_modules", "--recompute-modules", "training.recompute_modules", _MEGATRON_ARGS),
    ("distributed_optimizer", "--use-distributed-optimizer", "training.zero_stage: 1", _MEGATRON_ARGS),
    ("overlap_grad_reduce", "--overlap-grad-reduce", "training.overlap_grad_reduce", _MEGATRON_ARGS),
    ("overlap_param_gather", "--overlap-param-gather", "training.overlap_param_gather", _MEGATRON_ARGS),
    ("ddp_bucket_size", "--ddp-bucket-size", "training.bucket_mb (in parameters of model.dtype)", _MEGATRON_ARGS),
    ("tp_comm_overlap", "--tp-comm-overlap", "training.tp_comm_overlap", _MEGATRON_ARGS),
    ("moe_overlap", "--overlap-moe-expert-parallel-comm", "pipeline.schedule: combined-1f1b", _MEGATRON_ARGS),
    ("delay_wgrad", "--delay-wgrad-compute", "training.delay_wgrad", _MEGATRON_ARGS),
    ("fp8_format", "--fp8-format", "training.fp8 (hybrid: E4M3 forward, E5M2 gradients)", _MEGATRON_ARGS),
    ("fp8_recipe", "--fp8-recipe", "training.fp8", _MEGATRON_ARGS),
    ("fp4_format", "--fp4-format", "training.fp4", _MEGATRON_ARGS),
    ("fp4_recipe", "--fp4-recipe", "training.fp4", _MEGATRON_ARGS),
    ("fp8_param_gather", "--fp8-param-gather", "training.low_precision_params", _MEGATRON_ARGS),
    ("fp8_attention", "--fp8-dot-product-attention", "training.fp8_attention", _MEGATRON_ARGS),
    ("first_last_bf16", "--first-last-layers-bf16",
     "training.high_precision_first_layers / high_precision_last_layers", _MEGATRON_ARGS),
    ("bf16_at_start", "--num-layers-at-start-in-bf16", "training.high_precision_first_layers", _MEGATRON_ARGS),
    ("bf16_at_end", "--num-layers-at-end-in-bf16", "training.high_precision_last_layers", _MEGATRON_ARGS),
    ("layers", "--num-layers", "model.layers", _MEGATRON_ARGS),
    ("hidden", "--hidden-size", "model.hidden", _MEGATRON_ARGS),
    ("ffn_hidden", "--ffn-hidden-size", "model.ffn_hidden", _MEGATRON_ARGS),
    ("heads", "--num-attention-heads", "model.heads", _MEGATRON_ARGS),
    ("gqa", "--group-query-attention", "model.kv_heads < model.heads", _MEGATRON_ARGS),
    ("kv_heads", "--num-query-groups", "model.kv_heads", _MEGATRON_ARGS),
    ("head_dim", "--kv-channels", "model.head_dim", _MEGATRON_ARGS),
    ("seq_len", "--seq-length", "model.seq_len", _MEGATRON_ARGS),
    ("window_size", "--window-size", "model.attention_window (w,0: each query and the w keys before it)",
     _MEGATRON_ARGS),
    ("window_skip", "--window-attn-skip-freq", "model.full_attention_every (every N-th layer attends to all keys)",
     _MEGATRON_ARGS),
    ("positions_table", "--max-position-embeddings", "model.seq_len", _MEGATRON_ARGS),
    ("vocab", "--vocab-size", "model.vocab (with a tokenizer that does not set it)", _MEGATRON_ARGS),
    ("swiglu", "--swiglu", "model.mlp: swiglu", _MEGATRON_ARGS),
    ("normalization", "--normalization", "RMSNorm for Llama-style models (ppsim prices both norms alike)",
     _MEGATRON_ARGS),
    ("positions", "--position-embedding-type", "model.positions (learned_absolute, rope)", _MEGATRON_ARGS),
    ("untie", "--untie-embeddings-and-output-weights", "model.tie_embeddings: false", _MEGATRON_ARGS),
    ("attention_dropout", "--attention-dropout", "model.dropout", _MEGATRON_ARGS),
    ("hidden_dropout", "--hidden-dropout", "model.dropout", _MEGATRON_ARGS),
    ("attention_backend", "--attention-backend",
     "training.flash_attention and attention_kernel (fused: cudnn, flash: the flash-attn package's, unfused)",
     _MEGATRON_ARGS),
    ("flash_attention_version", "--flash-attention-version", "training.attention_kernel: flash2 (2)", _MEGATRON_CONFIG),
    ("bf16", "--bf16", "model.dtype: bf16", _MEGATRON_ARGS),
    ("fp16", "--fp16", "model.dtype: fp16", _MEGATRON_ARGS),
    ("clip_grad", "--clip-grad", "training.grad_clip", _MEGATRON_ARGS),
    ("experts", "--num-experts", "model.moe.experts", _MEGATRON_ARGS),
    ("top_k", "--moe-router-topk", "model.moe.top_k", _MEGATRON_ARGS),
    ("expert_ffn", "--moe-ffn-hidden-size", "model.moe.ffn_hidden", _MEGATRON_ARGS),
    ("shared_ffn", "--moe-shared-expert-intermediate-size", "model.moe.shared_experts x shared_ffn_hidden",
     _MEGATRON_ARGS),
    ("moe_layers", "--moe-layer-freq", "model.moe.dense_layers and layer_freq (a list: 1 a MoE layer)",
     _MEGATRON_ARGS),
    ("dispatcher", "--moe-token-dispatcher-type", "training.moe_dispatcher: alltoall, or flex for deepep and hybridep",
     _MEGATRON_ARGS),
    ("flex_backend", "--moe-flex-dispatcher-backend", "training.moe_dispatcher: deepep or hybridep",
     _MEGATRON_ARGS),
    ("router_groups", "--moe-router-num-groups", "the nodes an expert-parallel group spans (an expert group a node)",
     _MEGATRON_ARGS),
    ("router_group_topk", "--moe-router-group-topk", "model.moe.node_limit", _MEGATRON_ARGS),
    ("grouped_gemm", "--moe-grouped-gemm", "the experts' grouped GEMMs ppsim prices", _MEGATRON_ARGS),
    ("router_fusion", "--moe-router-fusion", "training.moe_router_fusion", _MEGATRON_CONFIG_FLAG),
    ("op_fuser", "--use-transformer-engine-op-fuser",
     "training.fused_grouped_mlp (with --moe-grouped-gemm: Transformer Engine's fused grouped MLP)",
     _MEGATRON_CONFIG_FLAG),
    ("cuda_graph_impl", "--cuda-graph-impl",
     "training.cuda_graphs: none, local or transformer_engine (per-layer graphs), full_iteration", _MEGATRON_ARGS),
    ("cuda_graph_modules", "--cuda-graph-modules", "training.cuda_graphs' scopes (none: the whole layer)",
     _MEGATRON_ARGS),
    ("cuda_graph_scope", "--cuda-graph-scope", "training.cuda_graphs' scopes (--cuda-graph-modules' older name)",
     _MEGATRON_ARGS),
    ("mtp_layers", "--mtp-num-layers", "model.mtp_layers", _MEGATRON_ARGS),
    ("mla", "--multi-latent-attention", "model.mla", _MEGATRON_ARGS),
    ("q_lora_rank", "--q-lora-rank", "model.mla.q_lora_rank", _MEGATRON_ARGS),
    ("kv_lora_rank", "--kv-lora-rank", "model.mla.kv_lora_rank", _MEGATRON_ARGS),
    ("qk_head_dim", "--qk-head-dim", "model.mla.qk_nope_head_dim", _MEGATRON_ARGS),
    ("qk_pos_dim", "--qk-pos-emb-head-dim", "model.mla.qk_rope_head_dim", _MEGATRON_ARGS),
    ("v_head_dim", "--v-head-dim", "model.mla.v_head_dim", _MEGATRON_ARGS),
)

_TITAN = "torchtitan v0.2.2 (73a0e697), torchtitan/config/job_config.py: its last release with TOML configs"
_TITAN_PP = "torchtitan v0.2.2 (73a0e697), torchtitan/distributed/pipeline_parallel.py"

#: torchtitan's TOML keys (section.key)
TORCHTITAN: dict[str, Name] = _table(
    ("replicate", "parallelism.data_parallel_replicate_degree", "data_parallel without sharding", _TITAN),
    ("shard", "parallelism.data_parallel_shard_degree", "data_parallel under FSDP (ZeRO-3)", _TITAN),
    ("tensor_parallel", "parallelism.tensor_parallel_degree", "tensor_parallel", _TITAN),
    ("context_parallel", "parallelism.context_parallel_degree", "context_parallel", _TITAN),
    ("stages", "parallelism.pipeline_parallel_degree", "pipeline.stages (ranks, not virtual stages)", _TITAN),
    ("schedule", "parallelism.pipeline_parallel_schedule",
     "the placement torchtitan splits the model for (loop or V) and one or several stages a rank", _TITAN_PP),
    ("schedule_csv", "parallelism.pipeline_parallel_schedule_csv", "the plan's order, compute only", _TITAN_PP),
    ("microbatch_size", "parallelism.pipeline_parallel_microbatch_size", "training.micro_batch", _TITAN),
    ("fqns", "parallelism.module_fqns_per_model_part", "pipeline.partition: each stage's modules", _TITAN_PP),
    ("expert_parallel", "parallelism.expert_parallel_degree", "expert_parallel", _TITAN),
    ("expert_tensor", "parallelism.expert_tensor_parallel_degree", "expert_tensor_parallel (1 or t)", _TITAN),
    ("local_batch", "training.local_batch_size", "micro_batch x microbatches (a data-parallel rank's)", _TITAN),
    ("global_batch", "training.global_batch_size", "the global batch", _TITAN),
    ("seq_len", "training.seq_len", "model.seq_len", _TITAN),
    ("max_norm", "training.max_norm", "training.grad_clip", _TITAN),
    ("param_dtype", "training.mixed_precision_param", "model.dtype (bfloat16, float32)", _TITAN),
    ("ac_mode", "activation_checkpoint.mode", "training.recompute (none, selective, full)", _TITAN),
    ("ac_option", "activation_checkpoint.selective_ac_option", "op: per-operator selective checkpointing", _TITAN),
    ("converters", "model.converters", "training.fp8: the float8 or MX linear layers", _TITAN),
    ("float8_recipe", "quantize.linear.float8.recipe_name", "training.fp8: tensorwise", _TITAN),
    ("mx_recipe", "quantize.linear.mx.recipe_name", "training.fp8: mxfp8", _TITAN),
    ("model_name", "model.name",
     "the model family torchtitan builds (llama3, or with experts deepseek_v3 or qwen3: their module names)", _TITAN),
)

_DS_CONFIG = "DeepSpeed 0.19.6 (edaa7221), deepspeed/runtime/constants.py and config.py"
_DS_PIPE = "DeepSpeed 0.19.6 (edaa7221), deepspeed/runtime/pipe/module.py PipelineModule"

#: DeepSpeed's config keys and PipelineModule arguments
DEEPSPEED: dict[str, Name] = _table(
    ("global_batch", "train_batch_size", "micro_batch x microbatches x data_parallel", _DS_CONFIG),
    ("micro_batch", "train_micro_batch_size_per_gpu", "training.micro_batch", _DS_CONFIG),
    ("microbatches", "gradient_accumulation_steps", "pipeline.microbatches (the pipeline's micro-batches)", _DS_CONFIG),
    ("zero", "zero_optimization.stage", "training.zero_stage (0 or 1 with a pipeline)", _DS_CONFIG),
    ("bf16", "bf16.enabled", "model.dtype: bf16", _DS_CONFIG),
    ("fp16", "fp16.enabled", "model.dtype: fp16", _DS_CONFIG),
    ("clip", "gradient_clipping", "training.grad_clip", _DS_CONFIG),
    ("checkpoint_interval", "pipeline.activation_checkpoint_interval", "training.recompute: full (every block)",
     _DS_CONFIG),
    ("partition_method", "PipelineModule(partition_method=...)", "pipeline.partition (uniform, type:regex)", _DS_PIPE),
    ("parts", "PipelineModule.parts", "pipeline.partition: each stage's first layer, then the end", _DS_PIPE),
    ("topology", "PipeModelDataParallelTopology(num_pp, num_mp, num_dp)", "stages, tensor and data parallel", _DS_PIPE),
)
