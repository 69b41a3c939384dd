"""A measured profile: per-layer times, per-action framework overheads and the link, as ppsim reads them.

``ppexec profile`` measures a profile on the machine at hand and writes it as YAML; ``ppsim run
--profile FILE`` predicts with it instead of the analytic roofline. A profile holds, for one layer
shape (width, heads, sequence length, vocabulary, dtype, micro-batch size):

- ``layers``: forward, backward (and its input-grad / weight-grad parts) and optimizer-step time of
  the embedding (with loading the micro-batch), one transformer block, and the head (with the loss);
- ``overheads``: what the framework adds to every action of a stage outside the layers' own work
  (DeepSpeed's instruction handling, loading data, cloning buffers), by stage position: ``first``,
  ``middle`` and ``last`` stage; and gradient clipping's own work before its all-reduce
  (``clip_allreduce_us``: the all-reduce of the norm over the pipeline, with the norm itself);
- ``link``: a stage-to-stage transfer as latency + bytes / bandwidth, fitted over several message
  sizes, plus what sender and receiver spend around the transfer itself.

A stage's forward is then ``overhead + sum of its layers' forwards``; a profile fits any layer count
and any partition of the same layer shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from ppsim.errors import ScenarioError
from ppsim.formats import PROFILE_FORMAT
from ppsim.inputs.scenario import Dtype, Scenario
from ppsim.inputs.yaml_files import load_yaml, problem

PROFILE_VERSION: Final = 1
POSITIONS = ("first", "middle", "last")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LayerTimes(_Strict):
    """One layer, one micro-batch, in milliseconds."""

    forward_ms: float = Field(ge=0)
    backward_ms: float = Field(ge=0, description="input grad + weight grad")
    weight_grad_ms: float = Field(default=0.0, ge=0, description="the part of backward that is weight grad")
    split_backward_ms: float | None = Field(default=None, ge=0, description=(
        "input grad + weight grad when the backward runs split in two passes, as torch.distributed.pipelining "
        "runs I and W (more than backward_ms: the split redoes part of the work); None in older profiles"))
    optimizer_ms: float = Field(default=0.0, ge=0, description="optimizer step over this layer's parameters")
    params: int = Field(default=0, ge=0)


class Overheads(_Strict):
    """Framework time per action of a stage, beyond the sum of its layers' own times. Measured as
    a difference, so it may come out slightly negative (layers run a little faster in the engine
    than alone); a stage's total is never below zero."""

    forward_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0
    clip_ms: float = Field(default=0.0, ge=0, description="gradient clipping's own work before its all-reduce")


class RecomputeTimes(_Strict):
    """What a recomputation mode adds to one block over no recomputation, timed alone (either may
    be negative: a checkpointed forward keeps no activations, which can make it faster)."""

    forward_ms: float
    backward_ms: float = Field(description="mostly the recomputed forward")


class TensorParallelTimes(_Strict):
    """One block split over ``size`` ranks (its all-reduces included) and the whole block on one
    rank, timed alone in turns: the split's cost against the whole, per micro-batch."""

    size: int = Field(ge=2)
    forward_ms: float = Field(ge=0)
    backward_ms: float = Field(ge=0)
    whole_forward_ms: float = Field(gt=0)
    whole_backward_ms: float = Field(gt=0)


class LinkProfile(_Strict):
    """A transfer of n bytes takes latency + n / bandwidth once both sides are there; the sender
    spends ``send_overhead_us`` before it and the receiver ``recv_overhead_us`` after it."""

    latency_us: float = Field(ge=0)
    bandwidth_gb_s: float = Field(gt=0)
    send_overhead_us: float = Field(default=0.0, ge=0)
    recv_overhead_us: float = Field(default=0.0, ge=0)
    samples: list[tuple[int, float]] = Field(default_factory=list, description="(bytes, one-way ms) measured")


#: the collectives a profile measures over its ranks (``alltoall``: since mixtures of experts)
MeasuredCollective = Literal["allreduce", "allgather", "alltoall"]


class ExpertShape(_Strict):
    """A MoE layer's shape: what its block's times depend on (not which layers have experts)."""

    experts: int
    top_k: int
    ffn_hidden: int
    shared_experts: int = 0
    shared_ffn_hidden: int = 0


class Shape(_Strict):
    """What the layers were measured at; a profile applies only to scenarios of this shape."""

    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int
    dtype: Dtype
    micro_batch: int
    moe: ExpertShape | None = None  #: a mixture of experts' layer (absent for dense models)


class QuartileTimes(_Strict):
    """Every timing of a profile at one quartile of what it was measured from, worked out the way
    the profile's own (median) timing is. ``low``: every time at its lower quartile (so a link's
    latency lower and its bandwidth higher); ``high``: at its upper quartile."""

    embedding: LayerTimes
    block: LayerTimes
    head: LayerTimes
    moe_block: LayerTimes | None = None
    overheads: dict[Literal["first", "middle", "last"], Overheads]
    link: LinkProfile
    clip_allreduce_us: float = Field(default=0.0, ge=0)
    #: the collectives measured with a spread (a mixture of experts' all-to-all, from the quartiles
    #: of what its expert-parallel steps paid); the others keep the profile's
    collectives: dict[MeasuredCollective, LinkProfile] = Field(default_factory=dict)


class Profile(_Strict):
    format: Literal["ppsim-profile"] = PROFILE_FORMAT
    version: Literal[1] = PROFILE_VERSION
    shape: Shape
    machine: dict[str, Any] = Field(default_factory=dict)
    embedding: LayerTimes
    block: LayerTimes
    head: LayerTimes
    #: a mixture of experts' MoE block (its profiling run's blocks); ``block`` is then its dense
    #: block, timed alone and scaled as the MoE block's engine time is to its time alone
    moe_block: LayerTimes | None = None
    overheads: dict[Literal["first", "middle", "last"], Overheads]
    link: LinkProfile
    clip_allreduce_us: float = Field(default=0.0, ge=0, description="gradient-norm all-reduce over the pipeline")
    #: measured by ppexec profile since recompute runs in ppexec; older profiles fall back on FLOPs
    recompute: dict[Literal["selective", "full"], RecomputeTimes] = Field(default_factory=dict)
    #: ring-equivalent links of the data-parallel all-reduce and all-gather, fitted to the collectives
    #: measured over the profiling ranks; older profiles use ``link`` for them
    collectives: dict[MeasuredCollective, LinkProfile] = Field(default_factory=dict)
    #: a tensor-parallel block against a whole one; older profiles derive it from FLOPs and the all-reduce
    tensor_parallel: TensorParallelTimes | None = None
    #: the spread of what was measured: the layers, overheads, link and clipping at their lower
    #: (``low``) and upper (``high``) quartile; absent in profiles measured before it was recorded
    quartiles: dict[Literal["low", "high"], QuartileTimes] = Field(default_factory=dict)
    #: a mixture of experts' routing as its profiling run measured it: per expert parallelism, the
    #: busiest rank's token copies over the mean (the model's own router on the profiling data;
    #: ppsim.costs.moe.measured_skew); what a plan of the model is priced at unless its scenario
    #: says how its routing goes. Absent in profiles measured before it was recorded
    routing_skew: dict[Annotated[int, Field(ge=2)], Annotated[float, Field(ge=1.0)]] = Field(default_factory=dict)
    _path: str | None = PrivateAttr(default=None)  #: the file it was read from (:func:`load_profile`)

    def describe(self) -> str:
        """Where the profile comes from, for a summary: its file and the machine it measured."""
        m = self.machine
        machine = ", ".join(str(m[k]) + (" ranks" if k == "ranks" else "") for k in ("host", "cpu", "backend", "ranks")
                            if m.get(k) is not None)
        where = f"profile {self._path}" if self._path else "a profile"
        return f"{where} (on {machine})" if machine else where

    def overhead(self, stage: int, num_stages: int) -> Overheads:
        """The overheads of virtual stage ``stage`` of ``num_stages``. A single stage is first and
        last at once: it pays both, less what every stage pays (the middle overheads)."""
        o = self.overheads
        if num_stages == 1:
            first, last, mid = o["first"], o["last"], o["middle"]
            return Overheads(**{k: getattr(first, k) + getattr(last, k) - getattr(mid, k) for k in Overheads.model_fields})
        if stage == 0:
            return o["first"]
        if stage == num_stages - 1:
            return o["last"]
        return o["middle"]

    def check_applies(self, s: Scenario, source: str = "the profile") -> None:
        """Raise ScenarioError if the scenario's layer shape is not the one measured."""
        if s.model is None:
            raise ScenarioError(f"{source} holds per-layer times; the scenario needs a 'model' section to use it",
                                field="model")
        ours = shape_of(s).model_dump()
        theirs = self.shape.model_dump()
        def shown(value: Any) -> str:  # a nested shape (the experts) as its keys, not Python's repr
            if isinstance(value, dict):
                return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
            return "none" if value is None else str(value)

        diff = [f"{k} {shown(theirs[k])} (scenario: {shown(ours[k])})" for k in ours if ours[k] != theirs[k]]
        if diff:
            raise ScenarioError(
                f"{source} was measured for another layer shape: {', '.join(diff)}; "
                "measure one for this scenario with `ppexec profile SCENARIO --out PROFILE`",
                field="--profile",
            )

    # ----- I/O ---------------------------------------------------------------------------------
    def to_yaml(self) -> str:
        doc = self.model_dump(mode="json")
        # what only a mixture of experts has: left out of a dense model's file
        for part in (doc, *doc.get("quartiles", {}).values()):
            if part.get("moe_block", 0) is None:
                del part["moe_block"]
        if doc["shape"].get("moe", 0) is None:
            del doc["shape"]["moe"]
        if not doc.get("routing_skew", True):
            del doc["routing_skew"]
        doc["link"]["samples"] = [list(x) for x in self.link.samples]
        header = ("# ppsim profile: measured by `ppexec profile`; read by `ppsim run --profile`.\n"
                  "# Times in ms per micro-batch (optimizer: per step); see docs/calibration.md.\n")
        return header + yaml.safe_dump(doc, sort_keys=False)


def shape_of(s: Scenario) -> Shape:
    """The layer shape of a scenario (which a profile must match)."""
    if s.model is None:
        raise ScenarioError("a profile measures a model's layers; this scenario has only costs", field="model")
    m = s.model
    moe = None if m.moe is None else ExpertShape(
        experts=m.moe.experts, top_k=m.moe.top_k, ffn_hidden=m.moe.ffn_hidden, shared_experts=m.moe.shared_experts,
        shared_ffn_hidden=m.moe.shared_ffn if m.moe.shared_experts else 0)
    return Shape(hidden=m.hidden, heads=m.heads, seq_len=m.seq_len, vocab=m.vocab, ffn_hidden=m.ffn, dtype=m.dtype,
                 micro_batch=s.training.micro_batch, moe=moe)


def load_profile(path: str | Path) -> Profile:
    """Read a profile file; errors name the file and the key."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"profile file {str(p)!r} does not exist; make one with `ppexec profile SCENARIO --out "
                            f"{p}`", field="--profile")
    try:
        data = load_yaml(p.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{p}: not a readable YAML file{problem(exc)}", field="--profile") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: not a readable YAML file ({type(exc).__name__})", field="--profile") from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ScenarioError(f"{p} is not a ppsim profile (its 'format' must be {PROFILE_FORMAT!r})", field="--profile")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"])
        raise ScenarioError(f"{p}: {where}: {e['msg']}", field="--profile") from None
    profile._path = str(path)
    return profile
