"""What ``ppsim tune`` shows: the top plans as a table, the whole search as JSON, and a page with
throughput against stages and micro-batches and the Pareto front of throughput against memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.rank import GIB, explain, pareto_front, ranking, versus_own
from ppsim.views.palette import schedule_style

if TYPE_CHECKING:  # pragma: no cover
    import plotly.graph_objects as go


#: plans whose throughputs differ by less than this are within the model's noise
NOISE = 0.01


def within_noise(ranked: list[Evaluation], noise: float = NOISE) -> int:
    """How many of the ranked plans reach at least (1 - noise) of the best one's throughput."""
    if not ranked:
        return 0
    best = ranked[0].throughput_samples_per_s or 0.0
    return sum(1 for e in ranked if (e.throughput_samples_per_s or 0.0) >= best * (1 - noise))


def noise_note(ranked: list[Evaluation], noise: float = NOISE) -> str | None:
    """The sentence saying that the top plans cannot be told apart, when two or more are within noise."""
    k = within_noise(ranked, noise)
    if k < 2:
        return None
    return (f"the top {k} plans are within {noise:.0%} of each other: below what the model can tell apart; "
            "choose among them by memory headroom or simplicity, or measure them")


@dataclass(frozen=True)
class TuneCounts:
    """What one search did with its plans, under the names every output of ``ppsim tune`` uses (the
    table's first line, ``--json``, the page's title, a written plan's header). Each plan considered
    is exactly one of: pruned by memory (its exact peak is over the device's memory: not simulated),
    skipped by bound (it fits, but its step-time bound shows it cannot be any plan the search reports:
    not simulated), simulated (it fits; these are the plans ranked), or invalid (it cannot run: a
    layer split, a placement). So ``considered = pruned_by_memory + skipped_by_bound + simulated +
    invalid`` and ``fit = skipped_by_bound + simulated``."""

    considered: int
    pruned_by_memory: int
    skipped_by_bound: int
    simulated: int
    invalid: int

    @property
    def fit(self) -> int:
        return self.skipped_by_bound + self.simulated

    @classmethod
    def of(cls, evaluations: list[Evaluation]) -> TuneCounts:
        ev = evaluations
        return cls(
            considered=len(ev),
            pruned_by_memory=sum(1 for e in ev if e.error is None and not e.fits),
            skipped_by_bound=sum(1 for e in ev if e.skipped),
            simulated=sum(1 for e in ev if e.simulated),
            invalid=sum(1 for e in ev if e.error is not None),
        )

    def to_dict(self) -> dict[str, int]:
        return {"considered": self.considered, "pruned_by_memory": self.pruned_by_memory,
                "skipped_by_bound": self.skipped_by_bound, "simulated": self.simulated, "invalid": self.invalid,
                "fit": self.fit}

    def text(self) -> str:
        """The one sentence every output gives, e.g. ``4,764 plans considered: 1,938 pruned by memory,
        2,363 skipped by bound, 463 simulated, 0 invalid (2,826 fit)``."""
        return (f"{self.considered:,} plans considered: {self.pruned_by_memory:,} pruned by memory, "
                f"{self.skipped_by_bound:,} skipped by bound, {self.simulated:,} simulated, {self.invalid:,} invalid "
                f"({self.fit:,} fit)")


@dataclass(frozen=True)
class TuneResult:
    scenario: str | None  #: the scenario's name (None: its file gives none)
    gpus: int
    evaluations: list[Evaluation]
    seconds: float
    jobs: int
    executor: str
    #: the scenario's own plan as ppsim run predicts it, when the search is on its devices
    own: Evaluation | None = None
    #: the search simulated every plan on the Pareto front of throughput against memory (else the
    #: simulated plans' own front is not the search's, and no output gives it)
    front: bool = True

    def front_plans(self) -> list[Evaluation] | None:
        """The plans on the Pareto front of throughput against memory; None where the search left it out."""
        return pareto_front(self.evaluations) if self.front else None

    @property
    def ranked(self) -> list[Evaluation]:
        return ranking(self.evaluations)

    def counts(self) -> TuneCounts:
        return TuneCounts.of(self.evaluations)

    def why(self) -> list[str]:
        return explain(self.evaluations, self.ranked[0]) if self.ranked else []

    def to_json_dict(self, top: int) -> dict[str, Any]:
        ranked = self.ranked
        pure = [e for e in ranked if e.candidate.pure_data_parallel]
        return {
            "scenario": self.scenario,
            "gpus": self.gpus,
            **self.counts().to_dict(),
            "seconds": self.seconds,
            "jobs": self.jobs,
            "executor": self.executor,
            "top": [e.to_dict() for e in ranked[:top]],
            "why": self.why(),
            "within_noise": within_noise(ranked),
            "noise": NOISE,
            "best_pure_data_parallel": pure[0].to_dict() if pure else None,
            "pareto_front": None if (front := self.front_plans()) is None else [e.to_dict() for e in front],
            "own": self.own.to_dict() if self.own is not None else None,
            "versus_own": versus_own(self.own, ranked[0]) if self.own is not None and ranked else None,
        }


def print_result(result: TuneResult, top: int, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[bold]{escape(result.scenario or 'scenario')}[/] on {result.gpus} devices, {result.counts().text()}; "
                  f"{result.seconds:.1f} s on {result.jobs} {result.executor} job(s)", highlight=False)
    ranked = result.ranked
    if not ranked:
        return
    table = Table(show_edge=False, pad_edge=False)
    experts = any(e.candidate.expert_parallel > 1 for e in ranked)  # a mixture of experts: its EP column
    context = any(e.candidate.context_parallel > 1 for e in ranked)  # long sequences split: the CP column
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"), ("p", "right"), ("d", "right"), ("t", "right"), *((("cp", "right"),) if context else ()),
        *((("ep", "right"), ("etp", "right")) if experts else ()),
        ("b", "right"), ("m", "right"), ("schedule", "left"), ("recompute", "left"), ("zero", "right"),
        ("step ms", "right"), ("samples/s", "right"), ("MFU", "right"), ("bubble", "right"), ("peak GiB", "right"))
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    for i, e in enumerate(ranked[:top], 1):
        k = e.candidate
        sched = k.schedule + (f" v={k.chunks}" if k.chunks > 1 else "")
        table.add_row(str(i), str(k.stages), str(k.data_parallel), str(k.tensor_parallel),
                      *((str(k.context_parallel),) if context else ()),
                      *((str(k.expert_parallel), str(k.expert_tensor)) if experts else ()), str(k.micro_batch),
                      str(k.microbatches), sched, k.recompute, str(k.zero_stage), f"{e.step_time_ms:,.1f}",
                      f"{e.throughput_samples_per_s:,.2f}", f"{(e.mfu or 0) * 100:.1f} %",
                      f"{(e.bubble_fraction or 0) * 100:.1f} %", f"{(e.peak_memory_bytes or 0) / GIB:,.1f}")
    console.print(table)
    best = ranked[0]
    console.print(f"[bold]best[/]: {escape(best.candidate.label())}: {best.throughput_samples_per_s:,.2f} samples/s, "
                  f"bubble {best.bubble_fraction:.1%}, peak {(best.peak_memory_bytes or 0) / GIB:,.1f} of "
                  f"{(best.memory_capacity_bytes or 0) / GIB:,.0f} GiB. Against it:", highlight=False)
    if result.own is not None:
        console.print(f"  - {versus_own(result.own, best)}", highlight=False, markup=False, soft_wrap=True)
    for line in result.why():
        console.print(f"  - {line}", highlight=False, markup=False, soft_wrap=True)
    note = noise_note(ranked)
    if note:
        console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)


def figure(result: TuneResult) -> go.Figure:
    """Throughput against stages and against micro-batches (best plan per value and schedule), and
    every simulated plan's throughput against its peak memory with the Pareto front (where the
    search found it: :attr:`TuneResult.front`); the title gives
    the search's counts (:meth:`TuneCounts.text`)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from ppsim.views.render.memory import add_limit

    ranked = result.ranked
    c = result.counts()
    undrawn = ([f"{c.pruned_by_memory:,} plan{'s' * (c.pruned_by_memory != 1)} over the device's memory "
                "(pruned by memory)"] if c.pruned_by_memory else []) + (
        [f"{c.skipped_by_bound:,} skipped by bound"] if c.skipped_by_bound else [])
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, subplot_titles=(
        "throughput vs pipeline stages", "throughput vs micro-batches per step", "throughput vs peak memory"
        + (f"<br><sup>{' and '.join(undrawn)}: not drawn</sup>" if undrawn else "")))
    schedules = sorted({e.candidate.schedule for e in ranked})
    styles = {name: schedule_style(name) for name in schedules}  # each schedule's on every page
    for col, key, title in ((1, "stages", "stages p"), (2, "microbatches", "micro-batches m")):
        values = sorted({getattr(e.candidate, key) for e in ranked})
        for sched in schedules:
            best: dict[int, Evaluation] = {}
            for e in ranked:
                x = getattr(e.candidate, key)
                if e.candidate.schedule == sched and x not in best:
                    best[x] = e
            xs = sorted(best)
            fig.add_trace(go.Scatter(x=xs, y=[best[x].throughput_samples_per_s for x in xs], mode="lines+markers",
                                     name=sched, legendgroup=sched, showlegend=col == 1,
                                     line={"color": styles[sched][0]},
                                     marker={"color": styles[sched][0], "symbol": styles[sched][1], "size": 8},
                                     text=[best[x].candidate.label() for x in xs],
                                     hovertemplate="%{text}<br>%{y:.2f} samples/s<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text=title, type="log", tickvals=values, ticktext=[str(v) for v in values],
                         row=1, col=col)
    fig.add_trace(go.Scatter(x=[(e.peak_memory_bytes or 0) / GIB for e in ranked],
                             y=[e.throughput_samples_per_s for e in ranked], mode="markers", name="simulated plans",
                             marker={"size": 6, "opacity": 0.55,
                                     "color": [styles[e.candidate.schedule][0] for e in ranked],
                                     "symbol": [styles[e.candidate.schedule][1] for e in ranked]},
                             text=[e.candidate.label() for e in ranked],
                             hovertemplate="%{text}<br>%{x:.1f} GiB<br>%{y:.2f} samples/s<extra></extra>"),
                  row=1, col=3)
    front = result.front_plans()
    if front is not None:
        fig.add_trace(go.Scatter(x=[(e.peak_memory_bytes or 0) / GIB for e in front],
                                 y=[e.throughput_samples_per_s for e in front], mode="lines+markers",
                                 name="Pareto front", line={"shape": "hv", "color": "#d62728"},
                                 text=[e.candidate.label() for e in front],
                                 hovertemplate="%{text}<br>%{x:.1f} GiB<br>%{y:.2f} samples/s<extra></extra>"),
                      row=1, col=3)
    fig.update_xaxes(title_text="peak memory per device (GiB)", row=1, col=3)
    capacity = max((e.memory_capacity_bytes or 0.0 for e in result.evaluations), default=0.0)
    if capacity:
        add_limit(fig, capacity, max(((e.peak_memory_bytes or 0) / GIB for e in ranked), default=0.0), row=1, col=3,
                  vertical=True)
    fig.update_yaxes(title_text="samples/s", row=1, col=1)
    fig.update_layout(
        title={"text": f"{result.scenario or 'scenario'} on {result.gpus} devices"
                       + (f": best {ranked[0].candidate.label()}" if ranked else "") + f"<br><sup>{c.text()}</sup>",
               "font": {"size": 14}},
        template="plotly_white", height=540, width=1500, margin={"l": 60, "r": 20, "t": 100, "b": 60})
    return fig
