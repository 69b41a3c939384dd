"""bench/published_moe.py: the MoE development set's rows become scenarios by the bench's rules
(architecture, layout string, experts), the published step is the table's tokens/s converted by
hand, and the bench runs on a subset."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "published_moe.py"


def test_megatrons_layout_strings_give_blocks_per_virtual_stage() -> None:
    b = bench_module("published_moe")
    assert b.layout_partition("Et*4|(t*4|)*14tmL") == [4] * 15 + [1]
    assert b.layout_partition("Et|(tt|)*30mL   (list form in the recipe: 32 stages)") == [1] + [2] * 30 + [0]
    assert b.layout_partition("Et*8|(t*8|)*6t*5mL") == [8] * 7 + [5]
    assert sum(b.layout_partition("Et*4|(t*4|)*14tmL")) == 61  # DeepSeek-V3's layers


def test_a_row_becomes_the_scenario_its_recipe_describes() -> None:
    """DeepSeek-V3 on 256 GB300s (26.08, MXFP8): TP1 PP2 VP8 EP32, 16 virtual stages from the layout
    string, 128 data-parallel replicas; GBS 4,096 of 4,096 tokens at 6,288 tokens/s/GPU is a
    10.42 s step; multi-head latent attention, 3 dense layers, one shared expert."""
    b = bench_module("published_moe")
    rows = {r["id"]: r for r in yaml.safe_load(b.DATA.read_text())}
    row = rows["mb-26.08-pretrain-deepseek_v3-gb300-mxfp8-256g"]
    data, assumed = b.scenario_data(row)
    assert (data["expert_parallel"], data["data_parallel"], data["pipeline"]["chunks"]) == (32, 128, 8)
    assert data["pipeline"]["partition"] == [4] * 15 + [1]
    moe = data["model"]["moe"]
    assert (moe["experts"], moe["top_k"], moe["dense_layers"], moe["shared_experts"]) == (256, 8, 3, 1)
    assert data["model"]["mla"]["kv_lora_rank"] == 512 and data["training"]["fp8"] == "mxfp8"
    assert b.dense.published_step_s(row) == pytest.approx(4096 * 4096 / (6288 * 256))
    assert data["model"]["mtp_layers"] == 1  # the recipe's multi-token prediction module
    assert b.unexpressible(next(r for r in rows.values() if r["model"] == "DeepSeekV4-Flash")).startswith(
        "the sources do not give")


def test_nemotron_3_super_rows_take_the_architecture_found_since() -> None:
    """Nemotron 3 Super (its rows' sources leave it to Hugging Face): Megatron-LM's release test
    config, a latent MoE (1,024 wide), its two MTP depths one repeated `*E` module."""
    b = bench_module("published_moe")
    row = next(r for r in yaml.safe_load(b.DATA.read_text()) if r["model"] == "Nemotron-3-Super")
    assert row["architecture"]["num_layers"] is None and b.unexpressible(row) is None
    data, _ = b.scenario_data(row)
    model = data["model"]
    assert (model["layers"], model["hidden"], model["moe"]["latent"], model["moe"]["top_k"]) == (88, 4096, 1024, 22)
    assert model["mtp_layers"] == 2 and model["mtp_repeated"] is True
    assert model["pattern"].count("E") == 40 and model["pattern"].count("*") == 8


def test_nemotron_3_nano_rows_are_its_hybrid_pattern() -> None:
    b = bench_module("published_moe")
    row = next(r for r in yaml.safe_load(b.DATA.read_text()) if r["model"] == "Nemotron-3-Nano")
    assert b.unexpressible(row) is None
    data, assumed = b.scenario_data(row)
    model = data["model"]
    assert model["pattern"] == row["architecture"]["hybrid_layer_pattern"] and model["vocab"] == 131072
    assert model["mamba"] == {"heads": 64, "head_dim": 64, "state": 128, "groups": 8}
    assert any("vocabulary of 131,072" in a for a in assumed)


def test_gpt_oss_rows_attend_through_their_windows() -> None:
    """GPT-OSS 120B: window_size (128, 0) on all layers but every window_attn_skip_freq = 2nd."""
    b = bench_module("published_moe")
    row = next(r for r in yaml.safe_load(b.DATA.read_text()) if r["model"] == "GPT-OSS-120B")
    assert b.unexpressible(row) is None
    model = b.scenario_data(row)[0]["model"]
    assert (model["attention_window"], model["full_attention_every"], model["head_dim"]) == (128, 2, 64)


def test_the_bench_predicts_a_subset_and_says_what_it_assumed(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    res = subprocess.run([sys.executable, str(BENCH), "--rows", "mb-26.08-pretrain-qwen3", "--json", str(out)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["rows"] and all(r["predicted_step_s"] > 0 for r in doc["rows"])
    assert "assumed where a row's sources are silent" in res.stdout
    # the summary by model: each model's rows counted, with their median error
    lines = res.stdout.split("by model:")[1].splitlines()[1:]
    for model in {r["model"] for r in doc["rows"]}:
        errors = sorted(r["error"] for r in doc["rows"] if r["model"] == model)
        line = next(x for x in lines if x.split()[0] == model)
        assert int(line.split()[1]) == len(errors)
        assert f"{100 * statistics.median(errors):+.1f} %" in line


def test_a_row_recomputes_the_modules_its_recipe_lists() -> None:
    """Megatron's selective recomputation by module: the priced modules as the recipe lists them,
    the attention core where it lists none, nothing for an empty list; the others said."""
    b = bench_module("published_moe")
    rows = yaml.safe_load(b.DATA.read_text())

    def first(modules: Any) -> dict[str, Any]:
        return next(r for r in rows if (r.get("recipe_settings") or {}).get("recompute_granularity") == "selective"
                    and (r["recipe_settings"].get("recompute_modules")) == modules and b.unexpressible(r) is None)

    data, _ = b.scenario_data(first(["mla_up_proj"]))
    assert data["training"]["recompute"] == "selective" and data["training"]["recompute_modules"] == ["mla_up_proj"]
    row = first(["mla_up_proj"])
    data, _ = b.scenario_data({**row, "recipe_settings": {**row["recipe_settings"], "recompute_modules": None}})
    assert data["training"]["recompute_modules"] == ["core_attn"]
    data, _ = b.scenario_data(first([]))
    assert "recompute_modules" not in data["training"] and data["training"].get("recompute", "none") == "none"
    data, assumed = b.scenario_data(first(["mla_up_proj", "mlp"]))
    assert data["training"]["recompute_modules"] == ["mla_up_proj", "mlp"]  # the dense layers' MLPs, priced
    assert not any("priced as none" in a for a in assumed)
    moe_row = next(r for r in rows if "moe" in ((r.get("recipe_settings") or {}).get("recompute_modules") or [])
                   and b.unexpressible(r) is None)
    data, assumed = b.scenario_data(moe_row)
    assert data["training"]["recompute_modules"] == moe_row["recipe_settings"]["recompute_modules"]  # moe, priced
    assert "moe" in data["training"]["recompute_modules"] and not any("priced as none" in a for a in assumed)


@pytest.mark.parametrize(("row_id", "graphs", "fused"), [
    ("mb-26.06-pretrain-deepseek_v3-gb300-mxfp8-256g", ["full_iteration"], True),  # its whole step graphed
    ("mb-26.04-pretrain-gpt_oss_120b-gb300-bf16-64g", ["attn", "moe_router", "moe_preprocess"], False),
    ("mb-26.06-pretrain-nemotron_3_nano-gb300-mxfp8-8g", ["attn", "mamba", "moe_router", "moe_preprocess"], False),
    ("mb-26.02-pretrain-qwen3_30b_a3b-h100-fp8-16g", [], False),  # no graphs
])
def test_a_row_launches_what_its_recipe_graphs_and_fuses(row_id: str, graphs: list[str], fused: bool) -> None:
    """The recipe's CUDA graph scopes (TE-scoped, or the whole iteration), its router fusion and
    Transformer Engine's fused grouped MLP become the scenario's, which prices the host's launches."""
    b = bench_module("published_moe")
    row = next(r for r in yaml.safe_load(b.DATA.read_text()) if r["id"] == row_id)
    training = b.scenario_data(row)[0]["training"]
    assert training["cuda_graphs"] == graphs
    assert training["fused_grouped_mlp"] is fused
    assert training["moe_router_fusion"] is bool(row["recipe_settings"]["moe_router_fusion"])


def test_the_legacy_per_layer_graphs_leave_the_experts_eager() -> None:
    b = bench_module("published_moe")
    row = next(r for r in yaml.safe_load(b.DATA.read_text())
               if str(r["recipe_settings"]["cuda_graph_impl"]).startswith("enable_cuda_graph=True"))
    data, assumed = b.scenario_data(row)
    assert data["training"]["cuda_graphs"][:3] == ["attn", "moe_router", "moe_preprocess"]
    assert any("legacy per-layer CUDA graphs" in a for a in assumed)
