"""bench/device_kernels.py: the MoE pieces it times are the shapes ppsim prices, priced as ppsim
prices them; on a CPU every section runs small or says why it is skipped."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, bench_module

BENCH = ROOT / "bench" / "device_kernels.py"


def test_qwen3_s_busiest_device_is_its_scenario_s_layout() -> None:
    """scenarios/qwen3-30b-a3b.yaml: one 4,096-token sequence a micro-batch, EP 16 of 128 experts
    (8 local), 8 copies a token: 4,096 tokens for each local expert (balanced), 768 wide, SwiGLU."""
    p = bench_module("device_kernels").moe_pieces("qwen3-30b-a3b.yaml")
    assert (p["tokens"], p["local_experts"], p["per_expert"], p["ffn"], p["swiglu"]) == (4096, 8, 4096, 768, True)
    assert (p["hidden"], p["width"], p["experts"], p["top_k"], p["permutes"]) == (2048, 2048, 128, 8, 1)


def test_the_pieces_are_priced_as_ppsim_prices_them() -> None:
    """On the H200 (989 TFLOP/s bf16 at the flat 0.55, 4,800 GB/s): the router 2 T h E FLOPs, the
    experts 8 x (2 n h 2f + 2 n f h), the permutation 4 k T h values of 2 bytes each way once."""
    from ppsim.inputs.hardware import get_device

    b = bench_module("device_kernels")
    h200 = get_device("h200")
    priced = b.priced_ms(b.moe_pieces("qwen3-30b-a3b.yaml"), h200)
    rate = 989e12 * h200.flat_efficiency("bf16") / 1e3
    assert priced["router"] == pytest.approx(2 * 4096 * 2048 * 128 / rate)
    assert priced["experts"] == pytest.approx(8 * (2 * 4096 * 2048 * 1536 + 2 * 4096 * 768 * 2048) / rate)
    assert priced["permute"] == pytest.approx(4 * 8 * 4096 * 2048 * 2 / (h200.hbm_gb_s * 1e6))


def test_on_a_cpu_every_section_runs_small_or_says_why_not(tmp_path) -> None:
    subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--quick", "--out", str(tmp_path)],
                   capture_output=True, text=True, check=True, cwd=ROOT, timeout=300)
    got = yaml.safe_load((tmp_path / "device-kernels.yaml").read_text())
    assert got["best_matmul"]["bf16"]["tflops"] > 0 and "skipped" in got["best_matmul"]["fp8"]
    assert "skipped" in got["fp8_gemms"] and "skipped" in got["beside_copies"]
    assert [*got["moe_layer"]] == ["Qwen3-30B-A3B", "GPT-OSS-120B", "Nemotron 3 Nano", "DeepSeek-V3"]
    for layer in got["moe_layer"].values():
        assert set(layer["measured_ms"]) == set(layer["priced_ms"]) == {"router", "permute", "experts"}
        assert all(ms > 0 for ms in layer["measured_ms"].values())
    assert got["shortest_kernel"]["eager_us"] > 0 and "graph_us" not in got["shortest_kernel"]
    host = got["host_launches"]
    assert host["layers"] == 10 and host["forward_us"] > 0 and host["backward_us"] > 0 and host["round_trip_us"] > 0
    assert host["backward_over_forward"] == pytest.approx(host["backward_us"] / host["forward_us"], rel=1e-2)
    assert got["catalogue"]["flat_efficiency"] == {"bf16": 0.55, "fp8": 0.5028}  # 0.685 x 1,453.4 / 1,979
    attention = got["attention"]
    assert [(x["head_dim"], x["seq"]) for x in attention["causal"]] == [(64, 128), (64, 256), (128, 128), (128, 256)]
    assert [x["cp"] for x in attention["ring"]] == [2]
    for row in attention["causal"] + attention["ring"]:
        assert all(ms > 0 for ms in row["ms"].values()) and all(f > 0 for f in row["of_peak"].values())
    # head dim 64 at 64-128 keys: the h200's only head-dim-64 point (a 1,024 window) prices it
    assert attention["causal"][0]["priced_of_peak"] == {"forward": 0.353, "backward": 0.302}


def test_a_ring_of_kernels_computes_the_entries_ppsim_prices_a_rank_for() -> None:
    """A rank of a ring of cp over s tokens: its causal diagonal block of 2c queries and cp - 1 blocks
    of 2c queries on c keys (c = s / 2cp) hold as many score entries as its s / cp queries on s / 2
    keys, the causal half that ppsim prices."""
    b = bench_module("device_kernels")
    s = b.RING_SEQ
    for cp in b.RING_CP:
        c = s // (2 * cp)
        assert (2 * c) * (2 * c) / 2 + (cp - 1) * (2 * c) * c == (s // cp) * (s / 2)
