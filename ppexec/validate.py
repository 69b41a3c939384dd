"""``ppexec validate``: the whole loop for one scenario — profile, predict, run, compare.

The prediction and the run use the same plan: the partition and the order of sends and receives
come from the measured profile on both sides (``ppexec.run.prepare``), and the prediction uses the
send semantics of the runtime that runs it (DeepSpeed's sends block until received, torch's are
posted and waited for at the end of the step).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from ppexec.run import RunOptions, RunResult, execute, prepare
from ppsim.errors import PpsimError
from ppsim.inputs.profile import Profile
from ppsim.inputs.scenario import Scenario
from ppsim.prediction import Prediction, predict
from ppsim.trace import Trace
from ppsim.trace.compare import Comparison, compare_traces
from ppsim.trace.metrics import rank_metrics

PROFILE_FILE = "profile.yaml"
OUTPUTS = (PROFILE_FILE, "predicted.trace.json", "comparison.json", "comparison.html", "run")


def check_validation_folder(out: Path) -> None:
    """A validation folder is new, empty, or holds only what an earlier validation wrote."""
    from ppexec.run import check_run_folder

    if out.exists() and not out.is_dir():
        raise PpsimError(f"{out} exists and is not a folder; choose another --out", field="--out")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in OUTPUTS)
        if foreign:
            raise PpsimError(f"{out} holds files that are not a ppexec validation ({', '.join(foreign[:3])}); "
                             "choose an empty or new folder", field="--out")
    check_run_folder(out / "run")


@dataclass(frozen=True)
class Validation:
    scenario: Scenario  #: as run: rendezvous sends, explicit partition
    prediction: Prediction
    run: RunResult
    comparison: Comparison  #: the prediction against the run's median step
    #: per stage, the median over the recorded steps of (predicted - measured bubble fraction), in
    #: percentage points: steadier than one step's figure, where a single slow action moves it
    bubble_error_pp: tuple[float, ...]

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
             timeout_s: float = 120.0, runtime: str = "auto") -> Validation:
    """Predict the scenario with ``profile``, run it for real in ``run_dir`` and compare."""
    as_run, chosen, prediction = predict_as_run(s, profile, runtime)
    result = execute(as_run, RunOptions(out=run_dir, steps=steps, warmup=warmup, timeout_s=timeout_s,
                                        runtime=chosen), profile=profile)
    comparison = compare_traces(prediction.trace, result.representative)
    return Validation(scenario=as_run, prediction=prediction, run=result, comparison=comparison,
                      bubble_error_pp=median_bubble_errors(prediction.trace, result.traces))


def write_outputs(v: Validation, out: Path) -> None:
    """The predicted trace, the comparison (JSON) and the overlay page, next to the run folder."""
    from ppexec.run import write_run_outputs
    from ppsim.views.render.compare_html import write_compare_html

    write_run_outputs(v.run, out / "run")
    v.prediction.trace.save(out / "predicted.trace.json")
    doc = v.comparison.to_json_dict()
    doc["median_bubble_error_pp"] = list(v.bubble_error_pp)
    (out / "comparison.json").write_text(json.dumps(doc, indent=2))
    write_compare_html(v.prediction.trace, v.run.representative, v.comparison, out / "comparison.html")
