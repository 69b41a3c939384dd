"""What an executor uses of ppsim: ppexec imports ppsim through this module and ``ppsim.errors`` only
(``tests/ppexec/test_layout_ppexec.py`` holds it to that), so what ppexec depends on is this one list.

- the inputs: the scenario, its model, the profile ppexec measures and its parts, the device catalogue
- the plan: Plan, Action, Kind and its groups, building and lowering a scenario's plan, the schedule registry
- the prediction and the simulator, and the costs a run checks against this machine
- the trace: Trace, Span, Counter, its metrics, comparison and Chrome export
- what ppexec prints and writes: ppsim's tables and pages, the command line's shared options and
  messages, its progress bar, its way of writing an output file

Each name loads its module on first use (PEP 562), so importing this module costs nothing and a
rank that reads a Plan does not load the simulator, the views or the command line. ``import ppsim``
does not import this module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names as _SOURCES below, for the type checker
    from ppsim.cli.common import (
        PARALLEL_OPTIONS,
        PlanOverrides,
        err,
        fail,
        load_profile_option,
        output_targets,
        plan_options,
        say,
        scenario_with,
        usage_error,
        version_option,
    )
    from ppsim.cli.progress import progress_bar
    from ppsim.costs.host_memory import host_run_bytes
    from ppsim.costs.layers import gpt_layers
    from ppsim.costs.moe import ExpertShard, alltoall_ms, measured_skew
    from ppsim.costs.profiled import profile_link
    from ppsim.formats import DEVICE_FILE_MARKER
    from ppsim.frameworks.deepspeed import parts as deepspeed_parts
    from ppsim.inputs.hardware import Device, get_device
    from ppsim.inputs.profile import (
        LayerTimes,
        LinkProfile,
        MeasuredCollective,
        Overheads,
        Profile,
        QuartileTimes,
        RecomputeTimes,
        TensorParallelTimes,
        shape_of,
    )
    from ppsim.inputs.scenario import DTYPE_BYTES, ModelSpec, Scenario, parse_scenario
    from ppsim.outputs import write_text as write_output
    from ppsim.plan import BACKWARD_KINDS, COMM_KINDS, COMPUTE_KINDS, RECV_KINDS, Action, Kind, Plan, peer_stage
    from ppsim.plan.schedules import PROFILING as PROFILING_SCHEDULE
    from ppsim.plan.schedules import SEARCHED as SEARCHED_SCHEDULE
    from ppsim.prediction import Prediction, build, lower_built, predict, scenario_workload, workload_meta
    from ppsim.search.sweep import with_skew
    from ppsim.sim import simulate
    from ppsim.trace import Counter, MemorySource, Span, Trace, TraceMeta, plan_meta
    from ppsim.trace.chrome import write_chrome_trace
    from ppsim.trace.compare import Comparison, compare_traces
    from ppsim.trace.metrics import Summary, rank_metrics, step_time_ms, summarize
    from ppsim.views.render.compare_html import write_compare_html
    from ppsim.views.render.compare_table import comparison_renderable
    from ppsim.views.render.console import stdout_console
    from ppsim.views.render.summary_table import print_summary

#: each name: the module it comes from, and its name there where that differs (``module:name``)
_SOURCES: dict[str, str] = {
    # inputs
    "Scenario": "ppsim.inputs.scenario",
    "ModelSpec": "ppsim.inputs.scenario",
    "parse_scenario": "ppsim.inputs.scenario",
    "DTYPE_BYTES": "ppsim.inputs.scenario",
    "Profile": "ppsim.inputs.profile",
    "LayerTimes": "ppsim.inputs.profile",
    "LinkProfile": "ppsim.inputs.profile",
    "MeasuredCollective": "ppsim.inputs.profile",
    "Overheads": "ppsim.inputs.profile",
    "QuartileTimes": "ppsim.inputs.profile",
    "RecomputeTimes": "ppsim.inputs.profile",
    "TensorParallelTimes": "ppsim.inputs.profile",
    "shape_of": "ppsim.inputs.profile",
    "Device": "ppsim.inputs.hardware",
    "get_device": "ppsim.inputs.hardware",
    # the plan
    "Plan": "ppsim.plan",
    "Action": "ppsim.plan",
    "Kind": "ppsim.plan",
    "peer_stage": "ppsim.plan",
    "COMM_KINDS": "ppsim.plan",
    "COMPUTE_KINDS": "ppsim.plan",
    "RECV_KINDS": "ppsim.plan",
    "BACKWARD_KINDS": "ppsim.plan",
    "SEARCHED_SCHEDULE": "ppsim.plan.schedules:SEARCHED",
    "PROFILING_SCHEDULE": "ppsim.plan.schedules:PROFILING",
    # prediction, simulation, costs
    "build": "ppsim.prediction",
    "lower_built": "ppsim.prediction",
    "predict": "ppsim.prediction",
    "Prediction": "ppsim.prediction",
    "scenario_workload": "ppsim.prediction",
    "workload_meta": "ppsim.prediction",
    "simulate": "ppsim.sim",
    "with_skew": "ppsim.search.sweep",
    "host_run_bytes": "ppsim.costs.host_memory",
    "deepspeed_parts": "ppsim.frameworks.deepspeed:parts",
    "gpt_layers": "ppsim.costs.layers",
    "ExpertShard": "ppsim.costs.moe",
    "alltoall_ms": "ppsim.costs.moe",
    "measured_skew": "ppsim.costs.moe",
    "profile_link": "ppsim.costs.profiled",
    # the trace
    "Trace": "ppsim.trace",
    "TraceMeta": "ppsim.trace",
    "MemorySource": "ppsim.trace",
    "Span": "ppsim.trace",
    "Counter": "ppsim.trace",
    "plan_meta": "ppsim.trace",
    "Summary": "ppsim.trace.metrics",
    "summarize": "ppsim.trace.metrics",
    "step_time_ms": "ppsim.trace.metrics",
    "rank_metrics": "ppsim.trace.metrics",
    "Comparison": "ppsim.trace.compare",
    "compare_traces": "ppsim.trace.compare",
    "write_chrome_trace": "ppsim.trace.chrome",
    # what ppexec prints and writes
    "comparison_renderable": "ppsim.views.render.compare_table",
    "write_compare_html": "ppsim.views.render.compare_html",
    "stdout_console": "ppsim.views.render.console",
    "print_summary": "ppsim.views.render.summary_table",
    "PARALLEL_OPTIONS": "ppsim.cli.common",
    "PlanOverrides": "ppsim.cli.common",
    "err": "ppsim.cli.common",
    "fail": "ppsim.cli.common",
    "load_profile_option": "ppsim.cli.common",
    "output_targets": "ppsim.cli.common",
    "plan_options": "ppsim.cli.common",
    "say": "ppsim.cli.common",
    "scenario_with": "ppsim.cli.common",
    "usage_error": "ppsim.cli.common",
    "version_option": "ppsim.cli.common",
    "progress_bar": "ppsim.cli.progress",
    "write_output": "ppsim.outputs:write_text",
    "DEVICE_FILE_MARKER": "ppsim.formats",
}

__all__ = [
    "BACKWARD_KINDS", "COMM_KINDS", "COMPUTE_KINDS", "DEVICE_FILE_MARKER", "DTYPE_BYTES", "ExpertShard",
    "PARALLEL_OPTIONS", "PROFILING_SCHEDULE", "RECV_KINDS", "Action", "Comparison", "Counter", "Device", "Kind", "LayerTimes",
    "LinkProfile", "MeasuredCollective", "MemorySource", "ModelSpec", "Overheads", "Plan", "PlanOverrides",
    "Prediction", "Profile", "QuartileTimes",
    "RecomputeTimes", "SEARCHED_SCHEDULE", "Scenario", "Span", "Summary", "TensorParallelTimes", "Trace", "TraceMeta", "build",
    "compare_traces", "deepspeed_parts",
    "alltoall_ms", "comparison_renderable", "err", "fail", "get_device", "gpt_layers", "host_run_bytes", "load_profile_option",
    "lower_built", "measured_skew", "output_targets", "parse_scenario", "peer_stage", "plan_meta", "plan_options", "predict",
    "print_summary", "profile_link", "progress_bar", "rank_metrics", "say", "scenario_with", "scenario_workload", "shape_of",
    "simulate", "stdout_console", "step_time_ms", "summarize", "usage_error", "version_option",
    "with_skew", "workload_meta", "write_chrome_trace", "write_compare_html", "write_output",
]


if not TYPE_CHECKING:  # the type checker reads the imports above; an unknown name stays an error for it

    def __getattr__(name: str) -> Any:
        source = _SOURCES.get(name)
        if source is None:
            raise AttributeError(f"module 'ppsim.api' has no attribute {name!r}")
        module, _, there = source.partition(":")
        value = getattr(importlib.import_module(module), there or name)
        globals()[name] = value  # once loaded, a plain module attribute
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
