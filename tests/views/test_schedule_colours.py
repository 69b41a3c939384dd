"""One colour and marker per schedule, the same on every page and in the TUI (issue 34: on the tune
page zb-v and GPipe shared a colour, so the winner was drawn like GPipe). The colours are read back
from the pages themselves."""

from __future__ import annotations

import re

import pytest

from conftest import gpt
from ppsim.plan.schedules import SCHEDULES
from ppsim.prediction import predict
from ppsim.search.sweep import schedule_variants
from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.report import TuneResult, figure
from ppsim.search.tune.space import Candidate
from ppsim.views.palette import LIMIT_COLOR, SCHEDULE_STYLES, schedule_style
from ppsim.views.render.schedules_html import schedules_figure
from ppsim.views.tui.panels import plan_text
from ppsim.views.tui.state import TuiState

GIB = 2**30
#: in another order than tune's (sorted by name), so no page can pass by colouring in order
ON_BOTH = ["zb-v", "gpipe", "zb-h1", "1f1b", "zb-h2", "dualpipev", "interleaved-1f1b"]


def test_every_schedule_has_its_own_colour_and_marker() -> None:
    assert set(SCHEDULE_STYLES) == set(SCHEDULES)
    colours = [c.lower() for c, _ in SCHEDULE_STYLES.values()]
    markers = [m for _, m in SCHEDULE_STYLES.values()]
    assert len(set(colours)) == len(colours) and len(set(markers)) == len(markers)
    assert LIMIT_COLOR.lower() not in colours  # red is the device's memory line
    assert schedule_style("file:plan.json") == schedule_style("file:plan.json")
    assert schedule_style("file:plan.json") not in SCHEDULE_STYLES.values()


def compare_page_styles() -> dict[str, tuple[str, str]]:
    """Schedule -> (colour, marker) of the dots under compare-schedules' timelines, and each title's swatch."""
    variants = [v for v in schedule_variants(gpt().with_overrides(microbatches=16), ON_BOTH) if v.ok]
    fig = schedules_figure(variants, "gpt")
    dots = next(d for d in fig.data if d.name == "step time")
    styles = {label: (c, m) for label, c, m in zip(dots.y, dots.marker.color, dots.marker.symbol)}
    for title in (a.text for a in fig.layout.annotations if "<b>" in a.text):
        colour, name = re.match(r"<span style='color:([^']+)'>&#9632;</span> <b>([^<]+)</b>", title).groups()
        assert styles[name][0] == colour, name
    return styles


def tune_page_styles() -> dict[str, tuple[str, str]]:
    """Schedule -> (colour, marker) of the tune page's lines (throughput against stages)."""
    evals = [Evaluation(Candidate(p, 8 // p, 1, 1, 16, name, 2 if name in ("interleaved-1f1b", "zb-v", "dualpipev") else 1,
                                  "none", 0), fits=True, simulated=True, peak_memory_bytes=40 * GIB,
                        memory_capacity_bytes=80 * GIB, step_time_ms=1000.0 + i, throughput_samples_per_s=10.0 - i / 10,
                        bubble_fraction=0.1)
             for i, name in enumerate(ON_BOTH) for p in (2, 4)]
    fig = figure(TuneResult("small", 8, evals, 1.0, 1, "local"))
    lines = [d for d in fig.data if d.xaxis == "x" and d.name in SCHEDULES]
    return {d.name: (d.line.color, d.marker.symbol) for d in lines}


def test_a_schedule_is_drawn_alike_on_compare_schedules_tune_and_the_tui() -> None:
    compare, tune = compare_page_styles(), tune_page_styles()
    assert set(compare) == set(tune) == set(ON_BOTH)
    for name in ON_BOTH:
        assert compare[name] == tune[name] == SCHEDULE_STYLES[name], name
    assert len({c for c, _ in compare.values()}) == len(ON_BOTH)


@pytest.mark.parametrize("name", ["zb-v", "1f1b"])
def test_the_tui_writes_the_schedule_in_its_colour(name: str) -> None:
    state = TuiState.from_scenario(gpt().with_overrides(schedule=name, stages=4, microbatches=8,
                                                        **({"chunks": 2} if name == "zb-v" else {})),
                                   lambda s: predict(s).trace)
    text = plan_text(state)
    start = text.plain.index(f"schedule {name}") + len("schedule ")
    styles = [str(sp.style) for sp in text.spans if sp.start == start]
    assert styles == [f"bold {SCHEDULE_STYLES[name][0]}"]
