"""The ``ppsim`` command: a thin layer that parses, calls the library, prints, and sets the exit code.

Exit codes: 0 success, 1 bad input (scenario, plan, trace, output path), 2 bad usage (options).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.text import Text

from ppsim.errors import PpsimError

app = typer.Typer(
    name="ppsim",
    help="Predict and picture pipeline-parallel training: step time, bubbles, throughput, MFU, memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# No markup on stderr: messages carry user text (paths, `ppsim[tui]`) that Rich would read as tags.
err = Console(stderr=True, highlight=False, markup=False)

SCHEDULE = typer.Option(None, "--schedule", help="Schedule name (see `ppsim schedules`).")
STAGES = typer.Option(None, "--stages", min=1, help="Pipeline stages (ranks) p.")
MICROBATCHES = typer.Option(None, "--microbatches", min=1, help="Micro-batches per step m.")
CHUNKS = typer.Option(None, "--chunks", min=1, help="Virtual stages per rank v.")
PARTITION = typer.Option(None, "--partition", help="uniform | balanced")
COMM = typer.Option(None, "--comm", help="Send semantics: rendezvous | eager | async")


def say(label: str, message: str) -> None:
    """Print ``label: message`` on stderr, the label styled (error in red, note in yellow), the message verbatim."""
    style = "bold red" if label == "error" else "yellow"
    err.print(Text.assemble((f"{label}:", style), " ", message), soft_wrap=True)


def fail(exc: PpsimError) -> None:
    """Print a user-facing error (and its picture, if any) on stderr and exit 1."""
    say("error", str(exc))
    if exc.detail:
        err.print(exc.detail, soft_wrap=True)
    raise typer.Exit(1)


def check_partition_option(partition: str | None) -> None:
    """The --partition option takes uniform or balanced (explicit counts go in the scenario)."""
    if partition is not None and partition not in ("uniform", "balanced"):
        raise PpsimError(f"--partition must be uniform or balanced, got {partition!r}", field="--partition")


def _scenario(path: Path, schedule: str | None, stages: int | None, microbatches: int | None,
              chunks: int | None, partition: str | None, comm: str | None,
              ds_config: Path | None = None):  # noqa: ANN202
    from ppsim.scenario import load_with_notes

    check_partition_option(partition)
    if comm is not None and comm not in ("rendezvous", "eager", "async"):
        raise PpsimError(f"--comm must be rendezvous, eager or async, got {comm!r}", field="--comm")
    s, notes = load_with_notes(path, ds_config)
    for note in notes:
        say("note", note)
    return s.with_overrides(
        schedule=schedule, stages=stages, microbatches=microbatches, chunks=chunks, partition=partition, comm=comm
    )


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as one JSON document."),
    trace: Path | None = typer.Option(None, "--trace", help="Write a Chrome trace (Perfetto, chrome://tracing)."),
    html: Path | None = typer.Option(None, "--html", help="Write a self-contained Plotly timeline (HTML)."),
    png: Path | None = typer.Option(None, "--png", help="Write the timeline as a PNG (needs Chrome or Chromium)."),
    save_trace: Path | None = typer.Option(None, "--save-trace", help="Write ppsim's own Trace JSON."),
    force: bool = typer.Option(False, "--force", help="Overwrite output files not written by ppsim."),
    profile: Path | None = typer.Option(None, "--profile", help="Measured costs from `ppexec profile` (YAML)."),
    ds_config: Path | None = typer.Option(None, "--ds-config",
                                          help="DeepSpeed config JSON: batch sizes, precision, ZeRO, checkpointing."),
    schedule: str | None = SCHEDULE,
    stages: int | None = STAGES,
    microbatches: int | None = MICROBATCHES,
    chunks: int | None = CHUNKS,
    partition: str | None = PARTITION,
    comm: str | None = COMM,
) -> None:
    """Simulate one training step of SCENARIO and print step time, throughput, MFU and bubbles."""
    from ppsim import outputs
    from ppsim.metrics import summarize
    from ppsim.predict import predict

    try:
        outs = {
            "--trace": trace,
            "--html": html,
            "--png": png,
            "--save-trace": save_trace,
        }
        inputs = [scenario] + ([profile] if profile else []) + ([ds_config] if ds_config else [])
        targets = {opt: outputs.check_output(p, opt, inputs, force) for opt, p in outs.items() if p is not None}
        if len({t.resolve() for t in targets.values()}) < len(targets):
            raise PpsimError("two outputs name the same file; give each its own name")
        if "--png" in targets:
            from ppsim.render.png import check_png

            check_png()
        s = _scenario(scenario, schedule, stages, microbatches, chunks, partition, comm, ds_config)
        measured = None
        if profile is not None:
            from ppsim.profile import load_profile

            measured = load_profile(profile)
        prediction = predict(s, measured)
        summary = summarize(prediction.trace)
        if "--save-trace" in targets:
            tr = prediction.trace
            outputs.atomic_write(targets["--save-trace"], tr.save)
        if "--trace" in targets:
            from ppsim.export.chrome import to_chrome_trace

            doc = to_chrome_trace(prediction.trace)
            outputs.write_text(targets["--trace"], json.dumps(doc, separators=(",", ":")))
        if "--html" in targets:
            from ppsim.render.gantt import write_html

            outputs.atomic_write(targets["--html"], lambda p: write_html(prediction.trace, p))
        if "--png" in targets:
            from ppsim.render.gantt import gantt_figure
            from ppsim.render.png import write_png

            outputs.atomic_write(targets["--png"], lambda p: write_png(gantt_figure(prediction.trace), p))
    except PpsimError as exc:
        fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(summary.to_json_dict(), indent=2) + "\n")
    else:
        from ppsim.render.table import print_summary

        print_summary(summary)
        for opt, path in targets.items():
            err.print(f"wrote {path} ({opt[2:]})", highlight=False)


@app.command()
def schedules() -> None:
    """List the schedules, one line each."""
    from ppsim.schedules import SCHEDULES

    width = max(len(n) for n in SCHEDULES)
    for name, info in SCHEDULES.items():
        typer.echo(f"{name:<{width}}  {info.summary}")


@app.command()
def plan(
    file: Path = typer.Argument(..., help="Scenario YAML, or a plan JSON written by --save."),
    comms: bool = typer.Option(False, "--comms", help="Show the lowered plan (sends, receives, end of step)."),
    save: Path | None = typer.Option(None, "--save", help="Write the plan as JSON."),
    csv_out: bool = typer.Option(False, "--csv", help="Print the plan as CSV (one row per rank, torch's layout)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an output file not written by ppsim."),
    schedule: str | None = SCHEDULE,
    stages: int | None = STAGES,
    microbatches: int | None = MICROBATCHES,
    chunks: int | None = CHUNKS,
) -> None:
    """Print the plan of FILE as the step x rank grid of action texts."""
    from ppsim import outputs
    from ppsim.passes import aligned_grid, validate
    from ppsim.plan import Plan

    try:
        if file.suffix == ".json":
            if not file.is_file():
                raise PpsimError(f"plan file {str(file)!r} does not exist; check the path")
            try:
                the_plan = Plan.from_json(file.read_text())
            except (ValueError, KeyError) as exc:
                raise PpsimError(f"{file}: not a valid plan: {exc}") from None
            validate(the_plan)
        else:
            from ppsim.predict import compute_plan, lowered_plan

            s = _scenario(file, schedule, stages, microbatches, chunks, None, None)
            the_plan = lowered_plan(s) if comms else compute_plan(s)
        target = outputs.check_output(save, "--save", [file], force) if save else None
        if target:
            outputs.write_text(target, json.dumps(the_plan.to_dict(), indent=1))
    except PpsimError as exc:
        fail(exc)
        return
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
    measured: Path = typer.Argument(..., help="Measured Trace JSON, or a `ppexec run` folder (its trace.json)."),
    html: Path | None = typer.Option(None, "--html", help="Write both timelines on one time axis (HTML)."),
    png: Path | None = typer.Option(None, "--png", help="Write the same picture as a PNG (needs Chrome or Chromium)."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as one JSON document."),
    top: int = typer.Option(10, "--top", min=0, help="How many of the largest disagreements to list."),
    force: bool = typer.Option(False, "--force", help="Overwrite an output file not written by ppsim."),
) -> None:
    """Compare a predicted trace with a measured one: step time, bubbles per stage, errors per action."""
    from ppsim import outputs
    from ppsim.compare import compare_traces, load_trace

    try:
        inputs = [f / "trace.json" if f.is_dir() else f for f in (predicted, measured)]
        target = outputs.check_output(html, "--html", inputs, force) if html else None
        png_target = _page_targets(None, png, inputs, force).get("--png")
        pred, meas = load_trace(predicted, "predicted"), load_trace(measured, "measured")
        result = compare_traces(pred, meas, top)
        if target:
            from ppsim.render.compare_html import write_compare_html

            outputs.atomic_write(target, lambda p: write_compare_html(pred, meas, result, p))
        if png_target:
            from ppsim.render.compare_html import compare_figure
            from ppsim.render.png import write_png

            outputs.atomic_write(png_target, lambda p: write_png(compare_figure(pred, meas, result), p))
    except PpsimError as exc:
        fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(result.to_json_dict(), indent=2) + "\n")
    else:
        from ppsim.compare import print_comparison

        print_comparison(result)
        for written, kind in ((target, "html"), (png_target, "png")):
            if written:
                err.print(f"wrote {written} ({kind})", highlight=False)


# ----- several predictions side by side: compare-schedules, sweep -----------------------------
def _page_targets(html: Path | None, png: Path | None, inputs: list[Path], force: bool) -> dict[str, Path]:
    """Checked --html / --png targets (and kaleido's browser for --png), before any work is done."""
    from ppsim import outputs

    targets = {opt: outputs.check_output(p, opt, inputs, force) for opt, p in (("--html", html), ("--png", png)) if p}
    if len({t.resolve() for t in targets.values()}) < len(targets):
        raise PpsimError("--html and --png name the same file; give each its own name")
    if "--png" in targets:
        from ppsim.render.png import check_png

        check_png()
    return targets


def _write_pages(targets: dict[str, Path], figure) -> None:  # noqa: ANN001
    """Write the figure ``figure()`` builds to the --html / --png targets."""
    from ppsim import outputs

    if not targets:
        return
    fig = figure()
    if "--html" in targets:
        from ppsim.render.gantt import write_figure

        outputs.atomic_write(targets["--html"], lambda p: write_figure(fig, p))
    if "--png" in targets:
        from ppsim.render.png import write_png

        outputs.atomic_write(targets["--png"], lambda p: write_png(fig, p))


def _int_list(text: str | None, option: str) -> list[int] | None:
    from ppsim.sweep import parse_int_list

    if text is None:
        return None
    try:
        return parse_int_list(text, option)
    except PpsimError as exc:
        raise typer.BadParameter(str(exc).split(": ", 1)[1], param_hint=option) from None


def _print_variants(variants, keys: list[str], title: str, targets: dict[str, Path]) -> None:  # noqa: ANN001
    from ppsim.render.variants_table import variants_table

    for v in variants:
        for note in v.notes:
            say("note", note)
        if not v.ok:
            say("error", f"{v.label} cannot run the scenario: {v.error}")
    Console(highlight=False, width=None if sys.stdout.isatty() else 140).print(variants_table(variants, keys, title))
    for opt, path in targets.items():
        err.print(f"wrote {path} ({opt[2:]})", highlight=False)


@app.command("compare-schedules")
def compare_schedules(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    schedules_list: str = typer.Option("gpipe,1f1b,interleaved-1f1b,zb-h1", "--schedules",
                                       help="Comma-separated schedule names (see `ppsim schedules`)."),
    html: Path | None = typer.Option(None, "--html", help="Write the timelines and bar charts (HTML)."),
    png: Path | None = typer.Option(None, "--png", help="Write the same page as a PNG (needs Chrome or Chromium)."),
    force: bool = typer.Option(False, "--force", help="Overwrite output files not written by ppsim."),
    profile: Path | None = typer.Option(None, "--profile", help="Measured costs from `ppexec profile` (YAML)."),
    stages: int | None = STAGES,
    microbatches: int | None = MICROBATCHES,
    chunks: int | None = CHUNKS,
) -> None:
    """Predict SCENARIO under several schedules: a table, and their timelines on one time axis."""
    from ppsim.schedules import SCHEDULES
    from ppsim.sweep import schedule_variants

    names = [n.strip() for n in schedules_list.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCHEDULES]
    if not names or unknown or len(set(names)) != len(names):
        what = f"unknown {', '.join(map(repr, unknown))}" if unknown else "empty or repeated names"
        raise typer.BadParameter(f"{what}; choose from {', '.join(SCHEDULES)}", param_hint="--schedules")
    try:
        targets = _page_targets(html, png, [scenario] + ([profile] if profile else []), force)
        s = _scenario(scenario, None, stages, microbatches, chunks, None, None)
        measured = None
        if profile is not None:
            from ppsim.profile import load_profile

            measured = load_profile(profile)
        variants = schedule_variants(s, names, measured)
        if not any(v.ok for v in variants):
            raise PpsimError("no schedule can run this scenario: " + "; ".join(f"{v.label}: {v.error}" for v in variants))
        from ppsim.render.schedules_html import schedules_figure

        _write_pages(targets, lambda: schedules_figure(variants, s.name))
    except PpsimError as exc:
        fail(exc)
        return
    _print_variants(variants, ["schedule"], f"{s.name}: {s.pipeline.stages} stages, {s.microbatches} micro-batches",
                    targets)


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML file."),
    microbatches: str | None = typer.Option(None, "--microbatches", help="Micro-batch counts to try, e.g. 4,8,16,32."),
    stages: str | None = typer.Option(None, "--stages", help="Stage counts to try, e.g. 2,4,8."),
    schedule: str | None = SCHEDULE,
    html: Path | None = typer.Option(None, "--html", help="Write throughput and bubble against the swept value (HTML)."),
    png: Path | None = typer.Option(None, "--png", help="Write the same plot as a PNG (needs Chrome or Chromium)."),
    force: bool = typer.Option(False, "--force", help="Overwrite output files not written by ppsim."),
    profile: Path | None = typer.Option(None, "--profile", help="Measured costs from `ppexec profile` (YAML)."),
) -> None:
    """Predict SCENARIO over micro-batch counts and/or stage counts: throughput and bubble for each."""
    from ppsim.sweep import grid_variants

    mb_values = _int_list(microbatches, "--microbatches")
    stage_values = _int_list(stages, "--stages")
    if mb_values is None and stage_values is None:
        raise typer.BadParameter("give the values to sweep, e.g. --microbatches 4,8,16,32 and/or --stages 2,4,8",
                                 param_hint="--microbatches / --stages")
    x_key, line_key = ("microbatches", "stages" if stage_values else None) if mb_values else ("stages", None)
    try:
        targets = _page_targets(html, png, [scenario] + ([profile] if profile else []), force)
        s = _scenario(scenario, schedule, None, None, None, None, None)
        measured = None
        if profile is not None:
            from ppsim.profile import load_profile

            measured = load_profile(profile)
        variants = grid_variants(s, stage_values, mb_values, measured)
        if not any(v.ok for v in variants):
            raise PpsimError("no point of the sweep can run: " + "; ".join(f"{v.label}: {v.error}" for v in variants))
        from ppsim.render.sweep_html import sweep_figure

        _write_pages(targets, lambda: sweep_figure(variants, x_key, line_key, s.name))
    except PpsimError as exc:
        fail(exc)
        return
    keys = [k for k in ("stages", "microbatches") if k in (x_key, line_key)]
    _print_variants(variants, keys, f"{s.name}: {s.pipeline.schedule}", targets)


@app.command()
def tune(
    scenario: Path = typer.Argument(..., help="Scenario YAML: model, global batch, device and cluster."),
    gpus: int | None = typer.Option(None, "--gpus", help="Devices to plan for (default: the scenario's t x p x d)."),
    top: int = typer.Option(10, "--top", min=1, help="How many plans to list."),
    json_out: bool = typer.Option(False, "--json", help="Print the search as one JSON document."),
    html: Path | None = typer.Option(None, "--html", help="Write throughput vs stages / micro-batches and the "
                                                          "throughput-memory Pareto front (HTML)."),
    png: Path | None = typer.Option(None, "--png", help="Write the same page as a PNG (needs Chrome or Chromium)."),
    force: bool = typer.Option(False, "--force", help="Overwrite output files not written by ppsim."),
    jobs: int | None = typer.Option(None, "--jobs", min=1, help="Local processes (default: every core)."),
    executor: str = typer.Option("local", "--executor", help="local | ray"),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster to use (default: start one here)."),
    schedules_list: str | None = typer.Option(None, "--schedules", help="Comma-separated schedules to consider "
                                                                          "(default: 1f1b,interleaved-1f1b,zb-h1,gpipe)."),
    micro_batches: str | None = typer.Option(None, "--micro-batch-sizes", help="Micro-batch sizes to consider "
                                                                              "(default: 1,2,4,8)."),
    max_stages: int | None = typer.Option(None, "--max-stages", min=1, help="Consider at most this many stages."),
) -> None:
    """Search the plans of SCENARIO's model and batch on N devices; rank those that fit by throughput."""
    import time

    from ppsim.schedules import SCHEDULES
    from ppsim.tune import executors, space
    from ppsim.tune.report import TuneResult, figure, print_result

    if executor not in executors.EXECUTORS:
        raise typer.BadParameter(f"{executor!r}; choose {' or '.join(executors.EXECUTORS)}", param_hint="--executor")
    names = tuple(n.strip() for n in (schedules_list or ",".join(space.SCHEDULES)).split(",") if n.strip())
    unknown = [n for n in names if n not in SCHEDULES or not SCHEDULES[n].training]
    if not names or unknown:
        raise typer.BadParameter(f"{', '.join(map(repr, unknown)) or 'no schedule'}; choose training schedules from "
                                 f"{', '.join(n for n, i in SCHEDULES.items() if i.training)}", param_hint="--schedules")
    sizes = tuple(_int_list(micro_batches, "--micro-batch-sizes") or space.MICRO_BATCHES)
    try:
        targets = _page_targets(html, png, [scenario], force)
        s = _scenario(scenario, None, None, None, None, None, None)
        n = gpus if gpus is not None else s.pipeline.stages * s.data_parallel * s.tensor_parallel
        cands = space.candidates(s, space.SearchSpace(gpus=n, micro_batches=sizes, schedules=names,
                                                      max_stages=max_stages))
        base = s.model_dump(exclude_none=True)
        n_jobs = jobs or executors.default_jobs()
        t0 = time.perf_counter()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("searching"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("plans", total=len(cands))

            def advance(k: int) -> None:
                bar.advance(task, k)

            if executor == "ray":
                evals = executors.run_ray(base, cands, ray_address, advance)
            else:
                evals = executors.run_local(base, cands, n_jobs, advance)
        result = TuneResult(s.name, n, evals, time.perf_counter() - t0, 1 if executor == "ray" else n_jobs, executor)
        if not result.ranked:
            least = min((e for e in evals if e.peak_memory_bytes), key=lambda e: e.peak_memory_bytes or 0, default=None)
            hint = (f"; the least memory any plan needs is {(least.peak_memory_bytes or 0) / 2**30:,.1f} GiB "
                    f"({least.candidate.label()}) of {(least.memory_capacity_bytes or 0) / 2**30:,.0f} GiB" if least else "")
            raise PpsimError(f"none of the {len(evals)} plans fits in memory on {n} devices{hint}; use more devices or "
                             "a device with more memory", field="--gpus")
        _write_pages(targets, lambda: figure(result))
    except PpsimError as exc:
        fail(exc)
        return
    if json_out:
        sys.stdout.write(json.dumps(result.to_json_dict(top), indent=2) + "\n")
    else:
        print_result(result, top, Console(highlight=False, width=None if sys.stdout.isatty() else 160))
        for opt, path in targets.items():
            err.print(f"wrote {path} ({opt[2:]})", highlight=False)


@app.command()
def tui(
    files: list[Path] = typer.Argument(..., help="A scenario YAML, or one or two saved traces (Trace or Chrome JSON, "
                                                 "or ppexec run folders) to see side by side."),
    ds_config: Path | None = typer.Option(None, "--ds-config", help="DeepSpeed config JSON (with a scenario)."),
    schedule: str | None = SCHEDULE,
    stages: int | None = STAGES,
    microbatches: int | None = MICROBATCHES,
    chunks: int | None = CHUNKS,
    partition: str | None = PARTITION,
    comm: str | None = COMM,
) -> None:
    """Look at a step in the terminal and change the plan with keys (? lists them)."""
    try:
        from ppsim.tui.state import TuiState, load_trace_file

        scenario_like = [f for f in files if f.suffix in (".yaml", ".yml")]
        if scenario_like and len(files) > 1:
            raise PpsimError("give one scenario, or one or two traces; not a scenario and more files")
        if len(files) > 2:
            raise PpsimError(f"at most two traces side by side, got {len(files)}")
        if scenario_like:
            s = _scenario(files[0], schedule, stages, microbatches, chunks, partition, comm, ds_config)
            state = TuiState.from_scenario(s)
        else:
            if any(v is not None for v in (schedule, stages, microbatches, chunks, partition, comm, ds_config)):
                raise PpsimError("plan options (--schedule, --stages, ...) need a scenario, not a saved trace")
            for f in files:
                if not f.exists():
                    raise PpsimError(f"{f} does not exist; give a scenario YAML, a trace JSON or a ppexec run folder")
            state = TuiState.from_traces([(f.name, load_trace_file(f)) for f in files])
    except PpsimError as exc:
        fail(exc)
        return
    try:
        from ppsim.tui.app import PpsimTui
    except ImportError as exc:
        say("error", f"the TUI needs textual ({exc}); install it with: pip install 'ppsim[tui]'")
        raise typer.Exit(1) from None
    PpsimTui(state).run()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
