"""``ppexec profile``: measure a scenario's costs on the machine at hand and write a ppsim profile.

Two ranks (processes with one thread each locally; two GPUs on a cluster) are started like a
training run, in a profiling mode of ``ppexec.worker``. At the same time, so that they contend for
the machine as training ranks do, both

1. time the embedding, one transformer block and the head with its loss in plain torch at the
   scenario's micro-batch size, sequence length and dtype (forward, backward, its weight-grad part,
   the optimizer step over the layer's parameters) — ``ppexec.measure.microbench.layer_times``;
2. train the scenario's model cut into two stages with a GPipe plan through the same timed
   DeepSpeed engine ``ppexec run`` uses, with one block on the first stage (A) and with one on the
   last (B), four runs in the order A B B A (a drift of the machine's speed cancels as far as it is
   linear in time); how a stage's forward, backward and optimizer step grow with its blocks is a
   block's time inside the engine (a least-squares fit), what is left over beyond the embedding
   or the head is the framework's overhead for that stage position, and the gaps between actions
   are charged to the action that follows;
3. ping-pong messages of several sizes around the scenario's activation size and fit
   latency + bytes / bandwidth; from the engine run's transfers whose receiver was already waiting,
   what a send and a receive spend around the transfer itself.

A mixture of experts is then trained once more on one stage over both ranks, which split its
experts (expert parallelism 2): what its all-to-alls cost a step, each from the later rank's
arrival, where the ranks come to them from their layers' compute (timed back to back at a barrier
they cost this machine a fraction of that).

Stages between the first and the last (only seen with three or more stages) take the smaller of
the first and last stage's overheads: they load no data and compute no loss.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from ppexec.measure.stats import fit_blocks, fit_link, median_samples, quartiles, statistic
from ppexec.worker.events import RankState, exchange_spans, exchanges
from ppsim.api import (
    DTYPE_BYTES,
    PROFILING_SCHEDULE,
    Action,
    ExpertShard,
    Kind,
    LayerTimes,
    LinkProfile,
    MeasuredCollective,
    Overheads,
    Profile,
    QuartileTimes,
    RecomputeTimes,
    Scenario,
    TensorParallelTimes,
    alltoall_ms,
    measured_skew,
    parse_scenario,
    profile_link,
    shape_of,
)
from ppsim.errors import PpsimError

PROFILE_MICROBATCHES = 4
PROFILE_STEPS = 10
PROFILE_WARMUP = 2


def profiling_scenario(s: Scenario) -> Scenario:
    """The scenario as profiled: two stages, GPipe, a few micro-batches, no data or tensor
    parallelism, no recomputation, no ZeRO (a prediction adds what those change from the times
    the profile takes of them apart)."""
    if s.model is None:
        raise PpsimError("a profile measures a model's layers; this scenario has only costs", field="model")
    if s.model.layers < 2:
        raise PpsimError("profiling cuts the model into two stages; it needs at least 2 layers", field="model.layers")
    data = s.model_dump(exclude_none=True)
    data["data_parallel"] = 1
    data["tensor_parallel"] = 1
    data.pop("expert_parallel", None)
    data.pop("expert_tensor_parallel", None)
    if "moe" in data["model"]:  # every block a MoE block: the engine's time per block is the MoE block's
        data["model"]["moe"] = {**data["model"]["moe"], "dense_layers": 0, "layer_freq": 1}
    # the profile times plain blocks and plain optimizer steps; what recomputation, ZeRO-1 and
    # tensor parallelism change is timed apart and added by the prediction (never twice)
    for key in ("sequence_parallel", "recompute", "zero_stage", "zero_reduce"):
        data.setdefault("training", {}).pop(key, None)
    data.pop("costs", None)
    data["pipeline"] = {**data.get("pipeline", {}), "stages": 2, "chunks": 1, "schedule": PROFILING_SCHEDULE,
                        "microbatches": PROFILE_MICROBATCHES, "partition": "balanced"}
    data.setdefault("training", {}).pop("global_batch", None)
    data["training"]["grad_clip"] = 1.0  # measure gradient clipping, whether or not the scenario clips
    return parse_scenario(data, source="the profiling run")


def exchange_scenario(base: Scenario) -> Scenario | None:
    """The profiled model (``base``: :func:`profiling_scenario`, its schedule the profiling one) on
    one stage over two replicas that split its experts (expert parallelism 2): its all-to-alls
    between its layers' compute, as a training step runs them. None for a model without experts,
    or with experts two ranks cannot split."""
    m = base.model
    if m is None or m.moe is None or m.moe.experts % 2:
        return None
    data = base.model_dump(exclude_none=True)
    data["data_parallel"] = 2
    data["expert_parallel"] = 2
    data["pipeline"] = {**data["pipeline"], "stages": 1}
    return parse_scenario(data, source="the profile's expert-parallel run")


def exchange_in_step(idle: LinkProfile, in_step_ms: list[float], dispatch_bytes: float) -> LinkProfile:
    """The all-to-all link as a step pays it: ``idle``'s bandwidth (exchanges timed back to back at
    a barrier), its latency raised so that a dispatch of ``dispatch_bytes`` over the two ranks costs
    the mean of ``in_step_ms``, the exchanges of a training step from the later rank's arrival
    (each rank comes to them from its layers' compute; a step adds every one, and on a shared
    machine their tail is long: the mean, not the median). Never below ``idle``."""
    excess = statistics.fmean(in_step_ms) - alltoall_ms(dispatch_bytes, 2, profile_link(idle))
    return idle.model_copy(update={"latency_us": idle.latency_us + max(0.0, excess) * 1e3})


def in_step_exchanges(states: list[RankState]) -> list[float]:
    """ms of each all-to-all the expert-parallel run's ranks (``states``) ran in their recorded
    steps, from the later rank's arrival to the last rank's return
    (:func:`~ppexec.worker.events.exchange_spans`)."""
    after: list[float] = []
    for k in range(min((len(st.steps) for st in states), default=0)):
        ran = [exchanges(st.steps[k].marks) for st in states]
        if len({len(r) for r in ran}) > 1:
            raise PpsimError(f"the expert-parallel profiling run's ranks recorded {[len(r) for r in ran]} all-to-alls "
                             f"in step {k}: one collective on every rank of its group, so a run that differs is "
                             "not one to price an exchange by")
        after += exchange_spans(ran)[1]
    if len(states) < 2 or not after:
        raise PpsimError("the expert-parallel profiling run recorded no all-to-all on two ranks: its MoE layers did "
                         "not exchange tokens")
    return after


def group_routing(states: list[RankState], experts: int) -> dict[int, float]:
    """The routing the expert-parallel run's ranks (``states``: one group) measured, per expert
    parallelism that divides the ``experts``: in each MoE layer forward of each recorded step the
    group's copies per expert (its ranks' own summed), split over that many ranks
    (:func:`~ppsim.costs.moe.measured_skew`); empty where the ranks counted none."""
    routed: list[list[int]] = []
    for k in range(min((len(st.steps) for st in states), default=0)):
        per_rank = [st.steps[k].routed for st in states]
        if any(len(r) != len(per_rank[0]) for r in per_rank):
            raise PpsimError(f"the expert-parallel profiling run's ranks routed {[len(r) for r in per_rank]} MoE "
                             f"layer forwards in step {k}: each forward is an exchange of the whole group")
        routed += [[sum(column) for column in zip(*forward, strict=True)] for forward in zip(*per_rank, strict=True)]
    skews = {ep: measured_skew(routed, ep) for ep in range(2, experts + 1) if experts % ep == 0}
    return {ep: round(skew, 4) for ep, skew in skews.items() if skew is not None}


def ring_links(samples: list[tuple[int, float, float, float]]) -> dict[MeasuredCollective, LinkProfile]:
    """The links that make the collective formulas reproduce the collectives measured over two
    ranks. Over 2 ranks a ring all-reduce of n bytes is n / bandwidth + 2 latencies, a ring
    all-gather n / 2 / bandwidth + 1 latency and an all-to-all (each rank sending the other half of
    its n bytes) the same, so the fitted intercept and slope give each link."""
    reduce_lat, reduce_rate = fit_link(reduces := [(b, r) for b, r, _, _ in samples])
    gather_lat, gather_rate = fit_link(gathers := [(b, g) for b, _, g, _ in samples])
    return {
        "allreduce": LinkProfile(latency_us=reduce_lat / 2 * 1e3, bandwidth_gb_s=reduce_rate * 1e3 / 1e9,
                                 samples=reduces),
        "allgather": LinkProfile(latency_us=gather_lat * 1e3, bandwidth_gb_s=gather_rate / 2 * 1e3 / 1e9,
                                 samples=gathers),
        "alltoall": exchange_link([(b, e) for b, _, _, e in samples]),
    }


def exchange_link(samples: list[tuple[int, float]]) -> LinkProfile:
    """The link of all-to-alls of n bytes measured over two ranks (each rank sends the other half
    of its n bytes: one latency and n / 2 over the link)."""
    latency, rate = fit_link(samples)
    return LinkProfile(latency_us=latency * 1e3, bandwidth_gb_s=rate / 2 * 1e3 / 1e9, samples=samples)


@dataclass(frozen=True)
class _StageSpans:
    """One statistic (median or a quartile) of one stage's action durations over the recorded steps (ms)."""

    forward: float
    backward: float
    optimizer: float
    gap: float  #: between one action's end and the next one's start
    clip: float  #: the whole CLIP action, waiting included
    clip_own: float  #: CLIP from its start to the moment the engine starts clipping
    clip_rest: float  #: from there to its end: the norm, its all-reduce (and any wait), the scaling

    def scaled(self, factor: float) -> _StageSpans:
        return _StageSpans(*(factor * getattr(self, f.name) for f in fields(self)))


def _stage_spans(st: RankState, which: str = "median") -> _StageSpans:
    by_kind: dict[Kind, list[float]] = {Kind.F: [], Kind.B: [], Kind.OPT: [], Kind.CLIP: []}
    gaps: list[float] = []
    own: list[float] = []
    rest: list[float] = []
    for step in st.steps:
        prev_end = None
        marks = [t for name, t in step.marks if name == "clip"]
        for text, t0, t1 in step.spans:
            a = Action.parse(text)
            if a.kind in by_kind:
                by_kind[a.kind].append((t1 - t0) / 1e6)
            if a.kind is Kind.CLIP and marks:
                own.append((marks[0] - t0) / 1e6)
                rest.append((t1 - marks[0]) / 1e6)
            if prev_end is not None:
                gaps.append(max(0.0, (t0 - prev_end) / 1e6))
            prev_end = t1
    return _StageSpans(*(statistic(xs, which) for xs in (by_kind[Kind.F], by_kind[Kind.B], by_kind[Kind.OPT], gaps,
                                                      by_kind[Kind.CLIP], own, rest)))


def _transfer_overheads(states: list[RankState], one_way_ms: float, which: str = "median") -> tuple[float, float]:
    """(send, receive) overhead in ms: from the transfers whose receiver was already waiting, the
    send's time beyond the bare transfer and how long the receive ends after the send."""
    from ppsim.api import peer_stage

    by_stage = {st.ready.pipe_rank: st for st in states if st.ready}
    sends, recvs = [], []
    for k in range(min(len(st.steps) for st in states)):
        spans = {}
        for stage, st in by_stage.items():
            for text, t0, t1 in st.steps[k].spans:
                spans[(stage, text)] = (t0, t1)
        for (_, text), (s0, s1) in spans.items():
            a = Action.parse(text)
            if a.kind not in (Kind.SEND_F, Kind.SEND_B):
                continue
            recv_kind = Kind.RECV_F if a.kind is Kind.SEND_F else Kind.RECV_B
            peer = peer_stage(a)
            match = spans.get((peer, str(Action(peer, recv_kind, a.microbatch))))
            if match is None or match[0] > s0:
                continue  # the receiver came later: the send's time includes waiting
            sends.append((s1 - s0) / 1e6 - one_way_ms)
            recvs.append((match[1] - s1) / 1e6)
    if not sends:
        return 0.0, 0.0
    return max(0.0, statistic(sends, which)), max(0.0, statistic(recvs, which))


#: profiling runs: the two partitions in the order A B B A, so that a drift of the machine's speed
#: that is linear in time cancels in the fit, and each partition is measured twice. Measured paired
#: (bench/profile_drift.py, the small model, torch, a quiet machine): fitting four runs instead of
#: two brought the median |step-time error| from 5.3 % to 2.3 % and halved the overheads' spread
PROFILE_RUNS = 4


def profiling_partitions(layers: int, runs: int = PROFILE_RUNS) -> list[list[int]]:
    """The two-stage partitions the profile trains, one per run: the two most uneven ones, so that
    the time per block inside the engine can be fitted from how a stage's actions grow with its
    blocks, in the order A B B A (repeated); with fewer than three layers the one partition there is."""
    if layers < 3:
        return [[1, layers - 1]]
    a, b = [1, layers - 1], [layers - 1, 1]
    return [list((a, b, b, a)[k % 4]) for k in range(runs)]


#: how :func:`assemble` puts each profiling run's engine spans on one speed before the fit:
#: ``none`` (the default) fits the spans as measured, ``run`` scales a run's spans by the reference
#: block time over that run's own (both ranks' median), ``rank`` each rank's spans by its own
NORMALIZATIONS = ("none", "run", "rank")


def _alone_block_ms(st: RankState) -> float | None:
    """A rank's block forward + backward timed alone in plain torch (median ms) right before its
    engine steps, or None where it did not time the layers."""
    layers = st.measurements.get("layers")
    if not layers or "block" not in layers:
        return None
    return float(layers["block"]["forward_ms"]) + float(layers["block"]["backward_ms"])


def _block_alone(runs: list[tuple[list[int], list[RankState]]]) -> list[dict[int, float | None]]:
    return [{st.ready.pipe_rank: _alone_block_ms(st) for st in sts if st.ready} for _, sts in runs]


def speed_factors(runs: list[tuple[list[int], list[RankState]]], normalize: str = "run") -> list[dict[int, float]]:
    """Per profiling run, per stage: the factor that puts that stage's engine spans at the profile's
    reference speed. Every rank times a block alone right before its engine steps, in the same
    minute; the reference is the median of those times over every rank of every run (what the
    profile's layers-alone timings are the median of). A run that found the machine uniformly
    slower gets a factor below 1 (``run``: one factor per run, from its ranks' median; ``rank``: a
    factor per rank, from its own time); ``none`` leaves every factor at 1."""
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize is one of {NORMALIZATIONS}, not {normalize!r}")
    alone = _block_alone(runs)
    timed = [v for per_stage in alone for v in per_stage.values() if v]
    if normalize == "none" or not timed:
        return [dict.fromkeys(per_stage, 1.0) for per_stage in alone]
    ref = statistics.median(timed)
    out = []
    for per_stage in alone:
        mine = [v for v in per_stage.values() if v]
        run_factor = ref / statistics.median(mine) if mine else 1.0
        out.append({stage: ref / v if normalize == "rank" and v else run_factor for stage, v in per_stage.items()})
    return out


def in_engine(layer: LayerTimes, reference_alone: LayerTimes, reference_engine: LayerTimes) -> LayerTimes:
    """``layer`` (timed alone) as the engine would run it: each of its times scaled as the
    reference layer's time in the engine is to its time alone (what a dense block of a mixture of
    experts costs, whose profiling run trains MoE blocks only)."""
    def scaled(field: str) -> float:
        alone = getattr(reference_alone, field)
        return getattr(layer, field) * getattr(reference_engine, field) / alone if alone else getattr(layer, field)

    split = None if layer.split_backward_ms is None or reference_engine.split_backward_ms is None \
        else scaled("split_backward_ms")
    return layer.model_copy(update={"forward_ms": scaled("forward_ms"), "backward_ms": scaled("backward_ms"),
                                    "weight_grad_ms": scaled("weight_grad_ms"), "split_backward_ms": split,
                                    "optimizer_ms": scaled("optimizer_ms")})


def _timings(s: Scenario, runs: list[tuple[list[int], list[RankState]]], which: str,
             normalize: str = "none") -> dict[str, Any]:
    """The layers, overheads, link and clipping from one statistic of every set of repetitions:
    ``median`` for the profile's own timings, ``low`` / ``high`` for its lower / upper quartile.
    What combines ranks, runs and stages (medians over them, the fits, the runs' speed factors
    from :func:`speed_factors` with ``normalize``) is the same for all three."""
    states = [st for _, sts in runs for st in sts]
    layer_runs = [st.measurements["layers"] for st in states if "layers" in st.measurements]

    def one(run: dict[str, Any], name: str, key: str) -> float:
        if which == "median":
            return float(run[name][key])
        return float(run[name]["quartiles"][key][0 if which == "low" else 1])

    alone = {
        name: LayerTimes(**{k: statistics.median(one(run, name, k) for run in layer_runs) for k in layer_runs[0][name]
                            if k not in ("params", "quartiles")}, params=int(layer_runs[0][name]["params"]))
        for name in ("embedding", "block", "head", "dense_block") if name in layer_runs[0]
    }
    per_run = []
    # each run's spans at the reference speed: the machine's drift between the runs (tens of per
    # cent over minutes on a shared machine) would otherwise land in the slope and the intercepts
    for (partition, sts), factors in zip(runs, speed_factors(runs, normalize)):
        by_stage = {st.ready.pipe_rank: st for st in sts if st.ready}
        per_run.append((partition, {stage: _stage_spans(by_stage[stage], which).scaled(factors[stage])
                                    for stage in (0, 1)}))
    fitted: dict[str, tuple[float, dict[int, float]]] = {}
    for field, fallback in (("forward", alone["block"].forward_ms), ("backward", alone["block"].backward_ms),
                            ("optimizer", alone["block"].optimizer_ms)):
        points = {k: [(part[k], getattr(spans[k], field)) for part, spans in per_run] for k in (0, 1)}
        fitted[field] = fit_blocks(points, fallback)
    whole = alone["block"].backward_ms
    share = alone["block"].weight_grad_ms / whole if whole > 0 else 0.0
    # what the backward split in I and W costs against the whole one, as timed alone
    split = alone["block"].split_backward_ms
    ratio = split / whole if split is not None and whole > 0 else None
    backward = max(0.0, fitted["backward"][0])
    block = LayerTimes(forward_ms=max(0.0, fitted["forward"][0]), backward_ms=backward, weight_grad_ms=backward * share,
                       split_backward_ms=None if ratio is None else backward * ratio,
                       optimizer_ms=max(0.0, fitted["optimizer"][0]), params=alone["block"].params)
    layers = {"embedding": alone["embedding"], "block": block, "head": alone["head"]}
    if "dense_block" in alone:  # a mixture of experts: the block fitted is its MoE block
        layers["moe_block"], layers["block"] = block, in_engine(alone["dense_block"], alone["block"], block)
    all_spans = [sp for _, spans in per_run for sp in spans.values()]
    gap = statistics.median(sp.gap for sp in all_spans)
    overheads: dict[str, Overheads] = {}
    for stage, position in ((0, "first"), (1, "last")):
        own = layers["embedding" if stage == 0 else "head"]
        overheads[position] = Overheads(
            forward_ms=fitted["forward"][1][stage] - own.forward_ms + gap,
            backward_ms=fitted["backward"][1][stage] - own.backward_ms + gap,
            optimizer_ms=fitted["optimizer"][1][stage] - own.optimizer_ms + gap,
            clip_ms=statistics.median(spans[stage].clip_own for _, spans in per_run) + gap,
        )
    # the stage that reaches the gradient-norm all-reduce last does not wait there: what the rest
    # of its CLIP takes is the norm, the all-reduce and the scaling
    clip_allreduce_ms = statistics.median(min(sp.clip_rest for sp in spans.values()) for _, spans in per_run)
    overheads["middle"] = Overheads(**{k: min(getattr(overheads["first"], k), getattr(overheads["last"], k))
                                       for k in Overheads.model_fields})
    # every rank of every run ping-pongs the same sizes: per size, the median over them
    pings = [st.measurements["link"] for st in states if "link" in st.measurements]
    # rows: bytes, median, lower quartile, upper quartile
    samples = median_samples(pings, {"median": 1, "low": 2, "high": 3}[which])
    latency_ms, bytes_per_ms = fit_link(samples)
    assert s.model is not None
    from ppsim.api import DTYPE_BYTES

    message = s.model.seq_len * s.training.micro_batch * s.model.hidden * DTYPE_BYTES[s.model.dtype]
    # a send's overhead beyond the bare transfer of the median link, whichever statistic
    median_rows = median_samples(pings, 1)
    med_latency, med_rate = fit_link(median_rows)
    pairs = [_transfer_overheads(sts, med_latency + message / med_rate, which) for _, sts in runs]
    send_over = statistics.median(x for x, _ in pairs)
    recv_over = statistics.median(y for _, y in pairs)
    return {
        **layers,
        "overheads": overheads,
        "link": LinkProfile(latency_us=latency_ms * 1e3, bandwidth_gb_s=bytes_per_ms * 1e3 / 1e9,
                            send_overhead_us=(send_over + gap) * 1e3, recv_overhead_us=(recv_over + gap) * 1e3,
                            samples=samples),
        "clip_allreduce_us": clip_allreduce_ms * 1e3,
    }


def _around(median: dict[str, Any], low: dict[str, Any], high: dict[str, Any]) -> tuple[QuartileTimes, QuartileTimes]:
    """The timings at the lower and upper quartile, each field put on its side of the median: a
    timing worked out as a difference (an overhead: a stage's time less its layers') or a fit can
    come out of order; the ``low`` set is never slower than the median, the ``high`` never faster."""

    def side(m: float, a: float, b: float) -> tuple[float, float]:
        return min(m, a, b), max(m, a, b)

    def model(m: BaseModel, a: BaseModel, b: BaseModel, fields: tuple[str, ...],
              faster_if_larger: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
        lo, hi = m.model_dump(), m.model_dump()
        for f in fields + faster_if_larger:
            lo[f], hi[f] = side(getattr(m, f), getattr(a, f), getattr(b, f))
            if f in faster_if_larger:
                lo[f], hi[f] = hi[f], lo[f]
        if "samples" in lo:  # the quartile's own ping-pong times
            lo["samples"], hi["samples"] = a.samples, b.samples  # type: ignore[attr-defined]  # a LinkProfile (has "samples")
        return lo, hi

    out: dict[str, dict[str, Any]] = {"low": {}, "high": {}}
    for name in ("embedding", "block", "head", "moe_block"):
        if name not in median:
            continue
        split = ("split_backward_ms",) if median[name].split_backward_ms is not None else ()
        out["low"][name], out["high"][name] = model(median[name], low[name], high[name],
                                                    ("forward_ms", "backward_ms", "weight_grad_ms", "optimizer_ms") + split)
    for key in ("low", "high"):
        out[key]["overheads"] = {}
    for pos, o in median["overheads"].items():
        out["low"]["overheads"][pos], out["high"]["overheads"][pos] = model(
            o, low["overheads"][pos], high["overheads"][pos], tuple(Overheads.model_fields))
    out["low"]["link"], out["high"]["link"] = model(median["link"], low["link"], high["link"],
                                                    ("latency_us", "send_overhead_us", "recv_overhead_us"),
                                                    faster_if_larger=("bandwidth_gb_s",))
    out["low"]["clip_allreduce_us"], out["high"]["clip_allreduce_us"] = side(
        median["clip_allreduce_us"], low["clip_allreduce_us"], high["clip_allreduce_us"])
    return QuartileTimes.model_validate(out["low"]), QuartileTimes.model_validate(out["high"])


def assemble(s: Scenario, runs: list[tuple[list[int], list[RankState]]], normalize: str = "none",
             exchange_run: list[RankState] | None = None) -> Profile:
    """Build the profile from what the profiling ranks recorded in each run (partition, states).

    Per block, the forward, backward and optimizer times are fitted from the engine's own spans
    over the runs' partitions (what a block costs inside DeepSpeed); what is left per stage, less
    the embedding (first) or head (last) as timed alone, is the stage position's overhead. The
    weight-grad share of a block's backward comes from timing it alone. The same, from the lower
    and the upper quartile of every set of repetitions instead of its median, gives the profile's
    ``quartiles``: the spread of what it measured.

    The runs are seconds to minutes apart, and a shared machine's speed drifts between them:
    ``normalize`` (``run`` or ``rank``, see :func:`speed_factors`) puts each run's engine spans at
    one reference speed by the block its ranks timed alone just before their steps; the default,
    ``none``, fits them as measured. Measured paired on this machine (bench/profile_drift.py), the
    normalization did not predict better: quiet, the runs hardly drift (factors 0.93-1.05); loaded,
    what inflates the overheads is the ranks' contention with other work, which a reference timed
    seconds earlier does not follow. ``machine.profiling_block_alone_ms`` records each run's block
    (forward + backward, per stage) timed alone: the drift between the runs.

    A mixture of experts' all-to-all link is fitted to exchanges timed at its dispatch's sizes, then
    set to what ``exchange_run``'s steps (:func:`exchange_scenario`) paid for them
    (:func:`exchange_in_step`; ``machine.exchange_ms`` records both); the routing its steps measured
    is the profile's ``routing_skew`` (:func:`group_routing`)."""
    states = [st for _, sts in runs for st in sts]
    median = _timings(s, runs, "median", normalize)
    low, high = _around(median, _timings(s, runs, "low", normalize), _timings(s, runs, "high", normalize))
    recompute_runs = [st.measurements["recompute"] for st in states if "recompute" in st.measurements]
    recompute: dict[Literal["selective", "full"], RecomputeTimes] = {
        mode: RecomputeTimes(**{k: statistics.median(run[mode][k] for run in recompute_runs)
                                for k in ("forward_ms", "backward_ms")})
        for mode in ("selective", "full") if recompute_runs}
    tp_runs = [st.measurements["tensor_parallel"] for st in states if "tensor_parallel" in st.measurements]
    tensor_parallel = TensorParallelTimes(size=int(tp_runs[0]["size"]), **{
        k: statistics.median(float(run[k]) for run in tp_runs)
        for k in ("forward_ms", "backward_ms", "whole_forward_ms", "whole_backward_ms")}) if tp_runs else None
    measured = [st.measurements["collectives"] for st in states if "collectives" in st.measurements]
    collectives = ring_links([(b, r, g, e) for (b, r), (_, g), (_, e) in zip(
        median_samples(measured, 1), median_samples(measured, 2), median_samples(measured, 3), strict=True)]
    ) if measured else {}
    dispatches = [st.measurements["alltoall"] for st in states if "alltoall" in st.measurements]
    exchange: dict[str, float] = {}
    routing: dict[int, float] = {}
    if dispatches:  # a mixture of experts: its all-to-all as measured at its dispatch's sizes
        collectives["alltoall"] = exchange_link(median_samples(dispatches, 1))
        in_step = in_step_exchanges(exchange_run) if exchange_run is not None else []
        m = s.model
        if in_step and exchange_run is not None and m is not None and m.moe is not None:
            dispatch = ExpertShard(m.moe).dispatch_bytes(m.seq_len * s.training.micro_batch, m.hidden,
                                                         DTYPE_BYTES[m.dtype])
            idle = collectives["alltoall"]
            collectives["alltoall"] = exchange_in_step(idle, in_step, dispatch)
            # the quartiles of what the steps paid, each on its side of the mean the median profile takes
            q1, _, q3 = quartiles(in_step)
            mean = statistics.fmean(in_step)
            low = low.model_copy(update={"collectives": {"alltoall": exchange_in_step(idle, [min(q1, mean)], dispatch)}})
            high = high.model_copy(update={"collectives": {"alltoall": exchange_in_step(idle, [max(q3, mean)], dispatch)}})
            routing = group_routing(exchange_run, m.moe.experts)
            exchange = {"idle": round(alltoall_ms(dispatch, 2, profile_link(idle)), 4),
                        "in_step_mean": round(mean, 4),
                        "in_step_median": round(statistics.median(in_step), 4), "exchanges": len(in_step)}
    first_run = [st for st in runs[0][1] if st.ready]
    import deepspeed
    import torch

    return Profile(
        shape=shape_of(s),
        machine={
            "host": socket.gethostname(),
            "cpu": platform.processor() or platform.machine(),
            "backend": first_run[0].ready.backend if first_run and first_run[0].ready else "gloo",
            "runtime": first_run[0].ready.runtime if first_run and first_run[0].ready else "deepspeed",
            "ranks": len(runs[0][1]),
            "profiling_partitions": [part for part, _ in runs],
            # each run's block (F + B, per stage) timed alone: how far the machine drifted between the runs
            "profiling_block_alone_ms": [[round(v, 3) if v else None for _, v in sorted(a.items())]
                                         for a in _block_alone(runs)],
            "profiling_normalize": normalize,
            # a mixture of experts: one dispatch's all-to-all (ms) timed at a barrier, and as its
            # expert-parallel run's steps paid it (from the later rank's arrival)
            **({"exchange_ms": exchange} if exchange else {}),
            "torch": torch.__version__,
            "deepspeed": deepspeed.__version__,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        **median,
        recompute=recompute,
        collectives=collectives,
        tensor_parallel=tensor_parallel,
        quartiles={"low": low, "high": high},
        routing_skew=routing,
    )


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on this platform
        return None


#: the spread of the profiling runs' block timed alone above which the profile is flagged
DRIFT_WARNING = 0.10


def drift_between_runs(p: Profile) -> float | None:
    """How far apart the profiling runs found the machine's speed: the slowest run's block timed
    alone (forward + backward, the median of its stages) over the fastest's, less one; None where
    the profile does not record it (older profiles, one run)."""
    per_run = p.machine.get("profiling_block_alone_ms") or []
    speeds = [statistics.median(v for v in run if v) for run in per_run if any(run)]
    if len(speeds) < 2 or min(speeds) <= 0:
        return None
    return max(speeds) / min(speeds) - 1.0


def profile_runs(s: Scenario) -> int:
    """How many profiling runs :func:`measure_profile` starts (one per profiling partition, and a
    mixture of experts' expert-parallel run), each of ``PROFILE_WARMUP`` + ``PROFILE_STEPS`` steps."""
    base = profiling_scenario(s)
    return len(profiling_partitions(base.model.layers if base.model else 0)) + (exchange_scenario(base) is not None)


def measure_profile(s: Scenario, timeout_s: float = 120.0, keep: Path | None = None, runtime: str = "deepspeed",
                    force: bool = False, on_progress: Callable[[int, list[RankState]], None] | None = None,
                    runs: int = PROFILE_RUNS) -> Profile:
    """Run the profiling ranks locally (once per profiling partition, and a mixture of experts' once
    more at expert parallelism 2: :func:`exchange_scenario`) in ``runtime`` and return the
    profile (its overheads are that runtime's). The run folders are temporary unless ``keep``
    names a folder for them (earlier runs there are replaced only with ``force``). ``on_progress``
    gets the run's index and its ranks' states while it runs; ``runs``: how many profiling runs
    (:func:`profiling_partitions`)."""
    from ppexec.launch.local import run_local
    from ppexec.launch.prepare import RunOptions, check_environment, check_fits, deadline_s, prepare_run
    from ppexec.launch.pulse import hang_limit_s
    from ppexec.launch.signals import Interrupted

    check_environment(runtime)
    base = profiling_scenario(s)
    layers = base.model.layers if base.model else 0
    top = keep or Path(tempfile.mkdtemp(prefix="ppexec-profile-"))
    load_before = _load_average()

    def run(k: int, scenario: Scenario, mode: str) -> list[RankState]:
        folder = top / f"run-{k}"
        opts = RunOptions(out=folder, steps=PROFILE_STEPS, warmup=PROFILE_WARMUP, timeout_s=timeout_s, mode=mode,
                          runtime=runtime, force=force)
        prepared, world = prepare_run(scenario, opts)
        check_fits(prepared.scenario, world)
        try:
            watch = None if on_progress is None else partial(on_progress, k)
            return run_local(folder, world, deadline_s(opts) + 60, watch, hang_limit_s(timeout_s))
        except Interrupted:
            raise  # its message names the folder already
        except PpsimError as exc:
            raise PpsimError(f"{exc} (the profiling run's logs are in {folder})") from None

    partitions = profiling_partitions(layers, runs)
    measured = [(part, run(k, base.with_overrides(partition=part), "profile")) for k, part in enumerate(partitions)]
    experts = exchange_scenario(base)
    exchange_run = run(len(partitions), experts, "train") if experts is not None else None
    try:
        profile = assemble(base, measured, exchange_run=exchange_run)
    except PpsimError as exc:
        raise PpsimError(f"{exc} (the profiling runs' logs are in {top})") from None
    profile.machine["load_average"] = [load_before, _load_average()]  # the machine's 1-minute load, before and after
    if keep is None:
        shutil.rmtree(top, ignore_errors=True)
    return profile
