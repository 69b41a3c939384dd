"""What a scenario's header, and docs/scenarios.md's entry for it, say ppsim predicts for it is what
ppsim predicts now: each figure they quote (a step in seconds, an MFU), read where the text states
it, at the text's own rounding."""

from __future__ import annotations

import re

import pytest

from conftest import SCENARIOS
from ppsim.inputs.scenario import load
from ppsim.prediction import predict
from ppsim.trace.metrics import summarize

#: (scenario, the header's words around the figure, which figure: the step in seconds or MFU in %)
QUOTED = [
    ("deepseek-v3.yaml", r"ppsim predicts a ([\d.]+) s step", "step"),
    ("gpt-oss-120b.yaml", r"ppsim predicts ([\d.]+) s,", "step"),
    ("kimi-k2.yaml", r"ppsim\n# predicts ([\d.]+) s,", "step"),
    ("llama3-405b.yaml", r"ppsim predicts ([\d.]+) % MFU", "mfu"),
    ("llama31-405b-gb200.yaml", r"faster than published \(([\d.]+) s\)", "step"),
    ("megatron-gpt3-175b.yaml", r"ppsim predicts ([\d.]+) % MFU", "mfu"),
    ("nemotron3-nano.yaml", r"ppsim predicts ([\d.]+) s,", "step"),
    ("qwen3-30b-a3b.yaml", r"ppsim predicts ([\d.]+) s,", "step"),
]


@pytest.mark.parametrize(("name", "words", "figure"), QUOTED, ids=[q[0] for q in QUOTED])
def test_the_header_s_figure_is_the_prediction(name: str, words: str, figure: str) -> None:
    path = SCENARIOS / name
    found = re.search(words, path.read_text())
    assert found, f"{name}: the header no longer says {words!r}"
    quoted = found.group(1)
    summary = summarize(predict(load(path)).trace)
    value = summary.step_time_ms / 1e3 if figure == "step" else 100 * (summary.mfu or 0.0)
    decimals = len(quoted.partition(".")[2])
    assert f"{value:.{decimals}f}" == quoted, f"{name}: the header says {quoted}, ppsim predicts {value:.3f}"


#: (scenario, the words around the step docs/scenarios.md quotes for it)
DOCUMENTED = [
    ("deepseek-v3.yaml", r"step\); ppsim ([\d.]+) s with DeepEP"),
    ("gpt-oss-120b.yaml", r"per GPU \(a 2.48 s step\); ppsim ([\d.]+) s,"),
    ("kimi-k2.yaml", r"\(a 12.2 s step\); ppsim\s+([\d.]+) s,"),
    ("llama31-405b-gb200.yaml", r"a 7.1 s step; ppsim ([\d.]+) s,"),
    ("nemotron3-nano.yaml", r"\(a 13.1 s step\); ppsim ([\d.]+) s,"),
    ("qwen3-30b-a3b.yaml", r"29.7 s step\); ppsim ([\d.]+) s,"),
]


@pytest.mark.parametrize(("name", "words"), DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_the_scenarios_page_s_step_is_the_prediction(name: str, words: str) -> None:
    from conftest import ROOT

    found = re.search(words, (ROOT / "docs" / "scenarios.md").read_text())
    assert found, f"docs/scenarios.md no longer says {words!r} of {name}"
    quoted = found.group(1)
    step = summarize(predict(load(SCENARIOS / name)).trace).step_time_ms / 1e3
    assert f"{step:.{len(quoted.partition('.')[2])}f}" == quoted, f"{name}: the page says {quoted} s, ppsim {step:.3f}"
