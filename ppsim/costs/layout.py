"""The model laid out over the virtual stages: each stage's blocks (with the embedding on the first
and the LM head on the last), their FLOPs, parameters, held activations and model states, and the
stage-to-stage message. Every cost builder starts from the same layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypedDict

from ppsim.costs.context_parallel import exchange_buffer_bytes, exchange_bytes
from ppsim.costs.gemms import PassGemms
from ppsim.costs.layers import LayerCost, joined, mtp_module
from ppsim.costs.memory import StaticMemory, static_memory
from ppsim.costs.moe import reduced_params
from ppsim.costs.table import MoEPhases, StageCost
from ppsim.costs.tensor_parallel import message_split
from ppsim.inputs.scenario import DTYPE_BYTES, MOE_KINDS, ModelSpec, Scenario

if TYPE_CHECKING:  # pragma: no cover - typing.Unpack is Python 3.11+
    from typing_extensions import Unpack


class _PassTimes(TypedDict):
    forward_ms: float
    backward_ms: float


class StageTimes(_PassTimes, total=False):
    """The times of a :class:`~ppsim.costs.table.StageCost` a cost builder works out (the layout gives the rest)."""

    weight_grad_ms: float
    optimizer_ms: float
    clip_ms: float
    allreduce_ms: float
    allreduce_buckets: int
    forward_comm_ms: float
    backward_comm_ms: float
    forward_overlap_ms: float
    backward_overlap_ms: float
    self_hidden_ms: float
    launch_wait_ms: float
    moe_phases: MoEPhases | None


@dataclass(frozen=True)
class StageShape:
    """One virtual stage's share of the model, per micro-batch (FLOPs, activations) or per step."""

    blocks: int
    forward_flops: float
    input_grad_flops: float
    weight_grad_flops: float
    recompute_flops: float  #: the part of input_grad_flops that recomputes the forward
    masked_flops: float  #: executed, not the model's (ppsim.costs.layers.LayerCost.masked_flops)
    params: int
    activation_bytes: int
    memory: StaticMemory
    forward_bytes: float = 0.0  #: HBM bytes of the elementwise work (ppsim.costs.elementwise)
    backward_bytes: float = 0.0
    gemms: PassGemms = PassGemms()  #: the matmuls behind the FLOPs, with their shapes (ppsim.costs.gemms)
    step_bytes: float = 0.0  #: HBM bytes once per step beside the optimizer's (FP8 weight casts)
    offloaded_bytes: int = 0  #: activations per micro-batch copied to host and back (training.offload_layers)
    plain_blocks: int = 0  #: blocks beyond training.recompute_layers: not recomputed though the scenario recomputes
    lead_blocks: int = 0  #: the blocks of the kind whose GEMMs lead ``gemms`` (all of them unless MoE and dense mix)
    expert_params: int = 0  #: the part of params that are routed experts' (ppsim.costs.moe)
    moe_blocks: int = 0  #: blocks with experts
    alltoall_bytes: float = 0.0  #: one of a MoE block's all-to-alls, per device
    tp_collective_blocks: float = 0.0  #: dense blocks' worth of tensor-parallel collectives (a MoE block: less)
    #: the parameters whose reduction over the stage's replicas moves what its dense and expert ones
    #: really do over theirs (ppsim.costs.moe.reduced_params); params without experts
    reduced_params: float = 0.0
    #: what a split backward keeps from a micro-batch's input grad to its weight grad beyond its
    #: activations (:func:`split_backward_bytes`)
    weight_grad_pending_bytes: int = 0
    #: each of its MoE kinds' halves (:attr:`BlockKinds.halves`) with how many of its blocks are of
    #: that kind, in the order they first come, where the schedule pairs them
    moe_halves: tuple[tuple[int, tuple[LayerCost | None, LayerCost]], ...] | None = None
    #: kernels the host launches one by one in each pass (ppsim.costs.launches)
    forward_launches: float = 0.0
    backward_launches: float = 0.0


#: the order of the kinds of layer in a stage's GEMM lists (:meth:`ModelSpec.layer_kind`'s words)
KIND_ORDER = ("block", "block/window", "moe", "moe/window", "*", "-", "E", "M")
#: what a layer's kind carries when its linear layers stay in the model's dtype under FP8 / FP4
WIDE = "/wide"


def kind_rank(kind: str) -> tuple[int, bool]:
    """Where ``kind`` goes in a stage's GEMM lists: its base kind's place, each before its wide twin."""
    base = kind.removesuffix(WIDE)
    return KIND_ORDER.index(base), base != kind


def scenario_layer_kinds(s: Scenario) -> tuple[str, ...]:
    """Every layer's kind (:meth:`~ppsim.inputs.scenario.ModelSpec.layer_kinds`), those that
    ``training.high_precision_first_layers`` / ``_last_layers`` keep out of FP8 / FP4 marked :data:`WIDE`."""
    assert s.model is not None  # only a model has layers
    kinds = s.model.layer_kinds
    first, last = s.training.high_precision_first_layers, s.training.high_precision_last_layers
    if not first and not last:
        return kinds
    n = len(kinds)
    return tuple(k + WIDE if i < first or i >= n - last else k for i, k in enumerate(kinds))


@dataclass(frozen=True)
class BlockKinds:
    """The kinds of layer a model's layers are (:meth:`~ppsim.inputs.scenario.ModelSpec.layer_kind`:
    a block, with experts, attending through a window; or a hybrid pattern's characters), each as
    (its cost in the scenario's recompute mode, its twin without recomputation for the blocks of a
    virtual stage beyond ``training.recompute_layers``, or None)."""

    kinds: dict[str, tuple[LayerCost, LayerCost | None]]
    #: each MoE kind's halves, (what runs before its dispatch: the attention, None in a hybrid
    #: pattern's MoE layer; its experts), where an overlapped schedule pairs them phase by phase
    halves: dict[str, tuple[LayerCost | None, LayerCost]] = field(default_factory=dict)

    @classmethod
    def single(cls, block: LayerCost) -> BlockKinds:
        """Every layer ``block``."""
        return cls({"block": (block, None)})

    def family(self, kind: str) -> tuple[LayerCost, LayerCost | None]:
        """(the layer, its plain twin) of ``kind``; a model of one kind of block has only ``block``."""
        return self.kinds.get(kind) or self.kinds["block"]

    @property
    def alltoall_bytes(self) -> float:
        """One of a MoE layer's all-to-alls, per device (0 without experts)."""
        return max(x.alltoall_bytes for x, _ in self.kinds.values())


@dataclass(frozen=True)
class Layout:
    """The virtual stages' shapes (none when the scenario has no model) and the messages between them."""

    stages: tuple[StageShape, ...]
    message_bytes: int  #: one stage-to-stage message (each tensor rank's 1/t of it when split: ppsim.costs.tensor_parallel)
    activation_bytes: int  #: one whole s x b x h activation, what tensor parallelism all-reduces
    dtype_bytes: int
    pipes: int = 1  #: the copies of the model the stages form (DualPipe's two), each laid out alike

    def position(self, stage: int) -> int:
        """The place of virtual stage ``stage`` in its copy of the model (0: it holds the embedding)."""
        return stage % (len(self.stages) // self.pipes)

    @property
    def blocks(self) -> list[int] | None:
        """Blocks per virtual stage (None without a model)."""
        return [st.blocks for st in self.stages] if self.stages else None

    def stage_cost(self, stage: int, **times: Unpack[StageTimes]) -> StageCost:
        """A StageCost with ``times`` (forward_ms, backward_ms, ...) and what the layout knows of ``stage``."""
        if not self.stages:
            return StageCost(**times)
        st = self.stages[stage]
        return StageCost(grad_bytes=int(st.reduced_params * self.dtype_bytes), activation_bytes=st.activation_bytes,
                         weight_grad_pending_bytes=st.weight_grad_pending_bytes, params=st.params, layers=st.blocks,
                         moe_layers=st.moe_blocks, memory=st.memory, **times)


def lay_out(s: Scenario, blocks: Sequence[int] | None, layers: tuple[LayerCost, LayerCost, LayerCost] | None,
            stage_to_rank: Sequence[int] = (0,), kinds: BlockKinds | None = None, pipes: int = 1) -> Layout:
    """The layout of ``blocks`` per virtual stage of the (embedding, block, head) ``layers``; with
    tied embeddings and the first and last virtual stage on one rank (``stage_to_rank``) the head
    reuses the embedding's table, and only the embedding counts it. ``kinds``: the blocks when they
    are not all ``layers``' (MoE layers beside dense ones, blocks beyond ``training.recompute_layers``).
    ``pipes``: the stages form that many copies of the model (DualPipe), each with its embedding
    and head; ``blocks`` gives every copy's stages."""
    model = s.model
    dtype_bytes = DTYPE_BYTES[model.dtype] if model else 2
    # one device's s x b x h activation: its s / cp tokens under context parallelism
    whole = model.seq_len // s.context_parallel * s.training.micro_batch * model.hidden * dtype_bytes if model else 0
    message = whole // message_split(s.tensor_parallel, sequence_parallel=s.training.sequence_parallel,
                                     scatter_gather=s.pipeline.scatter_gather)
    if blocks is None or layers is None or model is None:
        return Layout((), message, whole, dtype_bytes, pipes)
    emb, block, head = layers
    kinds = kinds or BlockKinds.single(block)
    n = len(blocks) // pipes  # the stages of one copy
    if model.tie_embeddings and stage_to_rank[0] == stage_to_rank[-1]:
        head = replace(head, params=head.params - model.vocab * model.hidden // s.tensor_parallel)
    context_buffers = context_parallel_buffers(s, model)
    layer_kinds = scenario_layer_kinds(s)
    stages = []
    first = 0  # the stage's first block, counted over the whole model
    family_gemms: dict[tuple[str, int, int], PassGemms] = {}  # stages of as many blocks share their GEMM lists
    stage_gemms: dict[tuple[tuple[str, int, int], ...], PassGemms] = {}  # and inner stages of one make-up theirs
    # a stage is its blocks' kinds, how many recompute and whether it is a copy's first or last: the
    # stages alike share one shape (a deep pipeline's inner stages; the costs price each shape once)
    shapes: dict[tuple[tuple[str, ...], int, bool, bool], StageShape] = {}
    for k, count in ((k % n, count) for k, count in enumerate(blocks)):
        if k == 0:
            first = 0  # each copy's stages start at the model's first layer
        recomputed = min(count, s.training.recompute_layers or count)
        kind_at = layer_kinds[first:first + count]
        first += count
        alike = (tuple(kind_at), recomputed, k == 0, k == n - 1)
        if alike in shapes:
            stages.append(shapes[alike])
            continue
        moe_at = [kind.removesuffix(WIDE) in MOE_KINDS for kind in kind_at]
        stage_blocks: list[LayerCost] = []
        gemms = PassGemms()
        lead = 0
        make_up = []
        # each family's blocks, recomputed first (the order block_gemms lists them in)
        for family in sorted(set(kind_at), key=kind_rank):
            mine = [i for i, x in enumerate(kind_at) if x == family]
            full, plain = kinds.family(family)
            again = sum(i < recomputed for i in mine)
            stage_blocks += [full if i < recomputed else plain or full for i in mine]
            key = (family, len(mine), again)
            if key not in family_gemms:
                family_gemms[key] = block_gemms(full, plain, len(mine), again)
            gemms += family_gemms[key]
            make_up.append(key)
            lead = lead or len(mine)
        gemms = stage_gemms.setdefault(tuple(make_up), gemms)  # one object per make-up: priced once
        mtp = mtp_parts(s, layers, kinds, stage_to_rank) if k == n - 1 else []
        stage_blocks += mtp[::2]  # the modules' blocks, then their projections and head passes
        parts = stage_blocks + ([emb] if k == 0 else []) + ([head] if k == n - 1 else []) + mtp[1::2]
        offloaded = sum(x.activation_bytes for x in stage_blocks[:s.training.offload_layers])
        params = sum(x.params for x in parts)
        expert_params = sum(x.expert_params for x in stage_blocks)
        moe_blocks = sum(moe_at) + sum(x.alltoall_bytes > 0 for x in mtp[::2])
        paired = [kind for kind in kind_at if kind in kinds.halves]
        halves = tuple((paired.count(kind), kinds.halves[kind]) for kind in dict.fromkeys(paired)) or None
        stages.append(StageShape(
            blocks=count,
            forward_flops=sum(x.forward_flops for x in parts),
            input_grad_flops=sum(x.input_grad_flops for x in parts),
            weight_grad_flops=sum(x.weight_grad_flops for x in parts),
            recompute_flops=sum(x.recompute_flops for x in parts),
            masked_flops=sum(x.masked_flops for x in parts),
            params=params,
            activation_bytes=sum(x.activation_bytes for x in parts) - offloaded,
            offloaded_bytes=offloaded,
            plain_blocks=count - recomputed,
            lead_blocks=lead,
            expert_params=expert_params,
            moe_blocks=moe_blocks,
            alltoall_bytes=kinds.alltoall_bytes if moe_blocks else 0.0,
            tp_collective_blocks=sum(x.tp_collectives for x in stage_blocks),
            reduced_params=reduced_params(params - expert_params, expert_params, s.weight_replicas, s.expert_replicas),
            forward_bytes=sum(x.forward_bytes for x in parts),
            backward_bytes=sum(x.backward_bytes for x in parts),
            forward_launches=sum(x.forward_launches for x in parts),
            backward_launches=sum(x.backward_launches for x in parts),
            gemms=sum((x.gemms for x in parts[count:]), gemms),  # the MTP blocks' with the embedding's and head's
            step_bytes=sum(x.step_bytes for x in parts),
            weight_grad_pending_bytes=split_backward_bytes(s, parts, first_stage=k == 0),
            moe_halves=halves,
            memory=static_memory(params, dtype_bytes, zero_stage=s.training.zero_stage, data_parallel=s.weight_replicas,
                                 message_bytes=message, neighbours=(k > 0) + (k < n - 1),
                                 extra_weight_bytes=int(sum(x.extra_weight_bytes for x in parts)),
                                 expert_params=expert_params, expert_replicas=s.expert_replicas,
                                 workspace_bytes=context_buffers if count else 0,
                                 layers=tuple((x.params, int(x.extra_weight_bytes)) for x in parts)),
        ))
        shapes[alike] = stages[-1]
    return Layout(tuple(stages), message, whole, dtype_bytes, pipes)


def split_backward_bytes(s: Scenario, parts: Sequence[LayerCost], *, first_stage: bool) -> int:
    """What a stage of ``parts`` keeps per micro-batch from a split backward's input grad to its
    weight grad beyond its activations (``pipeline.split_backward``): as torch's runtime keeps it
    (none on a model's first stage, whose input grad torch skips: its input is token ids, and its
    weight grad runs the whole backward), or through a weight-gradient store."""
    if s.pipeline.input_grad_frees:
        return int(sum(x.weight_grad_store_bytes for x in parts))
    return 0 if first_stage else int(sum(x.weight_grad_pending_bytes for x in parts))


def context_parallel_buffers(s: Scenario, model: ModelSpec) -> int:
    """The bytes a block's context-parallel exchange holds beside its activations (0 without it)."""
    if s.context_parallel <= 1:
        return 0
    kv, q = exchange_bytes(model, s.training.micro_batch, s.context_parallel, s.tensor_parallel)
    return int(exchange_buffer_bytes(s.training.cp_comm, s.context_parallel, kv_bytes=kv, q_bytes=q,
                                     a2a_size=s.training.cp_a2a_size))


def mtp_parts(s: Scenario, layers: tuple[LayerCost, LayerCost, LayerCost], kinds: BlockKinds,
              stage_to_rank: Sequence[int]) -> list[LayerCost]:
    """The multi-token prediction modules of the last virtual stage (``model.mtp_layers``), each as
    (its block, its projection and head pass): the block a MoE layer's where the model's next layer
    would have experts, the word embeddings copied onto the stage when the first is on another rank."""
    model = s.model
    if model is None or not model.mtp_layers:
        return []
    if model.pattern is not None:  # a hybrid model's: its attention layer and its MoE (or MLP) layer, Nemotron 3's *E
        after = "E" if "E" in model.pattern else "-" if "-" in model.pattern else None
        block = joined("mtp_block", kinds.family("*")[0], *([kinds.family(after)[0]] if after else []))
    else:
        block = kinds.family("moe" if model.moe is not None and model.moe.is_moe(model.layers) else "block")[0]

    def module(copy: bool) -> LayerCost:
        return mtp_module(model, s.training.micro_batch, layers[2], s.tensor_parallel,
                          context_parallel=s.context_parallel, embedding_copy=copy)

    apart = stage_to_rank[0] != stage_to_rank[-1]  # one copy of the embeddings, read by every module
    parts: list[LayerCost] = []
    for i in range(model.mtp_layers):
        first = (block, module(apart and i == 0))
        # a repeated MTP layer runs its one copy of the weights at every depth
        parts += first if i == 0 or not model.mtp_repeated else [x.shared() for x in first]
    return parts


def block_gemms(block: LayerCost, plain: LayerCost | None, count: int, recomputed: int) -> PassGemms:
    """The GEMMs of ``count`` blocks of which ``recomputed`` run their forward again: every block's
    own GEMMs first, then what the recomputed ones add to their input grad (the order
    :func:`~ppsim.costs.analytic.linear_gemm_ms` reads one block's GEMMs in)."""
    if plain is None or recomputed == count:
        return block.gemms.times(count)
    again = list(block.gemms.input_grad)
    for g in plain.gemms.input_grad:
        again.remove(g)
    return plain.gemms.times(count) + PassGemms(input_grad=tuple(g.times(recomputed) for g in again))
