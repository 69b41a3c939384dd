"""`ppsim tune`'s counts are one set of names and figures everywhere (the table's first line,
``--json``, the page's title, a written plan's header, the "not written" line), they add up, and the
written plan's hints say where each command is meant to run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import SCENARIOS, small_search
from ppsim.cli import app
from ppsim.inputs.scenario import load, parse_scenario
from ppsim.search.tune import scenario_file
from ppsim.search.tune.evaluate import Evaluation
from ppsim.search.tune.executors import local
from ppsim.search.tune.prune import search
from ppsim.search.tune.rank import EXPLAINED, ranking
from ppsim.search.tune.report import TuneCounts, TuneResult, figure, print_result
from ppsim.search.tune.scenario_file import local_run_bytes, next_lines, scenario_text

runner = CliRunner()
GIB = 2**30
ARGS = ["--gpus", "8", "--micro-batch-sizes", "1", "--schedules", "1f1b,zb-h1", "--jobs", "1", "--top", "2"]
#: "4,764 plans considered: 1,938 pruned by memory, 2,363 skipped by bound, 463 simulated, 0 invalid (2,826 fit)"
COUNTS = re.compile(r"([\d,]+) plans considered: ([\d,]+) pruned by memory, ([\d,]+) skipped by bound, "
                    r"([\d,]+) simulated, ([\d,]+) invalid \(([\d,]+) fit\)")


def counts_in(text: str) -> tuple[int, ...]:
    """The six figures of the one counts sentence in ``text`` (exactly one must be there)."""
    found = COUNTS.findall(text)
    assert len(found) == 1, f"one counts sentence expected in {text!r}"
    return tuple(int(x.replace(",", "")) for x in found[0])


def as_tuple(c: dict | TuneCounts) -> tuple[int, ...]:
    d = c if isinstance(c, dict) else c.to_dict()
    return tuple(d[k] for k in ("considered", "pruned_by_memory", "skipped_by_bound", "simulated", "invalid", "fit"))


def test_one_search_shows_the_same_counts_everywhere(small_yaml: Path, tmp_path: Path) -> None:
    """The table's first line, the page's title, the written file's header and --json give the same
    figures under the same names, for a search that prunes and skips."""
    page, best = tmp_path / "t.html", tmp_path / "best.yaml"
    res = runner.invoke(app, ["tune", str(small_yaml), *ARGS, "--html", str(page), "--write", str(best)])
    assert res.exit_code == 0, res.output
    text = counts_in(res.stdout.splitlines()[0])
    header = best.read_text().splitlines()
    assert header[1].startswith("# search: ")
    written = counts_in(header[1])
    # the page's title: the one string of the figure's JSON that gives the counts
    (title,) = [json.loads(s) for s in re.findall(r'"text":("(?:[^"\\]|\\.)*")', page.read_text())
                if "plans considered" in s]
    assert title.startswith("gpt3-13b-64xa100 on 8 devices: best ")
    titled = counts_in(title)
    again = runner.invoke(app, ["tune", str(small_yaml), *ARGS, "--html", str(tmp_path / "u.html"), "--json"])
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert text == written == titled == as_tuple(doc)
    considered, pruned, skipped, simulated, invalid, fit = text
    assert pruned and skipped and simulated  # every kind is there to compare
    assert considered == pruned + skipped + simulated + invalid and fit == skipped + simulated
    assert header[0] == (f"# written by ppsim tune: plan 1 of {simulated:,} simulated, for gpt3-13b-64xa100 "
                         "on 8 devices")
    assert len(doc["top"]) == 2


def test_the_reports_of_one_result_agree() -> None:
    """print_result, to_json_dict, the figure's title and scenario_text's header, from one result."""
    base, cands, _ = small_search()
    with local(base, 1) as ex:
        evals = search(ex, cands, top=3, groups=EXPLAINED)
    result = TuneResult("small", 8, evals, 1.0, 1, "local")
    c = result.counts()
    assert c.skipped_by_bound and c.pruned_by_memory
    out = StringIO()
    print_result(result, 3, Console(file=out, width=300))
    assert counts_in(out.getvalue().splitlines()[0]) == as_tuple(c)
    assert counts_in(figure(result).layout.title.text) == as_tuple(c)
    assert as_tuple(result.to_json_dict(3)) == as_tuple(c)
    written = scenario_text(parse_scenario(base), result.ranked[0], 1, c, "ppsim tune small.yaml", Path("b.yaml"))
    assert counts_in(written.splitlines()[1]) == as_tuple(c)
    assert f"plan 1 of {c.simulated:,} simulated" in written.splitlines()[0]


def test_the_counts_add_up_and_each_plan_is_counted_once() -> None:
    base, cands, exhaustive = small_search()
    with local(base, 1) as ex:
        pruned = search(ex, cands, top=1, groups=())
    bad = Evaluation(cands[0], error="no such device")  # a plan that cannot run
    for evals in (exhaustive, pruned, [*pruned, bad]):
        c = TuneCounts.of(evals)
        kinds = [("invalid" if e.error else "pruned" if not e.fits else "simulated" if e.simulated else "skipped")
                 for e in evals]
        assert (c.invalid, c.pruned_by_memory, c.simulated, c.skipped_by_bound) == tuple(
            kinds.count(k) for k in ("invalid", "pruned", "simulated", "skipped"))
        assert c.considered == len(evals) == c.pruned_by_memory + c.skipped_by_bound + c.simulated + c.invalid
        assert c.fit == sum(1 for e in evals if e.fits) == c.skipped_by_bound + c.simulated
        assert c.simulated == len(ranking(evals))  # the ranked plans are the simulated ones
    assert TuneCounts.of([*pruned, bad]).invalid == 1
    ex_c, pr_c = TuneCounts.of(exhaustive), TuneCounts.of(pruned)
    assert ex_c.skipped_by_bound == 0 and pr_c.skipped_by_bound > 0
    assert (ex_c.considered, ex_c.pruned_by_memory, ex_c.fit) == (pr_c.considered, pr_c.pruned_by_memory, pr_c.fit)
    assert TuneCounts(10, 2, 3, 4, 1).text() == ("10 plans considered: 2 pruned by memory, 3 skipped by bound, "
                                                  "4 simulated, 1 invalid (7 fit)")


def test_not_written_says_how_many_fit_and_were_simulated(tmp_path: Path) -> None:
    from ppsim.cli.tune_write import write_plans

    base, _, evals = small_search()
    source = parse_scenario(base)
    ranked = ranking(evals)
    # three fit, all simulated: plan 4 cannot be written, as only three fit
    few = [e for e in evals if not e.fits] + ranked[:3]
    lines = write_plans(TuneResult("small", 8, few, 1.0, 1, "local"), source,
                        [(tmp_path / "a.yaml", 1), (tmp_path / "b.yaml", 4)], "ppsim tune small.yaml")
    assert lines[0].startswith(f"wrote {tmp_path / 'a.yaml'} (plan 1: ") and "on any machine: ppsim run" in lines[0]
    assert lines[1] == f"not written: {tmp_path / 'b.yaml'} (plan 4: only 3 plans fit)"
    # five fit, three simulated, two skipped by bound: plan 4 fits but was not simulated
    skipped = [replace(e, simulated=False, step_time_ms=None, throughput_samples_per_s=None) for e in ranked[3:5]]
    lines = write_plans(TuneResult("small", 8, few + skipped, 1.0, 1, "local"), source, [(tmp_path / "c.yaml", 4)],
                        "ppsim tune small.yaml")
    assert lines == [f"not written: {tmp_path / 'c.yaml'} (plan 4: only 3 plans simulated, of 5 that fit)"]
    assert not (tmp_path / "b.yaml").exists() and not (tmp_path / "c.yaml").exists()


def tuned(**training: object) -> object:
    """gpt.yaml's 13B model as the plan p=2 d=32 t=1 on 64 A100s, 32 micro-batches of one sequence."""
    data = load(SCENARIOS / "gpt.yaml").model_dump(exclude_none=True)
    data["pipeline"].update(stages=2, microbatches=32, schedule="1f1b")
    data["data_parallel"] = 32
    data["training"].pop("global_batch", None)
    data["training"].update(training)
    return parse_scenario(data)


def test_the_hints_say_where_each_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = tuned()
    path = Path("plans/best.yaml")
    need = local_run_bytes(s)
    assert need is not None and need > 1000 * GIB  # the 13B model's 64 ranks on one machine
    monkeypatch.setattr(scenario_file, "machine_memory_bytes", lambda: 23.5 * GIB)
    lines = next_lines(s, path)
    assert lines[0] == "# next, on any machine: ppsim run plans/best.yaml; ppsim tui plans/best.yaml"
    assert lines[1] == ("# next, on the cluster it plans for (64 x a100-80g): ppexec run plans/best.yaml "
                        "--launcher deepspeed --hostfile HOSTFILE --out runs/best")
    assert lines[2] == (f"#   not on this machine (23.5 GiB): a local ppexec run puts all 64 ranks on its CPUs and "
                        f"needs about {need / GIB:,.1f} GiB")
    assert not any("ppexec run plans/best.yaml --out" in line for line in lines)  # never proposed bare here
    # a machine with the memory: the local run is offered, said to be all ranks on its CPUs
    monkeypatch.setattr(scenario_file, "machine_memory_bytes", lambda: 4096 * GIB)
    lines = next_lines(s, path)
    assert lines[2] == (f"# or on this machine, all 64 ranks on its CPUs (about {need / GIB:,.1f} of its 4,096.0 GiB): "
                        "ppexec run plans/best.yaml --out runs/best")
    assert not any("not on this machine" in line for line in lines)
    # a machine whose memory cannot be read: the figure, without a verdict
    monkeypatch.setattr(scenario_file, "machine_memory_bytes", lambda: None)
    assert next_lines(s, path)[2:] == [f"#   a local ppexec run puts all 64 ranks on one machine's CPUs and needs about "
                                       f"{need / GIB:,.1f} GiB"]
    # fp16 does not train on a CPU, whatever the memory
    data = s.model_dump(exclude_none=True)
    data["model"]["dtype"] = "fp16"
    assert next_lines(parse_scenario(data), path)[2] == "#   not on this machine: fp16 does not train on a CPU"


def test_the_written_header_carries_the_hints(small_yaml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_file, "machine_memory_bytes", lambda: 1 * GIB)
    best = tmp_path / "best.yaml"
    res = runner.invoke(app, ["tune", str(small_yaml), *ARGS, "--write", str(best)])
    assert res.exit_code == 0, res.output
    header = [line for line in best.read_text().splitlines() if line.startswith("#")]
    assert f"# next, on any machine: ppsim run {best}; ppsim tui {best}" in header
    assert any(line.startswith(f"# next, on the cluster it plans for (8 x a100-80g): ppexec run {best} --launcher "
                               "deepspeed --hostfile HOSTFILE") for line in header)
    assert any(line.startswith("#   not on this machine (1.0 GiB): a local ppexec run puts all 8 ranks") for line in header)
    assert "on any machine: ppsim run" in " ".join(res.stderr.split())


def _free_memory(free: int) -> Callable[[str], int]:
    """os.sysconf as on a machine with ``free`` bytes available (pages of 1 KiB)."""
    return lambda key: 1024 if key == "SC_PAGE_SIZE" else free // 1024


def test_the_local_estimate_is_the_one_ppexec_refuses_a_run_by(monkeypatch: pytest.MonkeyPatch) -> None:
    """local_run_bytes: 16 bytes a parameter (counted as ppexec's model counts them), the activations
    of every micro-batch, 400 MB a process; and ppexec's check refuses a run by the same figure."""
    pytest.importorskip("torch")
    import os

    from ppexec.launch.prepare import check_fits
    from ppexec.runtimes.model import parameter_count
    from ppsim.costs.layers import gpt_layers
    from ppsim.errors import PpsimError

    root = SCENARIOS
    for s in [tuned(), tuned(micro_batch=2), load(root / "tiny-cpu.yaml"), load(root / "small-cpu.yaml")]:
        assert s.model is not None
        world = s.pipeline.stages * s.data_parallel * s.tensor_parallel
        emb, block, head = gpt_layers(s.model, s.training.micro_batch)
        acts = (emb.activation_bytes + s.model.layers * block.activation_bytes + head.activation_bytes) * s.microbatches
        need = local_run_bytes(s)
        assert need == int(16 * parameter_count(s.model) + acts + world * 400e6)
        monkeypatch.setattr(os, "sysconf", _free_memory(need + 2**20))
        check_fits(s, world)  # fits: not refused
        monkeypatch.setattr(os, "sysconf", _free_memory(need - 2**20))
        with pytest.raises(PpsimError, match=f"about {need / 2**30:.1f} GiB"):
            check_fits(s, world)
        monkeypatch.undo()
