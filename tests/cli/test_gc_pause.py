"""ppsim pauses the garbage collector around its passes only in a process that allowed it: the
``ppsim`` command and its own worker processes do; a library call in someone else's process leaves
the collector (and the heap's generations) alone."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import ppsim
from conftest import SCENARIOS
from ppsim import gc_pause


@pytest.fixture
def collector_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls ppsim makes that change the collector's state, recorded instead of made."""
    calls: list[str] = []
    for name in ("disable", "freeze", "unfreeze"):
        monkeypatch.setattr(gc, name, lambda name=name: calls.append(name))
    monkeypatch.setattr(gc_pause, "_allowed", gc_pause._allowed)  # restored after the test
    return calls


def test_a_library_call_leaves_the_collector_alone(collector_calls: list[str]) -> None:
    ppsim.allow_gc_pauses(False)
    ppsim.predict(ppsim.load_scenario(SCENARIOS / "gpt.yaml", microbatches=16))
    assert collector_calls == []


def test_a_process_that_allows_it_gets_the_pauses(collector_calls: list[str]) -> None:
    ppsim.allow_gc_pauses()
    ppsim.predict(ppsim.load_scenario(SCENARIOS / "gpt.yaml", microbatches=16))
    assert collector_calls.count("disable") >= 2  # lowering and simulation at least
    assert collector_calls.count("freeze") == collector_calls.count("unfreeze") == collector_calls.count("disable")


def test_the_command_and_the_tuners_workers_allow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    code = ("import sys\nfrom ppsim.cli import main\nfrom ppsim.gc_pause import gc_pauses_allowed\n"
            "print('before', gc_pauses_allowed())\nsys.argv = ['ppsim', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint('after', gc_pauses_allowed())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "before False" in out and "after True" in out
    from ppsim.search.tune import executors

    monkeypatch.setattr(gc_pause, "_allowed", False)
    monkeypatch.setattr(executors, "_BASE", None)
    executors._init({})  # what each pool process of `ppsim tune` runs first
    assert gc_pause.gc_pauses_allowed()
