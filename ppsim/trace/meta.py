"""A trace's metadata: its keys and their types (:class:`TraceMeta`), the part that comes from the
plan (:func:`plan_meta`, for simulated and measured traces alike), and the check a trace read from a
file passes (:func:`read_meta`). docs/internals/trace.md says who writes and who reads each key.
"""

from __future__ import annotations

import json
import types
from typing import Any, Literal, TypedDict, Union, get_args, get_origin, get_type_hints

from ppsim.errors import TraceError
from ppsim.plan import Plan

#: how a measured trace's memory was read: a CPU process's resident size (interpreter and libraries
#: included) or the device allocator's bytes in use, which is what ppsim predicts
MemorySource = Literal["rss", "allocator"]


class SearchRecord(TypedDict, total=False):
    """What schedule ``auto`` chose and against what (``bound_ms``: a step no plan of one stage per
    rank can beat; ``shortest_ms``: the shortest such a plan's timeline is, where that is proven)."""

    chosen: str
    step_ms: float
    considered: int
    simulated: dict[str, float]
    passes_ms: float
    bound_ms: float
    shortest_ms: float


class StaticMemory(TypedDict):
    """What a rank holds all step, in bytes."""

    weights: int
    gradients: int
    optimizer: int
    buffers: int
    total: int


class MovedLayer(TypedDict):
    """Where moving one layer off the slowest stage leaves the slowest: that stage and its share."""

    stage: int
    share: float


class PartitionBalance(TypedDict):
    """How even a partition of one stage per rank is (:class:`ppsim.costs.partition.Balance`): shares
    of the even load."""

    slowest: int
    slowest_share: float
    holds: str
    layer_share: float
    moved: MovedLayer | None  #: after moving one layer off the slowest (None: it cannot give one up)
    best_share: float


class TraceMeta(TypedDict, total=False):
    """Every key a trace's ``meta`` may hold. A file may hold more (a newer ppsim's); they are kept."""

    # what ran: the plan (plan_meta)
    source: Literal["simulated", "measured"]
    clock: str
    time_unit: str
    schedule: str
    num_ranks: int
    num_microbatches: int
    chunks: int
    stage_to_rank: list[int]
    pipes: int  #: copies of the model the stages form (DualPipe's 2); absent: one
    comm: str
    message_bytes: int
    search: SearchRecord
    # the simulator
    p2p_ms: list[float]
    network: Literal["flows", "static"]
    memory_static_bytes: list[StaticMemory]
    #: per stage, what a split backward keeps per micro-batch from I to W beyond the activations (when any)
    weight_grad_pending_bytes: list[int]
    #: overlapped forwards and backwards interleave layer by layer (ppsim.costs.table.CostTable.overlap_layerwise)
    overlap_layerwise: bool
    #: a split backward's input grad frees the activations (ppsim.costs.table.CostTable.input_grad_frees)
    input_grad_frees: bool
    # the workload (ppsim.prediction.workload_meta)
    scenario: str | None
    device: str | None
    dtype: str | None
    data_parallel: int
    tensor_parallel: int
    context_parallel: int
    expert_parallel: int  #: the experts split over this many ranks of a stage (MoE, when > 1)
    micro_batch: int
    global_batch: int
    seq_len: int | None
    samples_per_step: float | None
    tokens_per_step: float | None
    model_flops_per_step: float | None
    peak_flops_per_device: float | None
    num_devices: int
    partition: list[int] | None
    partition_balance: PartitionBalance
    costs_from: str | None
    costs_source: str | None
    device_memory_bytes: float | None
    recompute: str | None
    recompute_layers: int  #: only that many blocks of each virtual stage recomputed
    fp8: str | None
    fp4: str | None
    zero_stage: int
    # a measured run (ppexec) or a profiler's trace read back
    backend: str
    runtime: str
    step: int
    loss: float | None
    memory_measured: MemorySource | None
    forward_calls: dict[str, int] | None
    alltoall_ms: list[float]  #: per rank, the time its MoE layers spent in expert-parallel all-to-alls
    #: per rank, [start, end] ms of each expert-parallel all-to-all (dispatch or combine): where a prediction
    #: places them in its passes (ppsim.prediction.alltoall), or when a measured run's ranks were in them
    alltoall_spans: list[list[list[float]]]
    #: the busiest expert-parallel rank's token copies over the mean: measured (the median over layers), or the
    #: prediction's (model.moe.skew, or its routing's draw averaged over the layers)
    routing_skew: float
    #: the prediction's routing_skew is what its profile measured (the scenario gave none)
    routing_from_profile: bool
    #: a profile priced it and measured no routing at its expert parallelism: balanced for want of one
    routing_unmeasured: bool
    moe_comm_sms: int  # the SMs the all-to-alls' kernels hold beside the compute they overlap
    moe_dispatcher: str  #: deepep or hybridep (training.moe_dispatcher), absent for NCCL's all-to-all
    #: the share of NVLink's datasheet rate that dispatcher's kernels reach on the device (None: not measured)
    moe_dispatch_share: float | None
    #: what that share of the device's datasheet NVLink is (GB/s; absent where the scenario gives the link)
    moe_dispatch_gb_s: float
    overlap_sm_share: float  # that share of the device's SMs
    trace_format: str
    files: list[str]
    profiled_steps: list[int]
    step_times_ms: list[float]


def plan_meta(plan: Plan, *, source: Literal["simulated", "measured"], clock: str, comm: str,
              message_bytes: int) -> TraceMeta:
    """What a Trace's ``meta`` says of the plan it ran; a searched plan (schedule ``auto``) adds its
    ``search``: the plan chosen and those it beat."""
    meta: TraceMeta = {
        "source": source,
        "clock": clock,
        "time_unit": "ms",
        "schedule": plan.schedule,
        "num_ranks": plan.num_ranks,
        "num_microbatches": plan.num_microbatches,
        "chunks": plan.chunks,
        "stage_to_rank": list(plan.stage_to_rank),
        "comm": comm,
        "message_bytes": message_bytes,
    }
    if plan.pipes > 1:
        meta["pipes"] = plan.pipes
    if "search" in plan.meta:
        meta["search"] = plan.meta["search"]
    return meta


def read_meta(raw: object) -> TraceMeta:
    """``raw`` (a trace file's ``meta``) as a TraceMeta, or a TraceError naming the first key whose value
    has the wrong type and the type it must have. Keys this ppsim does not know are kept as they are."""
    if not isinstance(raw, dict):
        raise TraceError(f"the trace's 'meta' must be an object, got {type(raw).__name__}")
    for key, expected in _KEY_TYPES.items():
        if key in raw and not _conforms(raw[key], expected):
            raise TraceError(f"meta.{key} is {_shown(raw[key])}; it must be {_described(expected)}")
    out: TraceMeta = dict(raw)  # type: ignore[assignment]  # every known key was checked above
    return out


_KEY_TYPES: dict[str, Any] = get_type_hints(TraceMeta)


def _conforms(value: object, expected: Any) -> bool:
    """Whether a JSON value has the type ``expected`` (a JSON number of integral value is no int)."""
    origin, args = get_origin(expected), get_args(expected)
    if expected is type(None):
        return value is None
    if expected is bool:
        return type(value) is bool
    if expected is int:
        return type(value) is int
    if expected is float:
        return type(value) in (int, float)
    if expected is str:
        return isinstance(value, str)
    if origin is Literal:
        return value in args
    if origin in (Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items())
    if isinstance(expected, type) and issubclass(expected, dict):  # a TypedDict
        hints = get_type_hints(expected)
        required: frozenset[str] = getattr(expected, "__required_keys__", frozenset())
        return (isinstance(value, dict) and required <= value.keys()
                and all(_conforms(value[k], t) for k, t in hints.items() if k in value))
    raise TypeError(f"TraceMeta has a type read_meta cannot check: {expected!r}")  # pragma: no cover


def _described(expected: Any) -> str:
    origin, args = get_origin(expected), get_args(expected)
    if expected is type(None):
        return "null"
    if expected is bool:
        return "true or false"
    if expected is int:
        return "a whole number"
    if expected is float:
        return "a number"
    if expected is str:
        return "a string"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_described(a) for a in args)
    if origin is list:
        return f"a list, each item {_described(args[0])}"
    if origin is dict:
        return f"an object whose values are each {_described(args[1])}"
    hints = get_type_hints(expected)
    return "an object with " + ", ".join(f"{k} ({_described(t)})" for k, t in hints.items())


def _shown(value: object) -> str:
    """The value as JSON writes it (the file's own spelling), cut to one short line."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
