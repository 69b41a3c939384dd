"""The fused attention kernel's measured figures by shape: the catalogue's points come from NVIDIA's
published cuDNN benchmark rows (bench/data/published_attention.csv) by one rule, and a kernel's
fraction of peak is looked up by its head dim and the keys its queries attend."""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import device_entry
from ppsim.costs.analytic import matmul_ms
from ppsim.costs.gemms import attended_keys, block_gemms
from ppsim.errors import ScenarioError
from ppsim.inputs.hardware import FusedAttention, get_device, read_devices

RAW = Path(__file__).resolve().parents[2] / "bench" / "data" / "published_attention.csv"
#: the measured device's bf16 peak (TFLOP/s), and the catalogue entries its fractions price
MEASURED = {"gb200": (2500.0, ("b200", "gb200")), "gb300": (2500.0, ("b300", "gb300")),
            "h200": (989.0, ("h100-sxm", "h800", "h200"))}


def entries_computed(seq_len: int, window: int) -> float:
    """The score entries a causal kernel computes per sequence and head, as cuDNN's benchmark counts
    them: the lower triangle with its diagonal, or a window of w keys before each query (w(w+1)/2
    for the first w queries, w for each later one)."""
    if window:
        return window * (window + 1) / 2 + (seq_len - window) * window
    return seq_len * (seq_len + 1) / 2


def derived_points() -> dict[str, list[tuple[float, float, float, float]]]:
    """Each measured GPU's [head dim, keys, forward, backward] points from the raw rows: FLOPs
    2 x entries x (d_qk + d_v) forward and 2 x entries x (3 d_qk + 2 d_v) backward over the time and
    the peak; head dim (d_qk + d_v) / 2; keys, entries per query; a window's lengths one point, the
    medians (its keys per query barely move)."""
    passes: dict[tuple[str, float, int], dict[int, dict[str, tuple[float, float]]]] = defaultdict(dict)
    for row in csv.DictReader(RAW.open()):
        seq, window = int(row["seq_len"]), int(row["window"] or 0)
        dqk, dv = int(row["head_dim_qk"]), int(row["head_dim_v"])
        entries = int(row["batch"]) * int(row["q_heads"]) * entries_computed(seq, window)
        flops = 2 * entries * ((dqk + dv) if row["pass"] == "forward" else (3 * dqk + 2 * dv))
        tflops = flops / (float(row["time_ms"]) * 1e9)
        assert tflops == pytest.approx(float(row["tflops"]), rel=5e-3)  # the counting is cuDNN's own (times to 1 us)
        key = (row["gpu"], (dqk + dv) / 2, window)
        passes[key].setdefault(seq, {})[row["pass"]] = (entries_computed(seq, window) / seq,
                                                        tflops / MEASURED[row["gpu"]][0])
    found: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for (gpu, dim, window), by_seq in sorted(passes.items()):
        rows = [(v["forward"][0], v["forward"][1], v["backward"][1]) for _, v in sorted(by_seq.items())]
        if window:
            rows = [tuple(statistics.median(r[i] for r in rows) for i in range(3))]  # type: ignore[misc]
        found[gpu] += [(dim, round(keys), round(fwd, 3), round(bwd, 3)) for keys, fwd, bwd in rows]
    return found


def test_the_catalogue_s_fused_attention_points_are_cudnn_s_published_rows() -> None:
    derived = derived_points()
    assert set(derived) == set(MEASURED)
    for gpu, (_, entries) in MEASURED.items():
        for name in entries:
            fused = get_device(name).flash_attention
            assert fused is not None and sorted(fused.points) == sorted(derived[gpu]), name
            assert "cudnn-frontend" in fused.source and fused.dtypes == ("bf16",)


def test_a_kernel_is_priced_at_its_head_dim_and_the_keys_its_queries_attend() -> None:
    """Between two measured lengths, log-linear in the keys; between two measured head dims, in the
    head dim; a window's few keys at the only head dim measured there; beyond every measured
    length, the end's figure."""
    gb200 = get_device("gb200").flash_attention
    assert gb200 is not None
    assert gb200.fraction(128, 2048, backward=False) == pytest.approx(0.563)
    assert gb200.fraction(128, 2048, backward=True) == pytest.approx(0.459)
    # 2,896 keys: halfway (in log) between 2,048 (0.563) and 4,096 (0.630)
    assert gb200.fraction(128, 2048 * 2 ** 0.5, backward=False) == pytest.approx((0.563 + 0.630) / 2)
    # head dim 144, log-linear between 128 (0.630) and 160 (0.634): weight log(144/128) / log(160/128)
    w = 0.5278195
    assert gb200.fraction(144, 4096, backward=False) == pytest.approx(0.630 + w * (0.634 - 0.630), rel=1e-6)
    # GPT-OSS's window of 128: only head dim 64 was measured at so few keys (0.064 of peak)
    assert gb200.fraction(64, attended_keys(4096, 128), backward=False) == pytest.approx(0.064)
    # head dim 64 over 2,048 keys: no measurement of 64 spans them; 128's, the nearest that does
    assert gb200.fraction(64, 2048, backward=False) == pytest.approx(0.563)
    # beyond 16,384 keys the longest measurement holds
    assert gb200.fraction(128, 500_000, backward=True) == pytest.approx(0.490)
    one = FusedAttention(source="x", forward=0.5, backward=0.3)
    assert one.fraction(64, 100, backward=False) == 0.5 and one.fraction(256, 1e6, backward=True) == 0.3


def test_a_sliding_window_block_pays_the_window_kernel_s_measured_speed() -> None:
    """GPT-OSS's windowed layer (64 heads of 64, window 128, 4,096 tokens): its score and context
    matmuls run the band, 2 x 4096 x 126 x 64 x 64 x 2 FLOPs forward, at 0.064 of the GB200's 2,500
    TFLOP/s, eight times slower per FLOP than a causal 4,096-token layer's kernel (0.563)."""
    gb200 = get_device("gb200")
    keys = attended_keys(4096, 128)
    gemms = block_gemms(4096, 1, 2880, 64, 8, 2880, head_dim=64, flash_attention=True, window=128)
    core = tuple(g for g in gemms.forward if g.head_dim)
    assert {(g.head_dim, g.keys) for g in core} == {(64, keys)}
    flops = 2 * 2 * 4096 * keys * 64 * 64
    assert sum(g.flops for g in core) == pytest.approx(flops)
    assert matmul_ms(core, gb200, "bf16", flash_attention=True) == pytest.approx(flops / (2500e9 * 0.064))


def test_multi_head_latent_attention_s_kernel_is_looked_up_at_its_mean_head_dim() -> None:
    """DeepSeek-V3's heads (queries and keys of 192, values of 128) run one kernel: both matmuls are
    priced at head dim 160, the shape cuDNN measured for them."""
    gemms = block_gemms(4096, 1, 7168, 128, 128, 2048, flash_attention=True, score_dims=(192, 128),
                        attention_linears=[(7168, 1536)])
    core = [g for g in gemms.forward if g.head_dim]
    assert [g.head_dim for g in core] == [160, 160] and [g.n for g in core] == [192, 2048]
    unfused = [g for g in block_gemms(4096, 1, 7168, 128, 128, 2048, score_dims=(192, 128),
                                      attention_linears=[(7168, 1536)]).forward if g.head_dim]
    assert [g.head_dim for g in unfused] == [192, 128]  # the unfused matmuls each by its own width


@pytest.mark.parametrize("points, message", [
    ("[[128, 1024, 0.5]]", "each row is"),
    ("[[128, 1024, 1.5, 0.3]]", "each row is"),
    ("[[0, 1024, 0.5, 0.3]]", "each row is"),
    ("[]", "must be a list"),
    ("[[128, 1024, 0.5, 0.3], [128, 1024, 0.6, 0.4]]", "twice"),
])
def test_a_device_file_s_fused_attention_points_are_checked(tmp_path: Path, points: str, message: str) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(device_entry(f"  flash_attention: {{source: x, points: {points}}}"))
    with pytest.raises(ScenarioError, match=message):
        read_devices(path)
    path.write_text(path.read_text().replace(f"points: {points}", "points: [[128, 1024, 0.5, 0.3]], forward: 0.5"))
    with pytest.raises(ScenarioError, match="give one of them"):
        read_devices(path)
