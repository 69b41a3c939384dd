"""The ``ppsim`` commands: each parses its options, calls the library, prints, and sets the exit code
(0 success, 1 bad input, 2 bad usage; see :mod:`ppsim.cli.common`)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ppsim.cli.common import (
    PARALLEL_OPTIONS,
    PlanOverrides,
    bad_input_exits,
    err,
    float_list,
    force_option,
    html_option,
    int_list,
    load_profile_option,
    output_targets,
    plan_options,
    png_option,
    profile_option,
    report_written,
    say,
    scenario_with,
    usage_error,
    version_option,
    write_pages,
)
from ppsim.errors import PpsimError
from ppsim.search.tune import ExecutorName

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from ppsim.trace import Trace

app = typer.Typer(
    name="ppsim",
    help="Predict and picture pipeline-parallel training: step time, bubbles, throughput, MFU, memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(version: bool = version_option("ppsim")) -> None:
    """ppsim: predict and picture pipeline-parallel training."""


@app.command()
@plan_options()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as one JSON document."),
    trace: Path | None = typer.Option(None, "--trace", help="Write a Chrome trace (Perfetto, chrome://tracing)."),
    html: Path | None = html_option("the timeline and memory per rank"),
    png: Path | None = png_option(),
    save_trace: Path | None = typer.Option(None, "--save-trace", help="Write ppsim's own Trace JSON."),
    force: bool = force_option(),
    profile: Path | None = profile_option(),
    ds_config: Path | None = typer.Option(None, "--ds-config",
                                          help="DeepSpeed config JSON: batch sizes, precision, ZeRO, checkpointing."),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Simulate one training step of SCENARIO and print step time, throughput, MFU and bubbles."""
    from ppsim import outputs
    from ppsim.prediction import predict
    from ppsim.trace.metrics import summarize

    with bad_input_exits():
        inputs = [scenario] + [p for p in (profile, ds_config) if p is not None]
        targets = output_targets({"--trace": trace, "--html": html, "--png": png, "--save-trace": save_trace},
                                 inputs, force)  # each input reachable first: a name too long is one line
        _not_a_trace(scenario)
        s = scenario_with(scenario, plan, ds_config)
        # where the all-to-alls fall is drawn by the outputs alone: without one, not worked out
        prediction = predict(s, load_profile_option(profile), placements=bool(targets))
        result = prediction.trace
        summary = summarize(result)
        if "--save-trace" in targets:
            outputs.atomic_write(targets["--save-trace"], result.save)
        _write_step(targets, result)
    to_fit = None
    if summary.fits is False:  # what one change of the plan would make fit, as tune would price it
        from ppsim.prediction.fixes import fixes

        with bad_input_exits():
            to_fit = fixes(s)
    if json_out:
        doc = summary.to_json_dict()
        if to_fit is not None:
            doc["to_fit"] = [{"options": f.options, "step_time_ms": f.step_ms, "peak_memory_bytes": f.peak_bytes}
                             for f in to_fit]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from ppsim.prediction.fixes import fixes_line
    from ppsim.views.render.summary_table import print_summary

    print_summary(summary, to_fit=None if to_fit is None else fixes_line(to_fit, summary.step_time_ms))
    report_written(targets)


@app.command()
def show(
    trace_path: Path = typer.Argument(..., metavar="TRACE", help="A saved step: ppsim's Trace JSON (--save-trace), a "
                                      "ppexec run folder, a Chrome trace ppsim or ppexec wrote, or a folder of torch "
                                      "profiler traces."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as one JSON document."),
    trace: Path | None = typer.Option(None, "--trace", help="Write a Chrome trace (Perfetto, chrome://tracing)."),
    html: Path | None = html_option("the timeline and memory per rank"),
    png: Path | None = png_option(),
    force: bool = force_option(),
) -> None:
    """Print a saved or measured step's figures as `ppsim run` prints a prediction's, and draw its page."""
    from ppsim.trace.load import load_trace
    from ppsim.trace.metrics import summarize

    with bad_input_exits():
        targets = output_targets({"--trace": trace, "--html": html, "--png": png}, [trace_path], force)
        step = load_trace(trace_path)
        summary = summarize(step)
        _write_step(targets, step)
    if json_out:
        sys.stdout.write(json.dumps(summary.to_json_dict(), indent=2) + "\n")
        return
    from ppsim.views.render.summary_table import print_summary

    print_summary(summary)
    report_written(targets)


def _not_a_trace(scenario: Path) -> None:
    """Raise a PpsimError when ``scenario`` is a saved step: ``ppsim show`` reads those."""
    from ppsim.trace.load import looks_like_a_saved_step

    if looks_like_a_saved_step(scenario):
        raise PpsimError(f"{scenario} is a saved step, not a scenario: `ppsim show {scenario}` prints its figures, "
                         "with --html / --png / --trace for its pages")


def _write_step(targets: dict[str, Path], step: Trace) -> None:
    """A step's Chrome trace (``--trace``) and pages (``--html``, ``--png``), those asked for."""
    from ppsim import outputs

    if "--trace" in targets:
        from ppsim.trace.chrome import write_chrome_trace

        outputs.atomic_write(targets["--trace"], lambda p: write_chrome_trace(step, p))
    write_pages(targets, lambda: _gantt(step))


def _gantt(trace: Trace) -> go.Figure:
    """The timeline page's figure (imported only when a page is asked for)."""
    from ppsim.views.render.gantt import gantt_figure

    return gantt_figure(trace)


@app.command()
def schedules() -> None:
    """List the schedules: what each does, the chunks and micro-batches it takes, its placement and
    the activations a rank holds at most (in micro-batches of the whole rank; 1F1B holds p)."""
    from ppsim.views.render.schedules_table import print_schedules

    print_schedules()


@app.command()
@plan_options("schedule", "stages", "microbatches", "chunks")
def plan(
    file: Path = typer.Argument(..., help="Scenario YAML, a plan JSON written by --save, or torch's schedule CSV."),
    comms: bool = typer.Option(False, "--comms", help="Show the lowered plan (sends, receives, end of step)."),
    save: Path | None = typer.Option(None, "--save", help="Write the plan as JSON."),
    csv_out: bool = typer.Option(False, "--csv", help="Print the plan as CSV (one row per rank, torch's layout)."),
    force: bool = force_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Print the plan of FILE as the step x rank grid of action texts."""
    from ppsim import outputs
    from ppsim.plan import aligned_grid, validate

    with bad_input_exits():
        targets = output_targets({"--save": save}, [file], force)
        if file.suffix in (".json", ".csv"):
            if plan.given():
                raise usage_error("plan options need a scenario, not a saved plan", "--schedule / --stages")
            from ppsim.plan.schedules.from_file import load_plan_file, read_plan

            the_plan = read_plan(file) if file.suffix == ".csv" else load_plan_file(file)
            # a plan lowered for posted sends need not run if every send blocked
            validate(the_plan, rendezvous=the_plan.meta.get("sends", "rendezvous") == "rendezvous")
        else:
            import ppsim

            the_plan = ppsim.build_plan(scenario_with(file, plan), lowered=comms)
        if "--save" in targets:
            outputs.write_text(targets["--save"], json.dumps(the_plan.to_dict(), indent=1))
    if csv_out:
        sys.stdout.write(the_plan.to_csv())
        return
    typer.echo(
        f"{the_plan.schedule}: {the_plan.num_ranks} ranks, {the_plan.num_microbatches} micro-batches, "
        f"{the_plan.chunks} chunk(s) per rank, {the_plan.num_actions()} actions"
    )
    typer.echo(aligned_grid(the_plan))


@app.command()
def compare(
    predicted: Path = typer.Argument(..., help="Predicted Trace JSON (`ppsim run --save-trace`)."),
    measured: list[Path] = typer.Argument(..., help="Measured: a Trace JSON, a `ppexec run` folder, or torch profiler "
                                                    "traces of a torch.distributed.pipelining run (their folder, or "
                                                    "one Kineto JSON per rank)."),
    html: Path | None = html_option("both timelines on one time axis"),
    png: Path | None = png_option(),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as one JSON document."),
    top: int = typer.Option(10, "--top", min=0, help="How many of the largest disagreements to list."),
    force: bool = force_option(),
) -> None:
    """Compare a predicted trace with a measured one: step time, bubbles per rank, errors per action."""
    from ppsim.trace.compare import compare_traces
    from ppsim.trace.load import load_trace

    with bad_input_exits():
        targets = output_targets({"--html": html, "--png": png}, [predicted, *measured], force)
        pred, meas = load_trace(predicted, "predicted"), load_trace(measured if len(measured) > 1 else measured[0],
                                                                  "measured")
        result = compare_traces(pred, meas, top)
        from ppsim.views.render.compare_html import compare_figure

        write_pages(targets, lambda: compare_figure(pred, meas, result))
    if json_out:
        sys.stdout.write(json.dumps(result.to_json_dict(), indent=2) + "\n")
        return
    from ppsim.views.render.compare_table import print_comparison

    print_comparison(result)
    report_written(targets)


# ----- several predictions side by side: compare-schedules, sweep -----------------------------
def _print_variants(variants: list, keys: list[str], title: str, targets: dict[str, Path]) -> None:  # list[Variant]
    from ppsim.views.render.variants_table import variants_table

    for v in variants:
        for note in v.notes:
            say("note", note)
        if not v.ok:
            say("error", f"{v.label} cannot run the scenario: {v.error}")
    from ppsim.views.render.console import stdout_console

    stdout_console(highlight=False).print(variants_table(variants, keys, title))
    report_written(targets)


def _schedule_names(text: str) -> list[str]:
    """The names of a ``--schedules`` list; ``all``: every schedule that trains."""
    from ppsim.plan.schedules import FILE_PREFIX, NAMES, describe

    if text.strip() == "all":
        return [n for n in NAMES if describe(n).training]
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES and not n.startswith(FILE_PREFIX)]
    if not names or unknown or len(set(names)) != len(names):
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "empty or repeated names"
        raise usage_error(f"{what}; choose from {', '.join(NAMES)}", "--schedules")
    return names


@app.command("compare-schedules")
@plan_options("stages", "microbatches", "chunks", *PARALLEL_OPTIONS)
def compare_schedules(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    schedules_list: str = typer.Option("gpipe,1f1b,interleaved-1f1b,zb-h1", "--schedules",
                                       help="Comma-separated schedule names (see `ppsim schedules`), or all."),
    html: Path | None = html_option("the timelines and bar charts"),
    png: Path | None = png_option(),
    force: bool = force_option(),
    profile: Path | None = profile_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Predict SCENARIO under several schedules: a table, and their timelines on one time axis."""
    from ppsim.search.sweep import schedule_variants

    names = _schedule_names(schedules_list)
    with bad_input_exits():
        targets = output_targets({"--html": html, "--png": png}, [scenario] + ([profile] if profile else []), force)
        s = scenario_with(scenario, plan)
        variants = schedule_variants(s, names, load_profile_option(profile))
        if not any(v.ok for v in variants):
            raise PpsimError("no schedule can run this scenario: " + "; ".join(f"{v.label}: {v.error}" for v in variants))
        from ppsim.views.render.schedules_html import schedules_figure

        write_pages(targets, lambda: schedules_figure(variants, s.name or "scenario"))
    _print_variants(variants, ["schedule"], f"{s.name}: {s.pipeline.stages} stages, {s.microbatches} micro-batches",
                    targets)


@app.command()
@plan_options("schedule", "chunks", "partition", "comm", *PARALLEL_OPTIONS)
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    microbatches: str | None = typer.Option(None, "--microbatches", help="Micro-batch counts to try, e.g. 4,8,16,32."),
    stages: str | None = typer.Option(None, "--stages", help="Stage counts to try, e.g. 2,4,8."),
    skew: str | None = typer.Option(None, "--skew", help="Routing skews of a mixture of experts to try (model.moe.skew: "
                                                         "the busiest expert rank's tokens over the mean), e.g. "
                                                         "1,1.25,1.5,2."),
    fixed: str = typer.Option("gpus", "--fixed", help="What holds: gpus (the GPU count and global batch: more stages "
                                                      "mean fewer replicas, more micro-batches smaller ones) or "
                                                      "replica (d and the micro-batch size: more stages use more GPUs, "
                                                      "more micro-batches make a bigger global batch)."),
    json_out: bool = typer.Option(False, "--json", help="Print the sweep as one JSON document."),
    html: Path | None = html_option("throughput and bubble against the swept value"),
    png: Path | None = png_option(),
    force: bool = force_option(),
    profile: Path | None = profile_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Predict SCENARIO over micro-batch counts, stage counts and/or a mixture of experts' routing skews:
    throughput and bubble for each (the first of them given on the x axis, the second as lines)."""
    from ppsim.search.sweep import FIXED, grid_variants, variant_doc

    if fixed not in FIXED:
        raise usage_error(f"{fixed!r}; choose {' or '.join(FIXED)}", "--fixed")
    mb_values = int_list(microbatches, "--microbatches")
    stage_values = int_list(stages, "--stages")
    skew_values = float_list(skew, "--skew", least=1.0)
    axes = [k for k, v in (("microbatches", mb_values), ("skew", skew_values), ("stages", stage_values)) if v]
    if not axes:
        raise usage_error("give the values to sweep, e.g. --microbatches 4,8,16,32, --stages 2,4,8 or --skew 1,1.5,2",
                          "--microbatches / --stages / --skew")
    if len(axes) > 2:
        raise usage_error("sweep at most two of them at once (one on the x axis, one as lines)",
                          "--microbatches / --stages / --skew")
    x_key, line_key = axes[0], axes[1] if len(axes) > 1 else None
    with bad_input_exits():
        targets = output_targets({"--html": html, "--png": png}, [scenario] + ([profile] if profile else []), force)
        s = scenario_with(scenario, plan)
        from ppsim.cli.progress import progress_bar

        measured, points = load_profile_option(profile), [(p, m, k) for p in stage_values or (None,)
                                                          for m in mb_values or (None,) for k in skew_values or (None,)]
        variants = []
        with progress_bar("sweeping", len(points)) as bar:  # one prediction per point, on stderr
            for p, m, k in points:
                bar.say(f"stages {p or s.pipeline.stages}, micro-batches {m or s.microbatches}"
                        + (f", skew {k:g}" if k else ""))
                variants += grid_variants(s, [p] if p else None, [m] if m else None, measured, fixed,
                                          [k] if k else None)
                bar.advance()
        if not any(v.ok for v in variants):
            raise PpsimError("no point of the sweep can run: " + "; ".join(f"{v.label}: {v.error}" for v in variants))
        from ppsim.views.render.sweep_html import sweep_figure

        write_pages(targets, lambda: sweep_figure(variants, x_key, line_key, s.name or "scenario"))
    gpus, batch = s.devices, s.global_batch
    held = (f"{gpus} GPUs and a global batch of {batch} held" if fixed == "gpus" else
            f"one replica held: data parallel {s.data_parallel}, micro-batch size {s.training.micro_batch}")
    if json_out:
        doc = {"scenario": s.name, "schedule": s.pipeline.schedule, "fixed": fixed, "gpus": gpus, "global_batch": batch,
               "points": [variant_doc(v) for v in variants]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    _print_variants(variants, ["stages", "microbatches", "d", "b", "GPUs", "global batch"] + (["skew"] if skew_values else []),
                    f"{s.name}: {s.pipeline.schedule}, {held}", {})
    over = [v for v in variants if v.summary is not None and v.summary.fits is False]
    if over:
        first = over[0].summary
        assert first is not None  # over holds variants with a summary
        capacity = (first.memory_capacity_bytes or 0) / 2**30
        say("note", f"does not fit in {capacity:,.0f} GiB per device (its fullest rank): "
                    + "; ".join(f"{v.label} ({(v.peak_memory_bytes() or 0) / 2**30:,.1f} GiB)" for v in over))
    report_written(targets)


@app.command()
def tune(
    scenario: Path = typer.Argument(..., help="Scenario YAML: model, global batch, device and cluster."),
    gpus: int | None = typer.Option(None, "--gpus", min=1, help="Devices to plan for (default: the scenario's t x p x d)."),
    top: int = typer.Option(10, "--top", min=1, help="How many plans to list."),
    json_out: bool = typer.Option(False, "--json", help="Print the search as one JSON document."),
    html: Path | None = html_option("throughput vs stages / micro-batches and the throughput-memory Pareto front"),
    png: Path | None = png_option(),
    force: bool = force_option(),
    jobs: int | None = typer.Option(None, "--jobs", min=1, help="Local processes (default: every core)."),
    executor: ExecutorName = typer.Option("local", "--executor", help="Where the plans are evaluated."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster to use (default: start one here)."),
    schedules_list: str | None = typer.Option(None, "--schedules", help="Comma-separated schedules to consider "
                                                                          "(default: every schedule that trains but "
                                                                          "auto; all: auto too)."),
    micro_batches: str | None = typer.Option(None, "--micro-batch-sizes", help="Micro-batch sizes to consider "
                                                                              "(default: 1,2,4,8)."),
    max_stages: int | None = typer.Option(None, "--max-stages", min=1, help="Consider at most this many stages."),
    cp_sizes: str | None = typer.Option(None, "--context-parallel-sizes", help="Context parallel sizes to consider, "
                                                                              "each sequence split over that many "
                                                                              "devices (default: the scenario's)."),
    write: Path | None = typer.Option(None, "--write", help="Write the best plan as a scenario file, ready for "
                                                            "`ppsim run`, `ppsim tui` and `ppexec run`."),
    write_top: tuple[int, Path] | None = typer.Option(None, "--write-top", metavar="N DIR",
                                                      help="Write the best N plans as DIR/SCENARIO-tuned-K.yaml."),
    write_for: str | None = typer.Option(None, "--write-for", help="With --write: the best plan this framework "
                                                                   "(megatron, torchtitan, deepspeed) runs as "
                                                                   "predicted, and its files beside the scenario."),
    exhaustive: bool = typer.Option(False, "--exhaustive", help="Simulate every plan that fits, not only those "
                                                                "whose step-time bound leaves them a chance to be "
                                                                "reported (the same report, slower)."),
) -> None:
    """Search the plans of SCENARIO's model and batch on N devices; rank those that fit by throughput."""
    from ppsim.cli.progress import progress_bar
    from ppsim.cli.tune_write import plan_files, write_plans
    from ppsim.frameworks import FRAMEWORKS, SUFFIXES
    from ppsim.plan.schedules import NAMES, describe
    from ppsim.search.tune import space
    from ppsim.search.tune.report import figure, print_result
    from ppsim.search.tune.run import TuneRequest, search_plans

    names = tuple(_schedule_names(schedules_list)) if schedules_list else space.SCHEDULES
    forward_only = [n for n in names if not describe(n).training]
    if forward_only:
        raise usage_error(f"{', '.join(map(repr, forward_only))} does not train; choose training schedules from "
                          f"{', '.join(n for n in NAMES if describe(n).training)}", "--schedules")
    sizes = tuple(int_list(micro_batches, "--micro-batch-sizes") or space.MICRO_BATCHES)
    cps = int_list(cp_sizes, "--context-parallel-sizes")
    if write_for is not None and (write is None or write_for not in FRAMEWORKS):
        raise usage_error(f"names the framework whose files go beside --write FILE: give --write and one of "
                          f"{', '.join(FRAMEWORKS)}", "--write-for")
    with bad_input_exits():
        targets = output_targets({"--html": html, "--png": png}, [scenario], force)
        plan_targets = plan_files(write, write_top, scenario, force)
        if write is not None and write_for is not None:
            from ppsim.cli.export_files import export_targets

            framework_paths = export_targets(write.parent, write.stem, list(SUFFIXES[write_for]), [scenario], force)
        s = scenario_with(scenario)
        request = TuneRequest(gpus=gpus if gpus is not None else s.devices,
                              micro_batches=sizes, schedules=names, max_stages=max_stages,
                              context_parallel=tuple(cps) if cps else None,
                              exact=max(top, len(plan_targets)), drawn=bool(html or png), exhaustive=exhaustive,
                              front=bool(html or png or json_out),
                              executor=executor, jobs=jobs, ray_address=ray_address)
        with progress_bar("searching", total=0) as bar:  # each plan is bounded, then simulated or skipped
            result = search_plans(s, request, on_start=bar.total, on_advance=bar.advance)
        write_pages(targets, lambda: figure(result))
        command = shlex.join(["ppsim", "tune", str(scenario)] + [
            x for opt, value in (("--gpus", gpus), ("--schedules", schedules_list), ("--micro-batch-sizes", micro_batches),
                                 ("--max-stages", max_stages), ("--context-parallel-sizes", cp_sizes))
            if value is not None for x in (opt, str(value))])
        if write is not None and write_for is not None:
            from ppsim.cli.export_files import write_export
            from ppsim.cli.tune_write import best_for

            k, exported, lines = best_for(result, s, write_for, write.stem, command, write.parent)
            plan_targets = [(p, k if p == write else rank) for p, rank in plan_targets if k or p != write]
            written = write_plans(result, s, plan_targets, command) + lines
            if exported is not None:
                write_export(exported, {sfx: framework_paths[sfx] for sfx in exported.files})
                written += [f"wrote {framework_paths[sfx]} (plan {k}, for {write_for})" for sfx in exported.files]
                written += exported.usage
        else:
            written = write_plans(result, s, plan_targets, command)
    if json_out:
        sys.stdout.write(json.dumps(result.to_json_dict(top), indent=2) + "\n")
    else:
        from ppsim.views.render.console import stdout_console

        print_result(result, top, stdout_console(highlight=False))
        report_written(targets)
    for line in written:
        err.print(line, soft_wrap=True)


@app.command()
@plan_options()
def export(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    to: str = typer.Option(..., "--to", help="The framework: megatron, torchtitan or deepspeed."),
    out: Path = typer.Option(Path("."), "--out", help="Folder to write the files in, made if missing (default: "
                                                      "here); - prints them instead."),
    force: bool = force_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Write what a framework needs to run SCENARIO's plan: Megatron-LM's arguments, torchtitan's TOML
    and schedule CSV, or DeepSpeed's config and pipeline parts; or say in one line a reason it cannot."""
    from ppsim.cli.export_files import export_targets, write_export
    from ppsim.frameworks import FRAMEWORKS
    from ppsim.frameworks import export as export_plan

    if to not in FRAMEWORKS:
        raise usage_error(f"{to!r} is not a framework ppsim exports to; choose {', '.join(FRAMEWORKS)}", "--to")
    with bad_input_exits():
        s = scenario_with(scenario, plan)
        stem = scenario.stem
        given = [x for opt, value in plan.given().items() for x in (f"--{opt.replace('_', '-')}", str(value))]
        command = shlex.join(["ppsim", "export", str(scenario), "--to", to] + given)
        printed = str(out) == "-"
        result = export_plan(s, to, stem, command, Path(".") if printed else out)
        paths = {} if printed else export_targets(out, stem, list(result.files), [scenario], force)
        write_export(result, paths)
    say("layers", result.check)
    for note in result.notes:
        say("note", note)
    if printed:
        for sfx, text in result.files.items():
            typer.echo(f"==> {stem}{sfx} <==\n{text}", nl=False)
        return
    for path in paths.values():
        err.print(f"wrote {path}")
    for line in result.usage:
        typer.echo(line)


@app.command("import")
def import_(
    files: list[Path] = typer.Argument(..., help="Megatron-LM arguments (a command line or file), a torchtitan TOML, "
                                                 "or a DeepSpeed config JSON (and its pipeline parts JSON)."),
    base: Path | None = typer.Option(None, "--base", help="Scenario giving what the files do not: the device and "
                                                          "cluster, and the model for torchtitan and DeepSpeed."),
    gpus: int | None = typer.Option(None, "--gpus", min=1, help="GPUs of the job (Megatron's data parallelism is "
                                                                "the GPUs over t x p x cp); default: the base's."),
    write: Path | None = typer.Option(None, "--write", help="Write the scenario here (default: print it)."),
    force: bool = force_option(),
) -> None:
    """Read a framework's configuration into a ppsim scenario, for `ppsim run` to predict."""
    from ppsim import outputs
    from ppsim.costs import build_workload
    from ppsim.formats import IMPORTED_SCENARIO_MARKER
    from ppsim.frameworks.importing import import_scenario, scenario_yaml
    from ppsim.inputs.scenario import load, parse_scenario

    with bad_input_exits():
        targets = output_targets({"--write": write}, [*files, *([base] if base else [])], force)
        base_data = load(base).model_dump(exclude_none=True) if base else {}
        data, framework, notes = import_scenario(files, base_data, gpus)
        if base is None:
            notes.append("no --base: the device is ppsim's default; give --base SCENARIO for yours and its cluster")
        data.pop("deepspeed", None)
        imported = parse_scenario(data, source=f"the scenario imported from {files[0].name}")
        build_workload(imported)  # checked before it is written: the device's rules too, as ppsim run checks them
        command = shlex.join(["ppsim", "import", *map(str, files)] + [
            x for opt, value in (("--base", base), ("--gpus", gpus)) if value is not None for x in (opt, str(value))])
        text = f"{IMPORTED_SCENARIO_MARKER} from {framework}'s configuration: {command}\n" + scenario_yaml(data)
        if "--write" in targets:
            outputs.write_text(targets["--write"], text)
    for note in notes:
        say("note", note)
    if "--write" not in targets:
        typer.echo(text, nl=False)
        return
    report_written(targets)
    typer.echo(f"ppsim run {shlex.quote(str(targets['--write']))}  # predicts it")


@app.command()
@plan_options()
def tui(
    files: list[Path] = typer.Argument(..., help="A scenario YAML, or one or two saved traces to see side by side: "
                                                 "Trace or Chrome JSON, ppexec run folders, torch profiler traces "
                                                 "(a folder, or one Kineto JSON per rank in a row)."),
    ds_config: Path | None = typer.Option(None, "--ds-config", help="DeepSpeed config JSON (with a scenario)."),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Look at a step in the terminal and change the plan with keys (? lists them)."""
    scenario_like = [f for f in files if f.suffix in (".yaml", ".yml")]
    if scenario_like and len(files) > 1:
        raise usage_error("give one scenario, or one or two traces; not a scenario and more files", "FILES")
    if not scenario_like and (plan.given() or ds_config is not None):
        raise usage_error("plan options (--schedule, --stages, ...) need a scenario, not a saved trace", "--schedule")
    with bad_input_exits():
        from ppsim.views.tui.state import TuiState

        if scenario_like:
            from ppsim.prediction import predict

            state = TuiState.from_scenario(scenario_with(files[0], plan, ds_config), lambda s: predict(s).trace)
        else:
            from ppsim.trace.load import load_traces

            traces = load_traces(files)
            if len(traces) > 2:
                raise usage_error(f"at most two traces side by side, got {len(traces)}", "FILES")
            state = TuiState.from_traces(traces)
    from ppsim.views.tui.app import PpsimTui

    PpsimTui(state).run()
