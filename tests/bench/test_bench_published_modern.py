"""bench/published_modern.py: the development set's rows are read, turned into scenarios by the
bench's rules and predicted; the published step is the table's tokens/s converted by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "published_modern.py"


def test_every_row_names_its_source_and_its_published_figures() -> None:
    rows = yaml.safe_load((ROOT / "bench" / "data" / "published_modern.yaml").read_text())
    assert len(rows) == 118 and len({r["id"] for r in rows}) == 118
    for r in rows:
        assert "@" in r["source"] and "#L" in r["source"], r["id"]  # repository@commit:file#Lline
        assert r["tokens_per_s_per_gpu"] or r["model_tflops_per_gpu"], r["id"]


def test_a_row_becomes_the_scenario_its_recipe_describes() -> None:
    """The 26.04.01 H100 405B row: TP8 PP8 CP2 VP8 on 1,024 GPUs is 8 replicas; GBS 1,536 of 8,192
    tokens at 328 tokens/s/GPU is a 37.46 s step; the embedding and loss count as layers."""
    b = bench_module("published_modern")
    rows = {r["id"]: r for r in yaml.safe_load(b.DATA.read_text())}
    row = rows["mb-26.04.01-pretrain-llama3.1_405b-h100-fp8-1024g"]
    data, _ = b.scenario_data(row)
    assert (data["tensor_parallel"], data["context_parallel"], data["data_parallel"]) == (8, 2, 8)
    assert data["pipeline"]["partition"] == [1] + [2] * 62 + [1]
    assert data["training"]["fp8"] == "tensorwise" and data["training"]["low_precision_params"]
    assert b.published_step_s(row) == pytest.approx(1536 * 8192 / (328 * 1024))


def test_the_bench_predicts_the_nemo_rows_and_says_what_it_assumed(tmp_path: Path) -> None:
    out = tmp_path / "modern.json"
    res = subprocess.run([sys.executable, str(BENCH), "--rows", "nemo-24.07", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 12 and all(r["predicted_step_s"] > 0 for r in doc["rows"])
    assert "assumed where a row's sources are silent" in res.stdout
    assert all(r["assumed"] for r in doc["rows"] if r["id"].startswith("nemo-24.07-pretrain-llama2"))
    # the summary by system: NeMo 24.07's rows are all H100s
    line = next(x for x in res.stdout.splitlines() if x.strip().startswith("H100"))
    errors = sorted(r["error"] for r in doc["rows"])
    assert line.split()[1] == "12" and f"{100 * (errors[5] + errors[6]) / 2:+.1f} %" in line


def test_nemos_flop_count_of_its_time_gives_the_tflops_its_tables_printed_beside_tokens() -> None:
    """Where NeMo 24.07 published both tokens/s and model TFLOP/s, the bench's count of NeMo's FLOPs
    (full s x s attention) turns one into the other within the tables' rounding: the count the
    long-sequence rows, which print TFLOP/s alone, are read by."""
    b = bench_module("published_modern")
    rows = [r for r in yaml.safe_load(b.DATA.read_text()) if r["release"] == "24.07"]
    checked = 0
    for r in rows:
        arch = b.MODELS[b.ALIASES.get(r["model"], r["model"])]
        if arch.llama and "Nemotron" not in r["model"]:  # NeMo's llama2 / llama3 formulas
            tflops = b.nemo_flops_per_token(arch, r["seq_len"]) * r["tokens_per_s_per_gpu"] / 1e12
            assert tflops == pytest.approx(r["model_tflops_per_gpu"], rel=0.01), r["id"]
            checked += 1
    assert checked == 5


def test_a_long_sequence_row_takes_its_step_from_its_tflops_and_recompute_is_read_from_the_recipe() -> None:
    b = bench_module("published_modern")
    rows = {r["id"]: r for r in yaml.safe_load(b.DATA.read_text())}
    row = rows["nemo-24.03.01.framework-pretrain-llama2_7b-h100-1024g-seq1024k"]
    arch = b.MODELS["LLAMA2-7B"]
    want = b.nemo_flops_per_token(arch, 1048576) * 4 * 1048576 / (536e12 * 1024)
    assert b.unexpressible(row) is None and b.published_step_s(row) == pytest.approx(want)
    data, assumed = b.scenario_data(row)
    assert data["context_parallel"] == 32 and data["training"]["micro_batch"] == 1
    assert any("NeMo's FLOP count" in a for a in assumed)
    partial = b.scenario_data(rows["mb-25.11-pretrain-llama3_8b-h100-fp8_cs-8g"])[0]["training"]
    assert (partial["recompute"], partial["recompute_layers"]) == ("full", 5)
