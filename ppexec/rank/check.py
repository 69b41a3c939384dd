"""A rank run alone (:mod:`ppexec.rank.emulate`) against ppsim's prediction of the same rank:
compute time per action kind, the peak and the action at which it is reached, the model states,
memory over the step as a measured Trace of the rank, and the verdict on the device's memory.

The verdict: ``fits``, ``tight`` (under 5 % of the device left) or ``does not fit``, from the
measured peak; on a GPU from what the run made the device hold (the allocator's reserve, which
holds the peak and its fragments, plus what the process holds beside it: the CUDA context and
workspaces), so that it never says fits where the run ran out of memory.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from ppexec.rank.emulate import ActionRecord, MemoryRecord, RankRun
from ppsim.api import Action, Counter, Prediction, Scenario, Span, Trace, get_device, summarize

COMPUTE = ("F", "B", "I", "W", "OVERLAP_F_B", "OPT")
TIGHT = 0.05  #: a device with less than this share of its memory left is "tight"


@dataclass(frozen=True)
class RankCheck:
    rank: int
    stages: list[int]
    device: str
    steps: int
    #: per compute kind: (predicted ms, measured ms: the median over the timed steps after the first)
    kinds: dict[str, tuple[float, float]]
    predicted_peak_bytes: float
    predicted_peak_at: str | None
    measured_peak_bytes: int  #: the most held at any moment (inside an action: its working memory too)
    measured_peak_at: str
    measured_between_bytes: int  #: the most held after an action (what ppsim's counters model)
    measured_between_at: str
    #: weights, gradients, optimizer: (predicted, measured) bytes
    model_states: dict[str, tuple[int, int]]
    device_bytes: int  #: the device's memory
    beyond_bytes: int  #: what the device held beyond the program's tensors (GPU: reserve and context)
    verdict: str
    trace: Trace = field(repr=False)
    order_ok: bool = True  #: the actions ran are the plan's, in its order

    @property
    def headroom(self) -> float:
        return 1 - (self.measured_peak_bytes + self.beyond_bytes) / self.device_bytes

    def to_json_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "stages": self.stages, "device": self.device, "steps": self.steps,
                "compute_ms": {k: {"predicted": p, "measured": m} for k, (p, m) in self.kinds.items()},
                "peak_memory_bytes": {"predicted": self.predicted_peak_bytes, "predicted_at": self.predicted_peak_at,
                                      "measured": self.measured_peak_bytes, "measured_at": self.measured_peak_at,
                                      "measured_after_actions": self.measured_between_bytes,
                                      "measured_after_actions_at": self.measured_between_at},
                "model_state_bytes": {k: {"predicted": p, "measured": m} for k, (p, m) in self.model_states.items()},
                "device_bytes": self.device_bytes, "beyond_bytes": self.beyond_bytes, "verdict": self.verdict,
                "order_ok": self.order_ok}


def check_rank(s: Scenario, prediction: Prediction, rank: int, device: torch.device, steps: int = 3,
               waits: bool = True, seed: int = 1234) -> RankCheck:
    """Run rank ``rank`` alone for ``steps`` timed steps and one step of memory, and set it against
    the prediction."""
    run = RankRun(s, prediction, rank, device, seed)
    context = _process_bytes(device)
    timed = [run.step(k, waits) for k in range(steps)]
    memory = run.memory_step(steps)
    states = run.model_state_bytes()
    order_ok = [r.action for r in timed[-1]] == [str(a) for a in prediction.plan.actions[rank]]
    measured_kinds = _kind_ms(timed[1:] or timed)
    summary = summarize(prediction.trace, waits=False)
    mine = summary.per_rank[rank]
    kinds = {k: (mine.compute_ms.get(k, 0.0), measured_kinds.get(k, 0.0)) for k in COMPUTE
             if mine.compute_ms.get(k) or measured_kinds.get(k)}
    static = mine.static_memory_bytes
    model_states = {name: (int(static[name]) if static else 0, states[name])
                    for name in ("weights", "gradients", "optimizer")}
    peak = max(memory, key=lambda m: m.most_bytes)
    between = max(memory, key=lambda m: m.after_bytes)
    capacity = int(get_device(s.hardware.device, s.hardware.device_file).memory_gb * 2**30)
    beyond = _beyond_tensors(device, context)
    return RankCheck(rank, run.stages, str(device), steps, kinds, mine.peak_memory_bytes or 0.0,
                     mine.peak_memory_at, peak.most_bytes, peak.action, between.after_bytes, between.action,
                     model_states, capacity, beyond,
                     verdict(peak.most_bytes + beyond, capacity),
                     rank_trace(prediction, rank, timed[-1], memory), order_ok)


def as_built(s: Scenario) -> tuple[Scenario, list[str]]:
    """The scenario of the model ppexec builds, and what differs: its blocks have no dropout, so a
    model with dropout is predicted without its masks (the attention follows the scenario:
    fused under ``flash_attention``, its scores kept without)."""
    from ppsim.api import parse_scenario

    if s.model is None or not s.model.dropout:
        return s, []
    data = s.model_dump(exclude_none=True)
    data["model"]["dropout"] = False
    return (parse_scenario(data, source="the model ppexec builds"),
            ["ppexec's blocks have no dropout: the prediction checked is of the model without it (model.dropout: "
             "false; with dropout ppsim adds its masks)"])


def verdict(held: int, capacity: int) -> str:
    """``does not fit`` beyond the device, ``tight`` within 5 % of it, else ``fits``."""
    return "does not fit" if held > capacity else "tight" if held > (1 - TIGHT) * capacity else "fits"


def _kind_ms(steps: list[list[ActionRecord]]) -> dict[str, float]:
    """Per compute kind, the median over the steps of its summed durations."""
    per_step: list[dict[str, float]] = []
    for records in steps:
        sums: dict[str, float] = {}
        for r in records:
            kind = Action.parse(r.action).kind.value
            if kind in COMPUTE:
                sums[kind] = sums.get(kind, 0.0) + r.end_ms - r.start_ms
        per_step.append(sums)
    kinds = {k for d in per_step for k in d}
    return {k: statistics.median(d.get(k, 0.0) for d in per_step) for k in kinds}


def _process_bytes(device: torch.device) -> int:
    """A GPU's bytes in use by anything before the rank's tensors (the CUDA context); 0 on a CPU."""
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def _beyond_tensors(device: torch.device, before: int) -> int:
    """What the device holds beyond the live tensors at the peak: the allocator's reserve over its
    peak allocation, and what was in use before the rank's first tensor (the context)."""
    if device.type != "cuda":
        return 0
    return torch.cuda.max_memory_reserved(device) - torch.cuda.max_memory_allocated(device) + before


def rank_trace(prediction: Prediction, rank: int, records: list[ActionRecord], memory: list[MemoryRecord]) -> Trace:
    """The rank's measured step as a Trace of the plan (the other ranks absent): each action's span,
    and the memory after each action at its end."""
    spans = []
    for r in records:
        a = Action.parse(r.action)
        spans.append(Span(rank, a.lane, a, r.start_ms, r.end_ms))
    points = tuple((r.end_ms, float(m.after_bytes)) for r, m in zip(records, memory, strict=True))
    meta = dict(prediction.trace.meta)
    meta.update(source="measured", clock=f"perf_counter of rank {rank} run alone", memory_measured="allocator")
    return Trace(spans=spans, meta=meta, counters=[Counter(rank, "memory_bytes", "bytes", points)])  # type: ignore[arg-type]


def predicted_rank(prediction: Prediction, rank: int) -> Trace:
    """The prediction's spans and counters of one rank: what a rank run alone is compared with."""
    t = prediction.trace
    return Trace(spans=[sp for sp in t.spans if sp.rank == rank], meta=dict(t.meta),  # type: ignore[arg-type]
                 counters=[c for c in t.counters if c.rank == rank])
