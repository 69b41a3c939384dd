"""``ppexec validate``: the whole loop for one scenario — profile, predict, run, compare.

The prediction and the run use the same plan: the partition and the order of sends and receives
come from the measured profile on both sides (``ppexec.launch.prepare``), and the prediction uses the
send semantics of the runtime that runs it (DeepSpeed's sends block until received, torch's are
posted and waited for at the end of the step).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ppexec.launch.prepare import RunOptions, prepare
from ppexec.results.collect import RunResult, execute
from ppexec.worker.events import RankState
from ppsim.api import (
    Comparison,
    Prediction,
    Profile,
    QuartileTimes,
    Scenario,
    Trace,
    compare_traces,
    predict,
    rank_metrics,
    scenario_workload,
    step_time_ms,
    with_skew,
)
from ppsim.errors import PpsimError, shown_path

PROFILE_FILE = "profile.yaml"
OUTPUTS = (PROFILE_FILE, "predicted.trace.json", "comparison.json", "comparison.html", "run")


def check_validation_folder(out: Path, force: bool = False) -> None:
    """A validation folder is new, empty, or (with ``force``) holds only what an earlier validation
    wrote, which this one replaces."""
    from ppexec.launch.folders import check_run_folder, check_writable

    check_writable(out, "--out", folder=True)
    if out.exists() and not out.is_dir():
        raise PpsimError(f"{shown_path(out)} exists and is not a folder; choose another --out", field="--out")
    if out.is_dir():
        names = sorted(p.name for p in out.iterdir())
        foreign = [n for n in names if n not in OUTPUTS]
        if foreign:
            raise PpsimError(f"{shown_path(out)} holds files that are not a ppexec validation ({', '.join(foreign[:3])}); "
                             "choose an empty or new folder", field="--out")
        if names and not force:
            raise PpsimError(f"{shown_path(out)} holds an earlier validation ({', '.join(names[:3])}), which this one "
                             "would replace; choose a new folder, or pass --force to replace it", field="--out")
    check_run_folder(out / "run", force)


@dataclass(frozen=True)
class ProfileSpread:
    """How far the prediction moves within the spread of the profile's own measurements: the same
    plan predicted with every timing at its lower quartile and at its upper quartile."""

    low_ms: float  #: the step predicted with every timing at its lower quartile
    high_ms: float  #: ... at its upper quartile
    predicted_ms: float  #: with the profile's medians

    @property
    def relative(self) -> float:
        """Half the range of the two predictions over the prediction: errors below it are noise."""
        return (self.high_ms - self.low_ms) / 2 / self.predicted_ms if self.predicted_ms > 0 else 0.0

    def describe(self) -> str:
        return (f"{100 * self.relative:.1f}%: errors below that are noise (the step predicted with every timing at its "
                f"lower / upper quartile: {self.low_ms:.2f} / {self.high_ms:.2f} ms)")

    def line(self) -> str:
        return f"profile spread {self.describe()}"


def profile_at(profile: Profile, quartile: Literal["low", "high"]) -> Profile:
    """The profile with every timing it records a spread of at its ``low`` or ``high`` quartile
    (the rest — recomputation, the collectives without one, tensor parallelism — at the median)."""
    q = profile.quartiles[quartile]
    update = {k: getattr(q, k) for k in QuartileTimes.model_fields if k != "collectives"}
    return profile.model_copy(update={**update, "collectives": {**profile.collectives, **q.collectives}})


def profile_spread(prediction: Prediction, profile: Profile) -> ProfileSpread | None:
    """The prediction's spread from the profile: the very same lowered plan simulated on the costs
    of the profile at its lower and at its upper quartile (None: the profile records no quartiles,
    a profile from before they were recorded)."""
    from ppsim.api import simulate

    if not {"low", "high"} <= profile.quartiles.keys():
        return None
    s = prediction.scenario
    steps = {}
    for quartile in ("low", "high"):
        costs = scenario_workload(s, profile_at(profile, quartile)).costs
        steps[quartile] = step_time_ms(simulate(prediction.plan, costs, s.pipeline.comm))
    return ProfileSpread(low_ms=steps["low"], high_ms=steps["high"], predicted_ms=step_time_ms(prediction.trace))


@dataclass(frozen=True)
class RunRouting:
    """The prediction again with the routing the run measured (the ``routing_skew`` of the step
    compared) in place of the scenario's: what is left of the error once the routing, a property
    of the run's data and router rather than of the machine, is as it was."""

    skew: float  #: the run's: its busiest expert-parallel rank's token copies over the mean
    predicted_skew: float  #: the one the prediction used: the scenario's, or its profile's measured one
    predicted_ms: float  #: the step predicted at the run's skew
    error: float  #: (predicted - measured) / measured
    from_profile: bool = False  #: ``predicted_skew`` is what the profile's expert-parallel run measured

    def describe(self) -> str:
        whose = "the profile's routing_skew" if self.from_profile else "model.moe.skew"
        return (f"{self.predicted_ms:.2f} ms, error {100 * self.error:+.2f}% at the run's routing skew {self.skew:.2f} "
                f"(the prediction's {self.predicted_skew:.2f}; {whose})")


def run_routing(s: Scenario, profile: Profile, prediction: Prediction, run: RunResult, measured_ms: float
                ) -> RunRouting | None:
    """The prediction at the routing skew of the run's step it is compared with (``measured_ms``;
    None without expert parallelism, or where that skew is the prediction's to 1 %)."""
    skew = run.representative.meta.get("routing_skew")
    predicted_skew = prediction.trace.meta.get("routing_skew")
    if skew is None or predicted_skew is None:
        return None
    if abs(skew - predicted_skew) <= 0.01 * predicted_skew:
        return None
    again = predict(with_skew(s, skew), profile)
    predicted = step_time_ms(again.trace)
    return RunRouting(skew=skew, predicted_skew=predicted_skew, predicted_ms=predicted,
                      error=(predicted - measured_ms) / measured_ms,
                      from_profile=bool(prediction.trace.meta.get("routing_from_profile")))


@dataclass(frozen=True)
class Validation:
    scenario: Scenario  #: as run: rendezvous sends, explicit partition
    prediction: Prediction
    run: RunResult
    comparison: Comparison  #: the prediction against the run's median step
    #: per stage, the median over the recorded steps of (predicted - measured bubble fraction), in
    #: percentage points: steadier than one step's figure, where a single slow action moves it
    bubble_error_pp: tuple[float, ...]
    #: the prediction with the profile at its lower and upper quartiles (None: no quartiles in the profile)
    profile_spread: ProfileSpread | None = None
    #: the prediction at the run's routing skew (None: no expert parallelism, or the skew predicted)
    run_routing: RunRouting | None = None

    @property
    def max_abs_bubble_error_pp(self) -> float:
        return max((abs(x) for x in self.bubble_error_pp), default=0.0)


def median_bubble_errors(predicted: Trace, steps: list[Trace]) -> tuple[float, ...]:
    """Per stage, the median over ``steps`` of predicted minus measured bubble fraction (pp)."""
    pred = [m.bubble_fraction for m in rank_metrics(predicted)]
    per_step = [[m.bubble_fraction for m in rank_metrics(t)] for t in steps]
    return tuple(100 * statistics.median(p - meas[k] for meas in per_step) for k, p in enumerate(pred))


def predict_as_run(s: Scenario, profile: Profile, runtime: str = "auto") -> tuple[Scenario, str, Prediction]:
    """The scenario exactly as ppexec will run it, the runtime that runs it, and its prediction from the profile."""
    prepared = prepare(s, profile, runtime)
    return prepared.scenario, prepared.runtime, predict(prepared.scenario, profile)


def validate(s: Scenario, profile: Profile, run_dir: Path, steps: int = 10, warmup: int = 2,
             timeout_s: float = 120.0, runtime: str = "auto", force: bool = False,
             on_progress: Callable[[list[RankState]], None] | None = None) -> Validation:
    """Predict the scenario with ``profile``, run it for real in ``run_dir`` (an earlier run there is
    replaced only with ``force``; ``on_progress`` follows its ranks) and compare."""
    as_run, chosen, prediction = predict_as_run(s, profile, runtime)
    result = execute(as_run, RunOptions(out=run_dir, steps=steps, warmup=warmup, timeout_s=timeout_s,
                                        runtime=chosen, force=force), on_progress, profile=profile)
    comparison = compare_traces(prediction.trace, result.representative)
    return Validation(scenario=as_run, prediction=prediction, run=result, comparison=comparison,
                      bubble_error_pp=median_bubble_errors(prediction.trace, result.traces),
                      profile_spread=profile_spread(prediction, profile),
                      run_routing=run_routing(as_run, profile, prediction, result, comparison.measured_step_time_ms))


def comparison_doc(v: Validation) -> dict[str, Any]:
    """comparison.json: the comparison (``ppsim compare --json``), the median bubble error per
    stage, and the prediction's spread from the profile (``profile_spread``: half the range of the
    steps predicted with the profile at its lower and upper quartile, over the prediction; null
    with a profile that records no quartiles)."""
    doc = v.comparison.to_json_dict()
    doc["median_bubble_error_pp"] = list(v.bubble_error_pp)
    spread = v.profile_spread
    doc["profile_spread"] = spread.relative if spread else None
    doc["predicted_step_time_low_ms"] = spread.low_ms if spread else None
    doc["predicted_step_time_high_ms"] = spread.high_ms if spread else None
    routing = v.run_routing
    doc["with_run_routing"] = None if routing is None else {
        "routing_skew": routing.skew, "predicted_routing_skew": routing.predicted_skew,
        "predicted_step_time_ms": routing.predicted_ms, "step_time_error": routing.error}
    return doc


def write_outputs(v: Validation, out: Path) -> None:
    """The predicted trace, the comparison (JSON) and the overlay page, next to the run folder."""
    from ppexec.results.collect import write_run_outputs
    from ppsim.api import write_compare_html

    write_run_outputs(v.run, out / "run")
    v.prediction.trace.save(out / "predicted.trace.json")
    (out / "comparison.json").write_text(json.dumps(comparison_doc(v), indent=2))
    write_compare_html(v.prediction.trace, v.run.representative, v.comparison, out / "comparison.html")
