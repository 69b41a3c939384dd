"""ppsim: plan, see and check pipeline-parallel training.

The public API, for scripts, notebooks, tests and benchmarks (each function imports what it needs
when called, so ``import ppsim`` stays light)::

    import ppsim
    s = ppsim.load_scenario("scenarios/gpt.yaml")
    plan = ppsim.build_plan(s)                    # the lowered plan every rank runs
    prediction = ppsim.predict(s)                 # .trace, .plan, .workload
    summary = ppsim.summarize(prediction.trace)   # step time, bubble, MFU, memory per rank
    measured = ppsim.load_trace("runs/tiny")      # a Trace file, a ppexec run folder, a Chrome trace
    ppsim.compare(prediction.trace, measured)     # step-time and per-action errors

Packages follow the data flow: ``inputs`` (scenario, DeepSpeed config, profile, hardware, cluster)
-> ``costs`` (layers, partition, memory, collectives, the CostTable) and ``plan`` (Actions, Plans,
passes, schedules) -> ``sim`` (the discrete-event engine) -> ``trace`` (Trace, metrics, compare, files)
-> ``views`` (tables, pages, the TUI); ``search`` (sweep, tune), ``predict`` and ``cli`` on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ppsim.inputs.profile import Profile
    from ppsim.inputs.scenario import Scenario
    from ppsim.plan import Plan
    from ppsim.prediction import Prediction
    from ppsim.trace import Trace
    from ppsim.trace.compare import Comparison
    from ppsim.trace.metrics import Summary

__all__ = ["allow_gc_pauses", "build_plan", "compare", "load_profile", "load_scenario", "load_trace", "predict",
           "summarize"]


def allow_gc_pauses(allowed: bool = True) -> None:
    """Let ppsim pause this process's cyclic garbage collector around its allocation-heavy passes
    (building, lowering and simulating large plans: several times faster on plans of 10^5 actions).
    Off by default, so a library call leaves its host's collector alone; the ``ppsim`` command and
    its worker processes turn it on. Process-wide: allow it where no other thread allocates meanwhile."""
    from ppsim.gc_pause import allow_gc_pauses as allow

    allow(allowed)


def load_scenario(path: str | Path, ds_config: str | Path | None = None, **overrides: Any) -> Scenario:
    """The scenario of a YAML file (with a DeepSpeed config, if given or named), validated, with
    ``overrides`` laid over it as the command line's plan options are (``schedule``, ``stages``,
    ``microbatches``, ``chunks``, ``partition``, ``comm``, ``data_parallel``, ``tensor_parallel``,
    ``micro_batch``, ``recompute``, ``zero_stage``): a schedule named without chunks runs the chunks
    its registry entry takes by default, as ``--schedule`` does. Bad input raises
    :class:`ppsim.errors.ScenarioError` naming the key."""
    from ppsim.inputs.scenario import load

    return load(path, ds_config).with_overrides(**overrides)


def load_profile(path: str | Path) -> Profile:
    """A profile measured by ``ppexec profile``."""
    from ppsim.inputs.profile import load_profile as load

    return load(path)


def build_plan(scenario: Scenario, *, lowered: bool = True, profile: Profile | None = None) -> Plan:
    """The scenario's plan: compute-only, or lowered (sends, receives, end of step) as the simulator
    and ppexec run it, its messages ordered by the scenario's (or the profile's) costs."""
    from ppsim.prediction import build, lower_built

    built = build(scenario, profile)
    return lower_built(built) if lowered else built.plan


def predict(scenario: Scenario, profile: Profile | None = None) -> Prediction:
    """Simulate one training step: the Prediction's ``trace`` is what every metric and view reads."""
    from ppsim.prediction import predict as run

    return run(scenario, profile)


def summarize(trace: Trace) -> Summary:
    """Step time, throughput, MFU, bubble and memory of a trace, per rank and overall."""
    from ppsim.trace.metrics import summarize as run

    return run(trace)


def load_trace(path: str | Path) -> Trace:
    """A Trace from a ppsim trace file, a ppexec run folder or a Chrome trace ppsim wrote."""
    from ppsim.trace.load import load_trace as run

    return run(path)


def compare(predicted: Trace, measured: Trace, top: int = 10) -> Comparison:
    """Predicted against measured: step time, bubble per rank, errors per action kind."""
    from ppsim.trace.compare import compare_traces

    return compare_traces(predicted, measured, top)
