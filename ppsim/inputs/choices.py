"""The words a scenario and the command line choose from, declared once: the scenario's keys and the
options that override them (``ppsim.cli.common``) take these types. Light to import (the command
line declares its options with them before anything is read)."""

from __future__ import annotations

from typing import Literal

Dtype = Literal["bf16", "fp16", "fp32"]
#: how the layers are split into stages (a list of counts, in a scenario, is the third way)
PartitionMode = Literal["uniform", "balanced"]
#: what a send does: blocks until the peer posted its receive (gloo, NCCL pairs), until the data has
#: arrived, or not at all (posted)
Comm = Literal["rendezvous", "eager", "async"]
#: what a split backward keeps from its input grad to its weight grad: torch's autograd graph (all
#: the forward saved, and the output gradients), or a weight-gradient store (each weight op's input
#: and output gradient; the rest freed at the input grad)
SplitBackward = Literal["autograd", "store"]
#: activation recomputation: none, the attention core, or the whole block
#: Transformer Engine's FP8 recipes (ppsim.costs.low_precision)
Fp8Recipe = Literal["tensorwise", "delayed", "blockwise", "mxfp8"]
Fp4Recipe = Literal["nvfp4"]
Recompute = Literal["none", "selective", "full"]
#: what selective recomputation recomputes (Megatron's --recompute-modules; those ppsim prices)
RecomputeModule = Literal["core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "shared_experts", "moe"]
#: what CUDA graphs capture (Megatron's --cuda-graph-scope): a layer's attention, dense MLP, whole MoE
#: MLP, MoE router, the MoE dispatcher's preprocessing, Mamba mixer; or the whole step
CudaGraphScope = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"]
#: what runs the simulation's processes: auto (the clock-free kernel on static links, the clocked one
#: on a fabric), clocked, immediate (no clock: static links only), simpy (SimPy itself, the reference
#: the others are tested against: an extra)
KernelChoice = Literal["auto", "clocked", "immediate", "simpy"]
