"""What every command of ``ppsim`` and ``ppexec`` shares: the plan options (declared once), loading
the scenario and the profile, checking output files before any work, and reporting errors.

Exit codes: 0 success, 1 bad input (a scenario, plan, trace, profile or output path), 2 bad usage
(an option's value, or options that do not go together). Messages go to stderr verbatim (user
text such as ``ppsim[tui]`` is not read as markup); a PpsimError's picture (the plan grid) follows it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ppsim.errors import PpsimError
from ppsim.inputs.choices import Comm, KernelChoice, PartitionMode, Recompute
from ppsim.inputs.overrides import PlanOverrides, apply_overrides, plan_warnings

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go

    from ppsim.inputs.profile import Profile
    from ppsim.inputs.scenario import Scenario

#: stderr: notes, errors and "wrote ..." lines; no markup, user text is printed as it is
err = Console(stderr=True, highlight=False, markup=False)


def say(label: str, message: str) -> None:
    """Print ``label: message`` on stderr, the label styled (error in red, note in yellow), the message verbatim."""
    style = "bold red" if label == "error" else "yellow"
    err.print(Text.assemble((f"{label}:", style), " ", message), soft_wrap=True)


def fail(exc: PpsimError) -> NoReturn:
    """Print a user-facing error (and its picture, if any) on stderr and exit 1."""
    say("error", str(exc))
    if exc.detail:
        err.print(exc.detail, soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Inside, a PpsimError is bad input: print it and exit 1."""
    try:
        yield
    except PpsimError as exc:
        fail(exc)


def installed_version() -> str:
    """The version of the installed ppsim distribution (ppsim and ppexec ship together)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ppsim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install the checkout)"


def version_option(program: str) -> Any:
    """``--version``: print ``PROGRAM VERSION`` and exit 0, before any command runs."""
    def show(value: bool) -> None:
        if value:
            typer.echo(f"{program} {installed_version()}")
            raise typer.Exit()

    return typer.Option(False, "--version", callback=show, is_eager=True, help="Print the version and exit.")


def usage_error(message: str, option: str) -> typer.BadParameter:
    """Bad usage of ``option`` (exit 2, with the command's usage line)."""
    return typer.BadParameter(message, param_hint=option)


# ----- the plan options, declared once ---------------------------------------------------------
def _known_schedule(name: str | None) -> str | None:
    if name is None:
        return None
    from ppsim.plan.schedules import FILE_PREFIX, NAMES

    if name not in NAMES and not name.startswith(FILE_PREFIX):
        raise usage_error(f"unknown schedule {name!r}; choose one of: {', '.join(NAMES)}, or file:PATH "
                          "(a plan file)", "--schedule")
    return name


@dataclass(frozen=True)
class _PlanOption:
    annotation: Any
    make: Callable[[], Any]  #: a fresh typer.Option (typer keeps state on them)


PLAN_OPTIONS: dict[str, _PlanOption] = {
    "schedule": _PlanOption(str | None, lambda: typer.Option(
        None, "--schedule", callback=_known_schedule, help="Schedule name (see `ppsim schedules`), or file:PATH (a plan file).")),
    "stages": _PlanOption(int | None, lambda: typer.Option(None, "--stages", min=1, help="Pipeline stages (ranks) p.")),
    "microbatches": _PlanOption(int | None, lambda: typer.Option(
        None, "--microbatches", min=1, help="Micro-batches per step m.")),
    "chunks": _PlanOption(int | None, lambda: typer.Option(None, "--chunks", min=1, help="Virtual stages per rank v.")),
    "partition": _PlanOption(PartitionMode | None, lambda: typer.Option(
        None, "--partition", help="Layers per stage: uniform or balanced (explicit counts go in the scenario).")),
    "comm": _PlanOption(Comm | None, lambda: typer.Option(
        None, "--comm", help="Send semantics: rendezvous (blocking, as gloo / NCCL pairs), eager or async.")),
    "data_parallel": _PlanOption(int | None, lambda: typer.Option(
        None, "--data-parallel", min=1, help="Data-parallel replicas d (the scenario's global batch holds: the "
                                             "micro-batch count follows).")),
    "tensor_parallel": _PlanOption(int | None, lambda: typer.Option(
        None, "--tensor-parallel", min=1, help="Tensor-parallel devices per stage t (inside a node).")),
    "context_parallel": _PlanOption(int | None, lambda: typer.Option(
        None, "--context-parallel", min=1, help="Context-parallel devices cp sharing each sequence (the global "
                                                "batch holds).")),
    "expert_parallel": _PlanOption(int | None, lambda: typer.Option(
        None, "--expert-parallel", min=1, help="Expert-parallel devices EP sharing each MoE layer's experts (folded "
                                               "into the stage's tensor x context x data-parallel devices).")),
    "expert_tensor_parallel": _PlanOption(int | None, lambda: typer.Option(
        None, "--expert-tensor-parallel", min=1, help="Devices ETP each expert's matrices are split over (default: "
                                                      "the tensor parallelism; 1: each expert whole, as DeepSeek runs).")),
    "micro_batch": _PlanOption(int | None, lambda: typer.Option(
        None, "--micro-batch-size", min=1, help="Sequences per micro-batch b (the global batch holds).")),
    "recompute": _PlanOption(Recompute | None, lambda: typer.Option(
        None, "--recompute", help="Activation recomputation: none, selective (the attention core) or full.")),
    "zero_stage": _PlanOption(int | None, lambda: typer.Option(
        None, "--zero-stage", min=0, max=3, help="DeepSpeed ZeRO stage (pipelines take 0 or 1).")),
    "kernel": _PlanOption(KernelChoice | None, lambda: typer.Option(
        None, "--kernel", help="What runs the simulation: auto, clocked, immediate, or simpy (SimPy itself, the "
                               "reference; pip install 'ppsim[reference]'): the same trace, at different speeds.")),
}
#: the options that shape the plan beyond the pipeline (every command that takes a plan takes these)
PARALLEL_OPTIONS = ("data_parallel", "tensor_parallel", "context_parallel", "expert_parallel",
                    "expert_tensor_parallel", "micro_batch", "recompute", "zero_stage")


def plan_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the plan options ``names`` (all of them by default): the command declares a
    ``plan: PlanOverrides`` parameter and receives them in it."""
    names = names or tuple(PLAN_OPTIONS)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "plan"]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=PLAN_OPTIONS[n].make(),
                                   annotation=PLAN_OPTIONS[n].annotation) for n in names]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            plan = PlanOverrides(**{n: kwargs.pop(n) for n in names})
            return command(plan=plan, **kwargs)

        params = own + added
        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]  # read by inspect, untyped
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return wrapper

    return decorate


# ----- inputs -----------------------------------------------------------------------------------
PROFILE_HELP = "Measured costs from `ppexec profile` (YAML) instead of the roofline."


def profile_option() -> Any:
    return typer.Option(None, "--profile", help=PROFILE_HELP)


def scenario_with(path: Path, plan: PlanOverrides = PlanOverrides(), ds_config: Path | None = None) -> Scenario:
    """The scenario of ``path`` (with a DeepSpeed config) and the plan options
    (:func:`ppsim.inputs.overrides.apply_overrides`); its notes printed."""
    from ppsim.inputs.scenario import load_with_notes

    s, notes = load_with_notes(path, ds_config)
    for note in notes:
        say("note", note)
    new, plan_notes = apply_overrides(s, plan)
    for note in plan_notes + plan_warnings(new) + pricing_notes(new):
        say("note", note)
    return new


def pricing_notes(s: Scenario) -> list[str]:
    """What the scenario's pricing does that its device's own measurements contradict (none
    without a model: explicit costs price themselves)."""
    if s.model is None or s.costs is not None:
        return []
    from ppsim.costs.low_precision import check_scenario_precision
    from ppsim.costs.measured import attention_kernel_notes, dispatch_notes, flat_narrow_notes
    from ppsim.inputs.hardware import get_device

    device = get_device(s.hardware.device, s.hardware.device_file)
    # a precision the device cannot run is the error, before any note on how it would be priced
    check_scenario_precision(s, device)
    return flat_narrow_notes(s, device) + dispatch_notes(s, device) + attention_kernel_notes(s, device)


def load_profile_option(path: Path | None) -> Profile | None:
    """The profile a ``--profile`` option names, or None."""
    if path is None:
        return None
    from ppsim.inputs.profile import load_profile

    return load_profile(path)


T = TypeVar("T", int, float)  #: what a comma-separated option list holds


def int_list(text: str | None, option: str) -> list[int] | None:
    """``"4,8,16"`` -> [4, 8, 16]: positive, distinct whole numbers, else bad usage of ``option``."""
    return _value_list(text, option, int, "whole numbers such as 4,8,16", "positive whole numbers such as 4,8,16",
                       lambda v: v >= 1)


def float_list(text: str | None, option: str, least: float) -> list[float] | None:
    """``"1,1.25,2"`` -> [1.0, 1.25, 2.0]: distinct numbers of at least ``least``, else bad usage of ``option``."""
    return _value_list(text, option, float, "numbers such as 1,1.25,1.5", f"numbers of at least {least:g}",
                       lambda v: least <= v < float("inf"))


def _value_list(text: str | None, option: str, parse: Callable[[str], T], what: str, allowed: str,
                ok: Callable[[T], bool]) -> list[T] | None:
    """A comma-separated list of distinct values that ``parse`` reads and ``ok`` accepts (None: not
    given), else bad usage of ``option`` saying ``what`` it takes or which are ``allowed``."""
    if text is None:
        return None
    items = text.split(",")
    if len(items) > 1 and not all(v.strip() for v in items):  # 4,,8 or 4,8, : a value left out
        raise usage_error(f"lists an empty value: {text!r}; give comma-separated {what}", option)
    try:
        values = [parse(v) for v in items if v.strip()]
    except ValueError:
        raise usage_error(f"expected comma-separated {what}, got {text!r}", option) from None
    if not values or not all(map(ok, values)):
        raise usage_error(f"expected {allowed}, got {text!r}", option)
    if len(set(values)) != len(values):
        raise usage_error(f"lists a value twice: {text!r}", option)
    return values


# ----- outputs ----------------------------------------------------------------------------------
def output_targets(outputs: dict[str, Path | None], inputs: list[Path], force: bool) -> dict[str, Path]:
    """The given outputs (option -> path), each checked before any work: never an input, never a
    file ppsim did not write (without ``force``), never two options on one file; ``--png`` also
    checks that a browser can draw it."""
    from ppsim import outputs as out

    inputs = out.check_inputs(inputs)
    targets = {opt: out.check_output(p, opt, inputs, force) for opt, p in outputs.items() if p is not None}
    if len({t.resolve() for t in targets.values()}) < len(targets):
        raise PpsimError(f"{' and '.join(targets)} name the same file; give each its own name")
    if "--png" in targets:
        from ppsim.views.render.png import check_png

        check_png()
    return targets


def write_pages(targets: dict[str, Path], figure: Callable[[], go.Figure]) -> None:
    """Write the figure ``figure()`` builds to the ``--html`` and ``--png`` targets (built once, if any)."""
    from ppsim import outputs as out

    if "--html" not in targets and "--png" not in targets:
        return
    fig = figure()
    if "--html" in targets:
        from ppsim.views.render.gantt import write_figure

        out.atomic_write(targets["--html"], lambda p: write_figure(fig, p))
    if "--png" in targets:
        from ppsim.views.render.png import write_png

        out.atomic_write(targets["--png"], lambda p: write_png(fig, p))


def report_written(targets: dict[str, Path]) -> None:
    for opt, path in targets.items():
        err.print(f"wrote {path} ({opt.lstrip('-')})")


def force_option() -> Any:
    return typer.Option(False, "--force", help="Overwrite output files not written by ppsim.")


def html_option(what: str) -> Any:
    return typer.Option(None, "--html", help=f"Write {what} (self-contained HTML).")


def png_option() -> Any:
    return typer.Option(None, "--png", help="Write the same picture as a PNG (needs Chrome or Chromium).")
