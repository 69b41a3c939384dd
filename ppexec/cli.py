"""The ``ppexec`` command: run a scenario's plan for real (DeepSpeed or torch.distributed.pipelining) and record it.

Exit codes: 0 success, 1 bad input or a failed run, 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from ppexec.runtimes import RuntimeChoice, RuntimeName
from ppsim.api import (
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
from ppsim.errors import PpsimError, file_error

if TYPE_CHECKING:  # pragma: no cover
    from ppexec.results.collect import RunResult
    from ppexec.worker.events import RankState
    from ppsim.api import Profile, Scenario

#: the plan options of ppexec's commands (the send semantics are the runtime's)
RUN_PLAN_OPTIONS = ("schedule", "stages", "microbatches", "chunks", "partition", *PARALLEL_OPTIONS)
RUNTIME_HELP = ("What runs the plan: deepspeed (DeepSpeed's PipelineEngine), torch (torch.distributed.pipelining), "
                "or auto: DeepSpeed where it can run the plan, else torch.")


def runtime_option() -> RuntimeChoice:
    return typer.Option("auto", "--runtime", help=RUNTIME_HELP)


# ----- the run options every command that runs ranks takes: declared once, the default per command
def steps_option(default: int, help_text: str = "Training steps to record.") -> int:
    return typer.Option(default, "--steps", min=1, help=help_text)


def warmup_option(default: int) -> int:
    return typer.Option(default, "--warmup", min=0, help="Steps to run first and not record.")


def timeout_option(default: float) -> float:
    return typer.Option(default, "--timeout", min=1, help="Seconds a rank may wait on a peer before failing.")


def seed_option() -> int:
    return typer.Option(1234, "--seed", help="Seed of the weights and the synthetic data.")


def lr_option() -> float:
    return typer.Option(1e-3, "--lr", min=0, help="AdamW learning rate.")


def replace_option(what: str) -> bool:
    help_text = f"Replace an earlier {what} in --out (else such a folder is refused)."
    return typer.Option(False, "--force", help=help_text)


@contextmanager
def exits(out: Path | None = None, *, writing: bool = True) -> Iterator[None]:
    """Inside, bad input and a failed run print one line and exit 1; a signal that stopped the run
    exits 128 + its number (130 for Ctrl-C, also before the ranks start; 143 for SIGTERM) saying where
    the partial run is; a fault of
    the filesystem is one line naming the file."""
    from ppexec.launch.signals import Interrupted

    try:
        yield
    except Interrupted as exc:
        say("error", str(exc))
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        say("error", "interrupted (Ctrl-C)" + (f"; what was written so far is in {out}" if out is not None else ""))
        raise typer.Exit(130) from None
    except PpsimError as exc:
        fail(exc)
    except OSError as exc:
        fail(file_error(exc.filename if exc.filename is not None else "a file", exc, writing=writing))


app = typer.Typer(
    name="ppexec",
    help="Run a ppsim plan for real (DeepSpeed's pipeline engine or torch.distributed.pipelining) and record the "
         "measured timeline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(version: bool = version_option("ppexec")) -> None:
    """ppexec: run the same plan ppsim simulates, with DeepSpeed or torch, and record it."""


@app.command()
@plan_options(*RUN_PLAN_OPTIONS)
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Run folder: traces, summary, per-rank logs."),
    steps: int = steps_option(3),
    warmup: int = warmup_option(1),
    launcher: Literal["local", "deepspeed"] = typer.Option(
        "local", "--launcher", help="local (one process per rank here) or deepspeed."),
    hostfile: Path | None = typer.Option(None, "--hostfile", help="DeepSpeed hostfile (--launcher deepspeed)."),
    timeout: float = timeout_option(60.0),
    seed: int = seed_option(),
    lr: float = lr_option(),
    save_params: bool = typer.Option(False, "--save-params", help="Save every rank's weights at the end."),
    profile: Path | None = typer.Option(None, "--profile", help="Plan with measured costs (as `ppsim run --profile`)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    force: bool = replace_option("run"),
    runtime: RuntimeChoice = runtime_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Train SCENARIO's plan for --steps steps and write the measured trace into --out."""
    from ppexec.launch.folders import check_run_folder
    from ppexec.launch.prepare import RunOptions
    from ppexec.results.collect import execute, write_run_outputs

    if launcher == "deepspeed" and hostfile is None:
        raise usage_error("--launcher deepspeed needs --hostfile FILE", "--hostfile")
    with exits(out):
        if hostfile is not None and not hostfile.is_file():
            raise PpsimError(f"hostfile {hostfile} does not exist", field="--hostfile")
        check_run_folder(out, force)
        s = scenario_with(scenario, plan)
        opts = RunOptions(out=out, steps=steps, warmup=warmup, timeout_s=timeout, seed=seed, lr=lr,
                          save_params=save_params, backend="nccl" if launcher == "deepspeed" else "gloo",
                          runtime=runtime, force=force)
        progress = _Progress(steps, warmup)
        result = execute(s, opts, progress, hostfile=hostfile if launcher == "deepspeed" else None,
                         profile=load_profile_option(profile))
        write_run_outputs(result, out)
    _report(result, out, json_out)


@app.command("rank")
@plan_options(*RUN_PLAN_OPTIONS)
def rank_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    rank: str = typer.Option(..., "--rank", help="The pipeline rank to run alone, or all: each in turn."),
    steps: int = steps_option(3, "Timed steps (the first is not counted when there are more)."),
    waits: bool = typer.Option(True, "--waits/--no-waits", help="Feed each receive when the prediction says its "
                                                                "message arrives (default), or at once."),
    device: Literal["auto", "cpu", "cuda"] = typer.Option("auto", "--device", help="Where to run it (auto: a GPU "
                                                                                   "where there is one)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for each rank's measured and predicted traces "
                                                        "(for ppsim compare and ppsim tui)."),
    json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
    seed: int = seed_option(),
    force: bool = typer.Option(False, "--force", help="Overwrite trace files not written by ppsim."),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Run one rank of SCENARIO's plan alone at full size, its actions in plan order, and check its
    times and its memory (by the allocator) against ppsim's prediction of that rank."""
    from ppexec.rank.command import run_ranks

    with exits(None, writing=False):
        run_ranks(scenario_with(scenario, plan), scenario, rank, steps, waits, device, out, json_out, seed, force)


@app.command()
@plan_options(*RUN_PLAN_OPTIONS)
def prepare(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Run folder, on a filesystem every host sees."),
    steps: int = steps_option(3),
    warmup: int = warmup_option(1),
    backend: Literal["nccl", "gloo"] = typer.Option("nccl", "--backend", help="nccl (GPUs) or gloo (CPUs)."),
    timeout: float = timeout_option(300.0),
    seed: int = seed_option(),
    lr: float = lr_option(),
    force: bool = replace_option("run"),
    runtime: RuntimeChoice = runtime_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Write RUN_DIR/run.json for any launcher (torchrun, srun, deepspeed) to start
    `python -m ppexec.worker RUN_DIR` on every rank; then `ppexec collect RUN_DIR`."""
    from ppexec.launch.prepare import RunOptions, prepare_run

    with exits(out):
        s = scenario_with(scenario, plan)
        opts = RunOptions(out=out, steps=steps, warmup=warmup, timeout_s=timeout, seed=seed, lr=lr, backend=backend,
                          runtime=runtime, force=force)
        prepared, world = prepare_run(s, opts)
    typer.echo(f"wrote {out}/run.json ({prepared.runtime} runtime): start {world} ranks with "
               f"`python -m ppexec.worker {out}`")


@app.command()
def collect(
    out: Path = typer.Argument(..., help="A run folder whose ranks have finished."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Assemble the measured traces and summary of a run started by another launcher."""
    from ppexec.results.collect import collect as collect_run
    from ppexec.results.collect import write_run_outputs

    with exits(writing=False):
        result = collect_run(out)
    with exits():
        write_run_outputs(result, out)
    _report(result, out, json_out)


@app.command("profile")
def profile_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Profile file to write (YAML), for `ppsim run --profile`."),
    timeout: float = timeout_option(120.0),
    keep_run: Path | None = typer.Option(None, "--keep-run", help="Keep the profiling run's folder here."),
    force: bool = typer.Option(False, "--force", help="Overwrite an --out file ppsim did not write, and replace "
                                                      "earlier profiling runs in --keep-run."),
    runtime: RuntimeName = typer.Option(
        "deepspeed", "--runtime", help="Whose overheads to measure: the runtime the predictions are for."),
) -> None:
    """Measure SCENARIO's layer times, framework overheads and link on this machine (two ranks)."""
    from ppexec.launch.folders import check_runs_folder
    from ppexec.measure.profile import exchange_scenario, measure_profile, profiling_scenario
    from ppsim.api import write_output

    with exits(keep_run):
        target = output_targets({"--out": out}, [scenario], force)["--out"]
        if keep_run is not None:
            check_runs_folder(keep_run, force, "--keep-run")
        s = scenario_with(scenario)
        base = profiling_scenario(s)  # what stands in the way of profiling it, said before the work is announced
        experts = ", an expert-parallel run" if exchange_scenario(base) is not None else ""
        err.print(f"profiling on 2 ranks ({runtime} runtime): layer times, a short GPipe run{experts}, "
                  "message ping-pong ...")
        with profile_progress(s) as watch:
            measured = measure_profile(s, timeout_s=timeout, keep=keep_run, runtime=runtime, force=force,
                                       on_progress=watch)
        write_output(target, measured.to_yaml())
    _print_profile(measured)
    _warn_if_drifted(measured)
    err.print(f"wrote {target}: use it with `ppsim run {scenario} --profile {target}`")


def _warn_if_drifted(p: Profile) -> None:
    """Say so when the machine's speed changed between the profiling runs: what changed lands in
    the fitted block time and overheads."""
    from ppexec.measure.profile import DRIFT_WARNING, drift_between_runs

    drift = drift_between_runs(p)
    if drift is not None and drift > DRIFT_WARNING:
        load = p.machine.get("load_average") or []
        about = f" (1-minute load {load[0]} before, {load[-1]} after)" if len(load) == 2 and None not in load else ""
        say("warning", f"the machine's speed changed by {drift:.0%} between the profiling runs (a block timed alone, "
                       f"per run: {p.machine['profiling_block_alone_ms']} ms){about}; the fitted block time and "
                       "overheads absorb it: profile again on a quiet machine")


@app.command("validate")
@plan_options(*RUN_PLAN_OPTIONS)
def validate_cmd(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Folder: profile, prediction, run, comparison (JSON and HTML)."),
    profile: Path | None = typer.Option(None, "--profile", help="Use this profile instead of measuring one."),
    steps: int = steps_option(10, "Training steps to record (the median step is compared)."),
    warmup: int = warmup_option(2),
    timeout: float = timeout_option(120.0),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
    force: bool = replace_option("validation"),
    runtime: RuntimeChoice = runtime_option(),
    plan: PlanOverrides = PlanOverrides(),
) -> None:
    """Profile this machine, predict SCENARIO with the profile, run it for real and compare."""
    from ppexec.measure.profile import measure_profile
    from ppexec.results.prediction_check import PROFILE_FILE, check_validation_folder, comparison_doc, validate, write_outputs

    with exits(out):
        check_validation_folder(out, force)
        s = scenario_with(scenario, plan)
        measured = load_profile_option(profile)
        made = [p for p in (out, *out.parents) if not p.exists()]  # the folders this command makes
        out.mkdir(parents=True, exist_ok=True)
        from ppexec.launch.prepare import prepare

        try:
            chosen = prepare(s, measured, runtime).runtime
        except PpsimError:
            if made and not any(out.iterdir()):  # refused before anything was written: leave no folder
                for folder in made:
                    folder.rmdir()
            raise
        with validate_progress(s, measured is None, steps, warmup) as (watch_profile, watch_run):
            if measured is None:
                err.print(f"1/3 profiling this machine (2 ranks, {chosen} runtime) ...")
                measured = measure_profile(s, timeout_s=timeout, runtime=chosen, on_progress=watch_profile)
                (out / PROFILE_FILE).write_text(measured.to_yaml())
                _warn_if_drifted(measured)
            err.print(f"2/3 predicting and running {warmup} warm-up and {steps} recorded steps ({chosen} runtime) ...")
            result = validate(s, measured, out / "run", steps=steps, warmup=warmup, timeout_s=timeout, runtime=chosen,
                              force=force, on_progress=watch_run)
        err.print("3/3 comparing")
        write_outputs(result, out)
    c = result.comparison
    if json_out:
        sys.stdout.write(json.dumps(comparison_doc(result), indent=2) + "\n")
        return
    from rich.table import Table

    from ppsim.api import comparison_renderable, stdout_console

    shown = comparison_renderable(c)
    spread = result.profile_spread
    about = spread.describe() if spread else "unknown: the profile records no quartiles (measure it again)"
    head = shown.renderables[0]
    if isinstance(head, Table):  # the headline grid: under the step-time error
        head.add_row("profile spread", about)
        if result.run_routing is not None:
            head.add_row("with the run's routing", result.run_routing.describe())
    else:  # pragma: no cover - the headline is a grid
        err.print(f"profile spread {about}")
    stdout_console().print(shown)
    err.print("bubble error per rank, median over the recorded steps: "
              + ", ".join(f"rank {k} {x:+.2f} pp" for k, x in enumerate(result.bubble_error_pp)))
    err.print(f"wrote {out}/comparison.html, comparison.json, predicted.trace.json, run/")


@app.command("device")
def device_cmd(
    out: Path = typer.Option(..., "--out", help="Device file to write (YAML, the catalogue's format), for a "
                                                "scenario's hardware.device_file."),
    like: str = typer.Option(..., "--like", help="Catalogue device whose datasheet figures (peaks, memory, "
                                                 "efficiency) and links the entry keeps, e.g. h100-sxm."),
    name: str | None = typer.Option(None, "--name", help="The entry's name (default: LIKE-measured)."),
    dtype: Literal["bf16", "fp16"] = typer.Option("bf16", "--dtype", help="The dtype to time."),
    device: str = typer.Option("cuda", "--device", help="The torch device to measure (cuda, cuda:1, ...)."),
    samples: Path | None = typer.Option(None, "--samples", help="Also write every timed GEMM here (CSV)."),
    quick: bool = typer.Option(False, "--quick", help="Tiny sweeps: a smoke test whose figures mean nothing."),
    force: bool = typer.Option(False, "--force", help="Overwrite an --out or --samples file ppsim did not write."),
) -> None:
    """Time this accelerator's GEMMs by shape, its attention matmuls, its memory bandwidth and (on a GPU)
    its host's time to launch a kernel, and write them as a device entry that ppsim's analytic model
    reads (about a minute on a GPU)."""
    from ppsim.api import get_device, write_output

    with exits():
        targets = output_targets({"--out": out, "--samples": samples}, [], force)
        base = get_device(like)
        import torch

        from ppexec.measure.device_bench import measure_device

        kind = torch.device(device).type
        if kind == "cuda" and not torch.cuda.is_available():
            raise PpsimError(f"--device {device}: torch sees no CUDA device here; run this on the GPU machine "
                             "(or --device cpu for a smoke test)")
        err.print(f"timing {device} in {dtype}: memory bandwidth, GEMMs by shape, attention matmuls ...")
        measured = measure_device(base, dtype, device, quick=quick, on_progress=lambda m: err.print(f"  {m}"))
        entry_name = name or f"{like}-measured"
        write_output(targets["--out"], measured.device_file(entry_name))
        if "--samples" in targets:
            write_output(targets["--samples"], measured.samples_csv())
    entry = measured.entry
    err.print(f"memory bandwidth {entry['hbm_copy']['gb_s']} GB/s (datasheet {base.hbm_gb_s:g}); largest GEMMs at "
              f"{entry['gemm']['points'][-1][1]:.0%} of the datasheet peak"
              + (f"; {entry['launch']['us']:g} us a launch on the host" if "launch" in entry else ""))
    if measured.above_peak:
        say("warning", f"{len(measured.above_peak)} GEMMs ran faster than {like}'s datasheet peak: their fractions "
                       "are capped at 1; --like a device with this one's peak")
    err.print(f"wrote {targets['--out']}: use it with hardware: {{device: {entry_name}, device_file: {out}, "
              "gemm_curves: true}")


#: what ``ppexec.measure.stats.fit_link`` reports (1e12 bytes/ms) when a link's time does not grow with the bytes
UNMEASURED_GB_S = 1e6


def _bandwidth(gb_s: float) -> str:
    return "not measurable" if gb_s >= UNMEASURED_GB_S else f"{gb_s:.3f} GB/s"


def _print_profile(p: Profile) -> None:
    from rich.table import Table

    from ppsim.api import stdout_console

    table = Table(title="measured per micro-batch (ms)", title_justify="left")
    for col in ("layer", "forward", "backward", "weight grad", "optimizer", "params"):
        table.add_column(col, justify="right" if col != "layer" else "left")
    for name in ("embedding", "block", "moe_block", "head"):  # a mixture of experts' MoE block where measured
        x = getattr(p, name)
        if x is None:
            continue
        table.add_row(name, f"{x.forward_ms:.3f}", f"{x.backward_ms:.3f}", f"{x.weight_grad_ms:.3f}",
                      f"{x.optimizer_ms:.3f}", f"{x.params:,}")
    over = Table(title="framework overhead per action (ms)", title_justify="left")
    for col in ("stage", "forward", "backward", "clip", "optimizer"):
        over.add_column(col, justify="right" if col != "stage" else "left")
    for pos in ("first", "middle", "last"):
        o = p.overheads[pos]
        over.add_row(pos, f"{o.forward_ms:.3f}", f"{o.backward_ms:.3f}", f"{o.clip_ms:.3f}", f"{o.optimizer_ms:.3f}")
    console = stdout_console()
    console.print(table)
    console.print(over)
    link = p.link
    console.print(f"link: latency {link.latency_us:.1f} us, bandwidth {_bandwidth(link.bandwidth_gb_s)}, "
                  f"send overhead {link.send_overhead_us:.1f} us, receive overhead {link.recv_overhead_us:.1f} us; "
                  f"gradient-norm all-reduce {p.clip_allreduce_us:.1f} us", highlight=False)
    paid = p.machine.get("exchange_ms")
    for kind, c in p.collectives.items():
        raised = " (raised to what the steps paid, below)" if kind == "alltoall" and paid else ""
        console.print(f"{kind} (as a ring's link): latency {c.latency_us:.1f} us{raised}, bandwidth "
                      f"{_bandwidth(c.bandwidth_gb_s)}", highlight=False)
    if paid:
        console.print(f"alltoall: a dispatch's exchange took {paid['in_step_mean']:.3f} ms on average (median "
                      f"{paid['in_step_median']:.3f}) from the later rank's arrival over the {paid['exchanges']} "
                      f"all-to-alls of the expert-parallel run (dispatch and combine, forward and backward), "
                      f"{paid['idle']:.3f} ms timed back to back: priced at the larger", highlight=False)
    if p.routing_skew:
        console.print("routing: the busiest rank's token copies over the mean, as the expert-parallel run routed them, "
                      "at expert parallelism " + ", ".join(f"{ep} {skew:.2f}" for ep, skew in sorted(p.routing_skew.items()))
                      + " (beyond 2: its two ranks' copies split further; a plan whose scenario gives no "
                      "model.moe.skew is priced at its expert parallelism's)", highlight=False)
    if any(x >= UNMEASURED_GB_S for x in [link.bandwidth_gb_s, *(c.bandwidth_gb_s for c in p.collectives.values())]):
        console.print("(not measurable: the time did not grow with the message size at the sizes tried, as between "
                      "processes of one host; such a link costs its latency only)", highlight=False)
    if p.recompute:
        console.print("recomputation adds to a block: " + "; ".join(
            f"{mode} forward {r.forward_ms:+.3f} ms, backward {r.backward_ms:+.3f} ms" for mode, r in p.recompute.items()),
            highlight=False)
        full, selective = p.recompute.get("full"), p.recompute.get("selective")
        if full is not None and selective is not None and full.forward_ms < selective.forward_ms:
            console.print("(full's forward can add less than selective's: a fully checkpointed block runs its forward "
                          "without keeping activations, and pays the recomputation in its backward)", highlight=False)


def _report(result: RunResult, out: Path, json_out: bool) -> None:
    from ppexec.launch.watch import teardown_notes

    for note in teardown_notes(result.states):
        say("note", note)
    if json_out:
        from ppexec.results.collect import summary_doc

        sys.stdout.write(json.dumps(summary_doc(result), indent=2) + "\n")
        return
    from ppsim.api import print_summary

    print_summary(result.summary)
    err.print(f"runtime: {result.runtime}")
    err.print(f"losses: {', '.join('-' if x is None else f'{x:.4f}' for x in result.losses)}")
    err.print(f"wrote {out}/trace.json, {out}/trace.chrome.json, {out}/summary.json, {out}/steps/")


class _Progress:
    """A line when the ranks are ready (naming the warm-up) and one per recorded step, counting the
    steps asked for (``--steps``), with the step's loss; from the ranks' event files."""

    def __init__(self, steps: int, warmup: int) -> None:
        self.steps, self.warmup = steps, warmup
        self.started = self.ready = False
        self.shown = 0

    def __call__(self, states: list[RankState]) -> None:
        if not self.started:
            self.started = True
            err.print(f"starting {len(states)} ranks (Python, torch, the model, the process group) ...")
        if not self.ready and states and all(st.ready is not None for st in states):
            self.ready = True
            warm = (f"{self.warmup} warm-up step{'s' if self.warmup != 1 else ''} (not recorded), then "
                    if self.warmup else "")
            err.print(f"{len(states)} ranks ready: {warm}{self.steps} recorded step{'s' if self.steps != 1 else ''}")
        done = min((len(st.steps) for st in states), default=0)
        for k in range(self.shown, done):  # every step, also when several arrived since the last look
            losses = [st.steps[k].loss for st in states if st.steps[k].loss is not None]
            loss = f"  loss {losses[0]:.4f}" if losses else ""
            err.print(f"step {k + 1}/{self.steps} recorded{loss}")
        self.shown = max(self.shown, done)


@contextmanager
def profile_progress(s: Scenario) -> Iterator[Callable[[int, list[RankState]], None]]:
    """A bar over ``measure_profile``'s runs; yields its ``on_progress``."""
    from ppexec.launch.progress import RunUnits, follow
    from ppexec.measure.profile import PROFILE_STEPS, PROFILE_WARMUP, profile_runs
    from ppsim.api import progress_bar

    units, runs = RunUnits(PROFILE_STEPS, PROFILE_WARMUP), profile_runs(s)
    with progress_bar("profiling", runs * units.total) as bar:
        def on_progress(k: int, states: list[RankState]) -> None:
            follow(units, k * units.total, f"profiling run {k + 1}/{runs}", bar.to, bar.say)(states)

        yield on_progress


@contextmanager
def validate_progress(s: Scenario, profiling: bool, steps: int, warmup: int) -> Iterator[
        tuple[Callable[[int, list[RankState]], None], Callable[[list[RankState]], None]]]:
    """One bar over validate's profile (when it measures one) and its run; yields both ``on_progress``."""
    from ppexec.launch.progress import RunUnits, follow
    from ppexec.measure.profile import PROFILE_STEPS, PROFILE_WARMUP, profile_runs
    from ppsim.api import progress_bar

    prof, run = RunUnits(PROFILE_STEPS, PROFILE_WARMUP), RunUnits(steps, warmup)
    runs = profile_runs(s) if profiling else 0
    with progress_bar("validating", runs * prof.total + run.total) as bar:
        def on_profile(k: int, states: list[RankState]) -> None:
            follow(prof, k * prof.total, f"1/3 profiling run {k + 1}/{runs}", bar.to, bar.say)(states)

        yield on_profile, follow(run, runs * prof.total, "2/3 the run", bar.to, bar.say)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
