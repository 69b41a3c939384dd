"""The scenario's costs: the model laid out over the virtual stages and priced by one of three
builders — explicit milliseconds (:mod:`~ppsim.costs.explicit`), a measured profile
(:mod:`~ppsim.costs.profiled`) or the model's FLOPs on the device's roofline
(:mod:`~ppsim.costs.analytic`) — plus the figures the metrics need (FLOPs, samples, tokens)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ppsim.costs.analytic import analytic_costs
from ppsim.costs.explicit import explicit_costs
from ppsim.costs.launches import launch_time_us, launched, layer_launches
from ppsim.costs.layers import LayerCost, LayerParts, gpt_layers
from ppsim.costs.layout import WIDE, BlockKinds, Layout, kind_rank, lay_out, mtp_parts, scenario_layer_kinds
from ppsim.costs.links import scenario_links
from ppsim.costs.low_precision import check_scenario_precision, scenario_precision
from ppsim.costs.mamba import mamba_layer
from ppsim.costs.measured import uses_curves
from ppsim.costs.moe import ExpertShard
from ppsim.costs.partition import Balance, balance, blocks_per_stage
from ppsim.costs.table import CostTable
from ppsim.errors import ScenarioError
from ppsim.inputs.choices import Recompute
from ppsim.inputs.hardware import DEFAULT_ATTENTION_KERNEL, STEP_SHARE, Device, get_device
from ppsim.inputs.scenario import MOE_KINDS, Scenario, TrainingSpec

if TYPE_CHECKING:  # pragma: no cover - a profile's reader is imported where a profile is used
    from ppsim.inputs.profile import Profile


@dataclass(frozen=True)
class Workload:
    """Costs plus the figures the metrics need (what one step does)."""

    costs: CostTable
    partition: list[int] | None  #: blocks per virtual stage, when a model is given
    model_flops_per_step: float | None  #: forward + backward FLOPs of all micro-batches and replicas
    forward_flops_per_step: float | None
    peak_flops_per_device: float | None
    samples_per_step: int
    tokens_per_step: int | None
    costs_from: str = "model"  #: which builder priced the stages: model (the datasheet), profile or explicit
    costs_source: str = ""  #: the same in words, with the figures or the file it used
    #: what the partition balanced, (counts, each layer's cost, first's extra, last's extra): one stage per
    #: rank, one copy (how even it came out is :meth:`balance`, worked out when asked: a search never asks)
    balanced_over: tuple[list[int], list[float], float, float] | None = None

    def balance(self) -> Balance | None:
        """How even the partition is (one stage per rank, one copy of the model; else None)."""
        return None if self.balanced_over is None else balance(*self.balanced_over)


def build_workload(s: Scenario, profile: Profile | None = None, stage_to_rank: tuple[int, ...] | None = None,
                   split_backward: bool = False, pipes: int = 1) -> Workload:
    """Costs of every virtual stage for the scenario: from explicit costs if given, else from a
    measured profile if given, else from the model's FLOPs on the device's roofline.
    ``stage_to_rank``: the schedule's placement of the virtual stages (Megatron's loop placement
    when None); the partition balances each rank's work and the links join the ranks it names.
    ``split_backward``: the schedule runs every backward as I then W (a profile prices the split).
    ``pipes``: the virtual stages form that many copies of the model (DualPipe's two): one copy's
    stages are partitioned (``pipeline.partition`` lists them) and every copy laid out alike. A
    mixture of experts whose scenario says nothing of its routing takes the profile's measured one."""
    if profile is not None:
        from ppsim.costs.profiled import with_profiled_routing

        _check_profile(s, profile)
        s = with_profiled_routing(s, profile)
    device = get_device(s.hardware.device, s.hardware.device_file)
    if s.training.offload_layers and device.host_link_gb_s is None:
        raise ScenarioError(f"training.offload_layers copies activations to host memory, and {device.name} has no "
                            "host link (host_link_gb_s in its device entry): give one in a hardware.device_file or "
                            "drop training.offload_layers", field="training.offload_layers")
    check_scenario_precision(s, device)
    p, v = s.pipeline.stages, s.pipeline.chunks
    if stage_to_rank is None:
        stage_to_rank = tuple(k % p for k in range(p * v))
    elif len(stage_to_rank) != p * v:
        raise ScenarioError(f"the schedule places {len(stage_to_rank)} virtual stages, the scenario has "
                            f"stages x chunks = {p} x {v}", field="pipeline.chunks")
    layers = model_layers(s, profile)
    kinds_of = block_kinds(s, layers)  # the partition's loads and the layout read them alike
    blocks = None
    even: tuple[list[int], list[float], float, float] | None = None
    if layers is not None:
        emb, block, head = layers
        loads: tuple[float | list[float], float, float]  # per layer (one for all, or each layer's), first, last
        if profile is not None:
            from ppsim.costs.profiled import balancing_loads

            model = s.model
            share = model.moe_layer_count() / model.layers if model and model.moe else 0.0
            loads = balancing_loads(profile, share)
        else:  # each layer as its kind costs; the last stage's head with the multi-token prediction modules
            kinds = kinds_of or BlockKinds.single(block)
            mtp = mtp_parts(s, layers, kinds, stage_to_rank)
            model = s.model
            assert model is not None  # it has layers
            per_layer = [kinds.family(kind)[0].total_flops for kind in scenario_layer_kinds(s)]
            loads = (per_layer, emb.total_flops, head.total_flops + sum(x.total_flops for x in mtp))
        blocks = blocks_per_stage(s, copy_placement(stage_to_rank, pipes), *loads) * pipes
        if pipes == 1 and len(set(stage_to_rank)) == len(stage_to_rank):
            each, first, last = loads
            costs_of = [float(each)] * sum(blocks) if isinstance(each, (int, float)) else list(each)
            even = (list(blocks), costs_of, first, last)
    layout = lay_out(s, blocks, layers, stage_to_rank, kinds_of, pipes)
    if s.costs is not None:
        costs = explicit_costs(s, s.costs, layout, stage_to_rank)
        source = ("explicit", "explicit: the scenario's costs section")
    elif profile is not None and layers is not None:
        from ppsim.costs.profiled import profiled_costs

        costs = profiled_costs(s, layout, profile, layers[1], split_backward)
        source = ("profile", f"measured: {profile.describe()}")
    elif s.model is not None:
        costs = analytic_costs(s, s.model, layout, device, scenario_links(s, device, stage_to_rank, pipes))
        source = ("model", datasheet_source(s, device) + launch_clause(s, device, costs))
    else:  # pragma: no cover - a Scenario has a model or costs
        raise ScenarioError("a scenario needs a 'model' section or a 'costs' section")
    w = _with_figures(s, costs, layout, device.peak_flops(s.model.dtype) if s.model else None, pipes)
    return replace(w, costs_from=source[0], costs_source=source[1], balanced_over=even)


def copy_placement(stage_to_rank: tuple[int, ...], pipes: int) -> tuple[int, ...]:
    """The ranks of one copy's stages, for its partition: with several copies of the model each
    stage's copies as one (named by the lowest of their ranks), so that balancing evens out what
    every rank holds of all copies (DualPipe: stage j and stage p - 1 - j on one rank)."""
    n = len(stage_to_rank) // pipes
    return tuple(min(stage_to_rank[k * n + j] for k in range(pipes)) for j in range(n))


def datasheet_source(s: Scenario, device: Device) -> str:
    """How the analytic model priced the work: the device's peak, at a flat efficiency or its
    measured curves and rates (the same choice :func:`~ppsim.costs.analytic.analytic_costs` makes)."""
    dtype = s.model.dtype if s.model else "bf16"
    peak = f"{device.name}'s {device.peak_tflops[dtype]:,g} TFLOP/s {dtype} peak"
    narrow = scenario_precision(s.training.fp8, s.training.fp4, s.training.low_precision_params)
    if narrow:
        speed = narrow.gemm_speed(device.mx_formats)
        slower = f", its GEMMs at {speed:g} of per-tensor scaling's speed" if speed != 1.0 else ""
        peak += (f" ({device.peak_tflops[narrow.peak]:,g} {narrow.peak} for the blocks' linear layers, "
                 f"{narrow.recipe} scaling{slower})")
    hw = s.hardware
    nvlink_given = (s.cluster.intra_node is not None if s.cluster is not None
                    else hw.tp_link is not None and hw.dp_link is not None)
    nvlink = (f", NVLink at its measured {device.intra_node_measured.gb_s:,g} GB/s"
              if device.intra_node_measured is not None and not nvlink_given else "")
    if uses_curves(s, device):
        measured = ["matmuls at its measured curves"]
        if device.hbm_copy is not None:
            measured.append(f"memory-bound work at its measured {device.hbm_copy.gb_s:,g} GB/s")
        return (f"datasheet: {peak}, " + ", ".join(measured) + nvlink
                + attention_kernel_clause(s, device, curves=True))
    if s.hardware.efficiency:
        at = f"{100 * s.hardware.efficiency:g} % efficiency (hardware.efficiency)"
    else:
        wide, thin = (f"{100 * device.flat_efficiency(d):.3g}" for d in (dtype, narrow.peak if narrow else dtype))
        at = f"{wide} % efficiency" + (f", {thin} % for {narrow.peak}" if narrow and thin != wide else "")
        whose = f": {100 * STEP_SHARE:.0f} % of its best measured matmul" if device.matmul_best else ""
        at += f" (the device's{whose})"
    return f"datasheet: {peak} at {at}" + nvlink + attention_kernel_clause(s, device, curves=False)


def launch_clause(s: Scenario, device: Device, costs: CostTable) -> str:
    """Where a stage's passes wait for the host to launch their kernels, as a clause of the costs
    line ("" where none waits)."""
    waits = [c.launch_wait_ms for c in costs.stages]
    if not waits or max(waits) <= 0:
        return ""
    k = waits.index(max(waits))
    us = launch_time_us(s, device) or 0.0
    whose = "hardware.launch_us" if s.hardware.launch_us is not None else "the device's host"
    return (f"; launch-bound: stage {k}'s micro-batch waits {waits[k]:,.3g} ms for the host to launch its kernels "
            f"({us:g} us each, {whose}): CUDA graphs (training.cuda_graphs) launch them in one")


def attention_kernel_clause(s: Scenario, device: Device, *, curves: bool) -> str:
    """How a fused attention kernel other than the default one is priced, as a clause of the costs
    line ("" for the default kernel, or one the device cannot price: a note says so)."""
    kernel = s.training.priced_attention_kernel
    if s.model is None or not s.training.flash_attention or kernel == DEFAULT_ATTENTION_KERNEL \
            or device.kernel_unpriced(kernel, s.model.dtype, measured=curves) is not None:
        return ""
    how = "in FP8 " if s.training.fp8_attention else ""
    if curves:
        return f", the attention {how}by {kernel} at its measured figures"
    return f", the attention {how}by {kernel} at its measured speed over {DEFAULT_ATTENTION_KERNEL}'s"


#: :func:`model_layers` by what it reads of a scenario (a search asks again for every plan that
#: differs only in its stages, data parallelism, micro-batch count or schedule); the most recent (frozen)
_MODEL_LAYERS: OrderedDict[Hashable, tuple[LayerCost, LayerCost, LayerCost]] = OrderedDict()
_MODEL_LAYERS_KEPT = 4096


def model_layers(s: Scenario, profile: Profile | None = None, recompute: Recompute | None = None,
                 moe: bool = False, windowed: bool = False, parts: LayerParts = "block", wide: bool = False
                 ) -> tuple[LayerCost, LayerCost, LayerCost] | None:
    """(embedding, block, head) of the scenario's model for one micro-batch, per tensor-parallel
    device, in the scenario's recompute mode or ``recompute``; the block a MoE layer's with ``moe``,
    one attending through the sliding window with ``windowed``, its linear layers in the model's
    dtype whatever the scenario's FP8 / FP4 with ``wide``; with a profile the embedding's and
    head's parameters are whole, as ppexec holds them. Remembered by everything it reads: the
    model, the training keys and the tensor, context and expert parallelism."""
    if s.model is None:
        return None
    key = (s.model, _frozen(s.training), s.tensor_parallel, s.context_parallel, s.expert_parallel, s.expert_tensor,
           profile is not None, recompute, moe, windowed, parts, wide)
    known = _MODEL_LAYERS.get(key)
    if known is None:
        known = _MODEL_LAYERS[key] = _model_layers(s, profile, recompute, moe, windowed, parts, wide)
        if len(_MODEL_LAYERS) > _MODEL_LAYERS_KEPT:
            _MODEL_LAYERS.popitem(last=False)
    _MODEL_LAYERS.move_to_end(key)  # the least recently asked for goes first
    return known


def _frozen(training: TrainingSpec) -> tuple[object, ...]:
    """The training keys' values, hashable (their lists as tuples)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in training.__dict__.values())


def _model_layers(s: Scenario, profile: Profile | None, recompute: Recompute | None, moe: bool, windowed: bool,
                  parts: LayerParts, wide: bool) -> tuple[LayerCost, LayerCost, LayerCost]:
    """:func:`model_layers`, worked out."""
    assert s.model is not None  # model_layers returns None without one
    t, training = s.tensor_parallel, s.training
    narrow = None if wide else scenario_precision(training.fp8, training.fp4, training.low_precision_params)
    experts = (ExpertShard.of(s.model, s.expert_parallel, s.expert_tensor, training.moe_dispatcher)
               if moe and s.model.moe else None)
    layers = gpt_layers(s.model, training.micro_batch, recompute or training.recompute, t,
                        sequence_parallel=training.sequence_parallel, flash_attention=training.flash_attention,
                        narrow=narrow, context_parallel=s.context_parallel, experts=experts, windowed=windowed,
                        recompute_modules=training.recompute_modules, parts=parts)
    if profile is not None and t > 1:
        whole_emb, _, whole_head = gpt_layers(s.model, training.micro_batch, training.recompute, 1)
        emb, block, head = layers
        layers = (replace(emb, params=whole_emb.params), block, replace(head, params=whole_head.params))
    launches = layer_launches(s, narrow, recompute or training.recompute, attention=parts != "mlp",
                              mlp=None if parts == "attention" else "moe" if experts else "dense")
    return layers[0], launched(layers[1], launches), layers[2]


def block_kinds(s: Scenario, layers: tuple[LayerCost, LayerCost, LayerCost] | None) -> BlockKinds | None:
    """Every kind of layer of the scenario's model (:meth:`~ppsim.inputs.scenario.ModelSpec.layer_kind`),
    each with its twin without recomputation when ``training.recompute_layers`` leaves some plain
    (None: no model)."""
    if layers is None or s.model is None:
        return None
    model = s.model
    partial = s.training.recompute_layers is not None

    def layer(kind: str, recompute: Recompute | None) -> LayerCost:
        base = kind.removesuffix(WIDE)
        wide = base != kind  # its linear layers kept in the model's dtype
        if base == "M":
            narrow = None if wide else scenario_precision(s.training.fp8, s.training.fp4, s.training.low_precision_params)
            mode = recompute or s.training.recompute
            built_layer = launched(mamba_layer(model, s.training.micro_batch, mode, s.tensor_parallel,
                                               sequence_parallel=s.training.sequence_parallel, narrow=narrow),
                                   layer_launches(s, narrow, mode, mamba=True))
        elif kind == "block" and recompute is None:
            return layers[1]
        else:
            parts: LayerParts = {"*": "attention", "-": "mlp", "E": "mlp"}.get(base, "block")  # type: ignore[assignment]
            built = model_layers(s, recompute=recompute, moe=base.startswith("moe") or base == "E",
                                 windowed=base.endswith("/window"), parts=parts, wide=wide)
            assert built is not None  # the scenario has a model
            built_layer = built[1]
        # its linear layers' GEMMs at the model's dtype's peak, not the narrow format's
        return replace(built_layer, gemms=built_layer.gemms.widened()) if wide else built_layer

    every = sorted(set(scenario_layer_kinds(s)) | {"block"}, key=kind_rank)
    halves = {kind: moe_halves(s, kind, layer(kind, None)) for kind in every
              if s.pipeline.overlaps and kind.removesuffix(WIDE) in MOE_KINDS}
    return BlockKinds({kind: (layer(kind, None), layer(kind, "none") if partial else None) for kind in every},
                      halves)


def moe_halves(s: Scenario, kind: str, layer: LayerCost) -> tuple[LayerCost | None, LayerCost]:
    """A MoE layer of ``kind`` in two: what runs before its dispatch (its attention half with its
    norm and residual; None in a hybrid pattern's MoE layer, which has no attention) and its experts
    (the MoE half), as an overlapped schedule pairs them (``layer``: the whole of a pattern's one)."""
    base = kind.removesuffix(WIDE)
    if base == "E":
        return None, layer
    wide = base != kind
    built = [model_layers(s, moe=part == "mlp", windowed=base.endswith("/window"), parts=part, wide=wide)
             for part in ("attention", "mlp")]
    assert built[0] is not None and built[1] is not None  # the scenario has a model
    attention, experts = built[0][1], built[1][1]
    if wide:
        attention, experts = (replace(x, gemms=x.gemms.widened()) for x in (attention, experts))
    return attention, experts


def _check_profile(s: Scenario, profile: Profile) -> None:
    if s.costs is not None:
        raise ScenarioError("the scenario gives explicit costs; a profile replaces model-based costs only: "
                            "remove the 'costs' section or the --profile option", field="--profile")
    if s.context_parallel > 1:
        raise ScenarioError("a profile measures blocks on whole sequences; predict context_parallel > 1 from the "
                            "model (no --profile)", field="--profile")
    if s.training.recompute_layers is not None:
        raise ScenarioError("a profile times every block in one recompute mode; predict training.recompute_layers "
                            "from the model (no --profile)", field="--profile")
    if s.training.offload_layers:
        raise ScenarioError("a profile does not time copies to the host; predict training.offload_layers from the "
                            "model (no --profile)", field="--profile")
    if s.model is not None and s.model.mtp_layers:
        raise ScenarioError("a profile times no multi-token prediction module; predict model.mtp_layers from the "
                            "model (no --profile)", field="--profile")
    if s.training.recompute_modules not in (None, ["core_attn"]):
        raise ScenarioError("a profile times selective recomputation of the attention core; predict other "
                            "training.recompute_modules from the model (no --profile)", field="--profile")
    if s.model is not None and s.model.pattern is not None:
        raise ScenarioError("a profile times GPT-style blocks, not a hybrid pattern's layers; predict model.pattern "
                            "from the model (no --profile)", field="--profile")
    if s.training.delay_wgrad:
        raise ScenarioError("a profile times whole backwards; predict training.delay_wgrad from the model "
                            "(no --profile)", field="--profile")
    if s.model is not None and s.model.attention_window is not None:
        raise ScenarioError("a profile times blocks that attend to every earlier key; predict model.attention_window "
                            "from the model (no --profile)", field="--profile")
    if s.model is not None and s.model.moe is not None and s.tensor_parallel > 1:
        raise ScenarioError("a profile times a MoE block whole, as ppexec runs it; predict a mixture of experts with "
                            "tensor_parallel > 1 from the model (no --profile)", field="--profile")
    profile.check_applies(s)
    if s.tensor_parallel > 1 and "allreduce" not in profile.collectives:
        raise ScenarioError("this profile has no measured all-reduce, which tensor parallelism needs; measure a new "
                            "one with `ppexec profile`, or predict tensor_parallel > 1 from the model (no --profile)",
                            field="--profile")


def _with_figures(s: Scenario, costs: CostTable, layout: Layout, peak_flops: float | None, pipes: int = 1) -> Workload:
    """The workload of ``costs``: per device figures x t devices; model FLOPs (what MFU counts)
    leave out the recomputed forward and the masked half of unfused causal attention. Each of
    ``pipes`` copies of the model runs its share of the micro-batches."""
    m, d, t = s.microbatches, s.data_parallel, s.tensor_parallel
    samples = s.training.micro_batch * m * d
    per_step = m * d * t * s.context_parallel // pipes  # every device's FLOPs: the costs are one device's
    stages = layout.stages
    flops = sum(st.forward_flops + st.input_grad_flops + st.weight_grad_flops - st.recompute_flops - st.masked_flops
                for st in stages) * per_step if stages else None
    forward = sum(st.forward_flops for st in stages) * per_step if stages else None
    return Workload(
        costs=costs,
        partition=layout.blocks,
        model_flops_per_step=flops,
        forward_flops_per_step=forward,
        peak_flops_per_device=peak_flops,
        samples_per_step=samples,
        tokens_per_step=samples * s.model.seq_len if s.model else None,
    )
