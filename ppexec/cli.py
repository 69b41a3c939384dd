"""The ``ppexec`` command: run a scenario's plan for real with DeepSpeed and record it.

Exit codes: 0 success, 1 bad input or a failed run, 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from ppsim.cli import check_partition_option, err, fail
from ppsim.errors import PpsimError

app = typer.Typer(
    name="ppexec",
    help="Run a ppsim plan for real with DeepSpeed's pipeline engine and record the measured timeline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """ppexec: run the same plan ppsim simulates, with DeepSpeed, and record it."""


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Run folder: traces, summary, per-rank logs."),
    steps: int = typer.Option(3, "--steps", min=1, help="Training steps to record."),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Steps to run first and not record."),
    schedule: str | None = typer.Option(None, "--schedule", help="Schedule (gpipe or 1f1b)."),
    stages: int | None = typer.Option(None, "--stages", min=1, help="Pipeline stages p."),
    microbatches: int | None = typer.Option(None, "--microbatches", min=1, help="Micro-batches per step m."),
    partition: str | None = typer.Option(None, "--partition", help="uniform | balanced"),
    launcher: str = typer.Option("local", "--launcher", help="local (one process per rank here) or deepspeed."),
    hostfile: Path | None = typer.Option(None, "--hostfile", help="DeepSpeed hostfile (--launcher deepspeed)."),
    timeout: float = typer.Option(60.0, "--timeout", min=1, help="Seconds a rank may wait on a peer before failing."),
    seed: int = typer.Option(1234, "--seed", help="Seed of the weights and the synthetic data."),
    lr: float = typer.Option(1e-3, "--lr", min=0, help="AdamW learning rate."),
    save_params: bool = typer.Option(False, "--save-params", help="Save every rank's weights at the end."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Train SCENARIO's plan for --steps steps and write the measured trace into --out."""
    from ppexec.run import RunOptions, check_run_folder, execute
    from ppsim.scenario import load

    try:
        check_partition_option(partition)
        if launcher not in ("local", "deepspeed"):
            raise PpsimError(f"--launcher must be local or deepspeed, got {launcher!r}", field="--launcher")
        if launcher == "deepspeed" and hostfile is None:
            raise PpsimError("--launcher deepspeed needs --hostfile FILE", field="--hostfile")
        if hostfile is not None and not hostfile.is_file():
            raise PpsimError(f"hostfile {hostfile} does not exist", field="--hostfile")
        check_run_folder(out)
        s = load(scenario).with_overrides(schedule=schedule, stages=stages, microbatches=microbatches,
                                          partition=partition)
        opts = RunOptions(out=out, steps=steps, warmup=warmup, timeout_s=timeout, seed=seed, lr=lr,
                          save_params=save_params, backend="nccl" if launcher == "deepspeed" else "gloo")
        progress = _Progress(steps + warmup, warmup)
        result = execute(s, opts, progress, hostfile=hostfile if launcher == "deepspeed" else None)
        progress.close()
        _write_outputs(result, out)
    except PpsimError as exc:
        fail(exc)
        return
    _report(result, out, json_out)


@app.command()
def prepare(
    scenario: Path = typer.Argument(..., help="Scenario YAML file (needs a model section)."),
    out: Path = typer.Option(..., "--out", help="Run folder, on a filesystem every host sees."),
    steps: int = typer.Option(3, "--steps", min=1),
    warmup: int = typer.Option(1, "--warmup", min=0),
    backend: str = typer.Option("nccl", "--backend", help="nccl (GPUs) or gloo (CPUs)."),
    timeout: float = typer.Option(300.0, "--timeout", min=1),
    seed: int = typer.Option(1234, "--seed"),
    lr: float = typer.Option(1e-3, "--lr", min=0, help="AdamW learning rate."),
    schedule: str | None = typer.Option(None, "--schedule", help="Schedule (gpipe or 1f1b)."),
    stages: int | None = typer.Option(None, "--stages", min=1, help="Pipeline stages p."),
    microbatches: int | None = typer.Option(None, "--microbatches", min=1, help="Micro-batches per step m."),
    partition: str | None = typer.Option(None, "--partition", help="uniform | balanced"),
) -> None:
    """Write RUN_DIR/run.json for any launcher (torchrun, srun, deepspeed) to start
    `python -m ppexec.worker RUN_DIR` on every rank; then `ppexec collect RUN_DIR`."""
    from ppexec.run import RunOptions, prepare_run
    from ppsim.scenario import load

    try:
        if backend not in ("nccl", "gloo"):
            raise PpsimError(f"--backend must be nccl or gloo, got {backend!r}", field="--backend")
        check_partition_option(partition)
        s = load(scenario).with_overrides(schedule=schedule, stages=stages, microbatches=microbatches,
                                          partition=partition)
        opts = RunOptions(out=out, steps=steps, warmup=warmup, timeout_s=timeout, seed=seed, lr=lr, backend=backend)
        _, _, world = prepare_run(s, opts)
    except PpsimError as exc:
        fail(exc)
        return
    typer.echo(f"wrote {out}/run.json: start {world} ranks with `python -m ppexec.worker {out}`")


@app.command()
def collect(
    out: Path = typer.Argument(..., help="A run folder whose ranks have finished."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Assemble the measured traces and summary of a run started by another launcher."""
    from ppexec.run import collect as collect_run

    try:
        result = collect_run(out)
        _write_outputs(result, out)
    except PpsimError as exc:
        fail(exc)
        return
    _report(result, out, json_out)


def _report(result, out: Path, json_out: bool) -> None:  # noqa: ANN001 - RunResult
    if json_out:
        doc = result.summary.to_json_dict()
        doc["losses"] = result.losses
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from ppsim.render.table import print_summary

    print_summary(result.summary)
    err.print(f"losses: {', '.join(f'{x:.4f}' for x in result.losses)}")
    err.print(f"wrote {out}/trace.json, {out}/trace.chrome.json, {out}/summary.json, {out}/steps/")


class _Progress:
    """Steps done and the latest loss, from the ranks' event files."""

    def __init__(self, total: int, warmup: int) -> None:
        self.total, self.warmup = total, warmup
        self.shown = -1

    def __call__(self, states: list) -> None:  # noqa: ANN001 - RankState list
        done = min((len(st.steps) for st in states), default=0)
        if done != self.shown and done > 0:
            losses = [st.steps[done - 1]["loss"] for st in states if st.steps and st.steps[done - 1].get("loss") is not None]
            loss = f"  loss {losses[0]:.4f}" if losses else ""
            err.print(f"step {self.warmup + done}/{self.total} recorded{loss}", highlight=False)
            self.shown = done

    def close(self) -> None:
        pass


def _write_outputs(result, out: Path) -> None:  # noqa: ANN001 - RunResult
    from ppsim.export.chrome import to_chrome_trace
    from ppsim.metrics import step_time_ms

    steps_dir = out / "steps"
    steps_dir.mkdir(exist_ok=True)
    for k, trace in enumerate(result.traces):
        trace.save(steps_dir / f"step-{k}.trace.json")
    result.representative.save(out / "trace.json")
    (out / "trace.chrome.json").write_text(json.dumps(to_chrome_trace(result.representative), separators=(",", ":")))
    doc = result.summary.to_json_dict()
    doc["losses"] = result.losses
    doc["step_times_ms"] = [step_time_ms(t) for t in result.traces]
    (out / "summary.json").write_text(json.dumps(doc, indent=2))
    (out / "plan.json").write_text(json.dumps(result.plan.to_dict(), indent=1))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
