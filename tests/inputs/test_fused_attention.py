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


def assert_cudnn_counting(tflops: float, row: dict[str, str]) -> None:
    """The counting is cuDNN's own: its TFLOP/s, printed whole, from times printed to 1 us (the two
    roundings' errors, and 0.1 % besides)."""
    printed, time_ms = float(row["tflops"]), float(row["time_ms"])
    assert abs(tflops - printed) <= 0.5 + printed * (0.5e-3 / time_ms + 1e-3), row


def derived_points(dtype: str = "bf16") -> dict[str, list[tuple[float, float, float, float]]]:
    """Each measured GPU's [head dim, keys, forward, backward] points in ``dtype`` from the raw rows:
    FLOPs 2 x entries x (d_qk + d_v) forward and 2 x entries x (3 d_qk + 2 d_v) backward over the
    time and the bf16 peak; head dim (d_qk + d_v) / 2; keys, entries per query; a window's lengths
    one point, the medians (its keys per query barely move)."""
    passes: dict[tuple[str, float, int], dict[int, dict[str, tuple[float, float]]]] = defaultdict(dict)
    for row in csv.DictReader(RAW.open()):
        if row["dtype"] != dtype:
            continue
        seq, window = int(row["seq_len"]), int(row["window"] or 0)
        dqk, dv = int(row["head_dim_qk"]), int(row["head_dim_v"])
        entries = int(row["batch"]) * int(row["q_heads"]) * entries_computed(seq, window)
        flops = 2 * entries * ((dqk + dv) if row["pass"] == "forward" else (3 * dqk + 2 * dv))
        tflops = flops / (float(row["time_ms"]) * 1e9)
        assert_cudnn_counting(tflops, row)
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


def derived_window_backward(dtype: str) -> dict[str, list[tuple[float, float]]]:
    """Each measured GPU's [keys, backward] points of a window's backward in ``dtype`` read as the
    whole causal triangle: its FLOPs counted on the triangle's entries (keys: the causal half)."""
    found: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in csv.DictReader(RAW.open()):
        if row["dtype"] != dtype or not row["window"] or row["pass"] != "backward":
            continue
        seq, dqk, dv = int(row["seq_len"]), int(row["head_dim_qk"]), int(row["head_dim_v"])
        flops = 2 * int(row["batch"]) * int(row["q_heads"]) * entries_computed(seq, 0) * (3 * dqk + 2 * dv)
        found[row["gpu"]].append((round(entries_computed(seq, 0) / seq),
                                  round(flops / (float(row["time_ms"]) * 1e9) / MEASURED[row["gpu"]][0], 3)))
    return {gpu: sorted(points) for gpu, points in found.items()}


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


def test_the_fp8_attention_kernels_are_cudnn_s_fp8_and_mxfp8_rows() -> None:
    """cuDNN's FP8 attention, per-tensor (``cudnn_fp8``) and MXFP8 (``cudnn_mxfp8``): the same rule
    on the same benchmark's FP8 rows, fractions of the bf16 peak up to twice it (FP8 inputs); a
    window's backward read on the whole causal triangle (its time grows as the sequence squared);
    the H200 measured per-tensor FP8 with Llama 3.1's heads only."""
    for dtype, kernel in (("fp8", "cudnn_fp8"), ("mxfp8", "cudnn_mxfp8")):
        derived, windows = derived_points(dtype), derived_window_backward(dtype)
        assert set(derived) == ({"gb200", "gb300", "h200"} if dtype == "fp8" else {"gb200", "gb300"})
        for gpu in derived:
            for name in MEASURED[gpu][1]:
                fused = get_device(name).fused_attention(kernel)
                assert fused is not None and sorted(fused.points) == sorted(derived[gpu]), (name, kernel)
                assert fused.window_backward == tuple(windows.get(gpu, ())), (name, kernel)
                assert fused.inputs == "fp8" and fused.ceiling == 2.0 and "cudnn-frontend" in fused.source
    gb200 = get_device("gb200").fused_attention("cudnn_mxfp8")
    assert gb200 is not None and gb200.window_backward[0] == (1024, 0.214)  # 2,048 tokens: 0.642 ms
    assert max(p[2] for p in get_device("gb300").fused_attention("cudnn_fp8").points) > 1  # type: ignore[union-attr]


def test_a_window_s_fp8_backward_is_priced_on_its_whole_causal_triangle() -> None:
    """GPT-OSS's window of 128 at 4,096 tokens on a GB200 in MXFP8: the backward's GEMMs run the
    band's FLOPs times (s / 2) / keys, at the window_backward figure at s / 2 = 2,048 keys (0.264);
    under the flat figure, that figure's speed over cuDNN's bf16 one at 2,048 keys (head dim 128's,
    the nearest measured: 0.459) scales the device's 0.499; the forward runs the band at its own
    point (0.065); bf16 runs the band both ways."""
    gb200 = get_device("gb200")
    s, window = 4096, 128
    keys = attended_keys(s, window)
    core = block_gemms(s, 1, 2880, 64, 8, 2880, head_dim=64, flash_attention=True, window=window, mlp=False)
    band = [g for g in core.input_grad if g.head_dim]
    assert band and all(g.keys == keys for g in band)
    flops = sum(g.flops for g in band)
    measured = matmul_ms(tuple(band), gb200, "bf16", flash_attention=True, backward=True, kernel="cudnn_mxfp8")
    assert measured == pytest.approx(flops * (s / 2) / keys / (2500e9 * 0.264))
    flat = matmul_ms(tuple(band), gb200, "bf16", flash_attention=True, backward=True, kernel="cudnn_mxfp8",
                     efficiency=gb200.flat_efficiency)
    assert flat == pytest.approx(flops * (s / 2) / keys / (2500e9 * gb200.flat_efficiency("bf16") * 0.264 / 0.459))
    forward = tuple(g for g in core.forward if g.head_dim)
    assert matmul_ms(forward, gb200, "bf16", flash_attention=True, kernel="cudnn_mxfp8") == pytest.approx(
        sum(g.flops for g in forward) / (2500e9 * 0.065))
    assert matmul_ms(tuple(band), gb200, "bf16", flash_attention=True, backward=True) == pytest.approx(
        flops / (2500e9 * 0.074))


def test_a_window_s_fp8_backward_under_context_parallelism_runs_its_queries_every_key() -> None:
    """Context parallelism splits the queries, not the keys each sees: a rank's half of the queries
    runs half the triangle at the same keys, so the ranks' backward adds up to one rank's without it."""
    gb200 = get_device("gb200")

    def backward_ms(cp: int) -> float:
        core = block_gemms(8192 // cp, 1, 2880, 64, 8, 2880, head_dim=64, flash_attention=True, window=128,
                           mlp=False, kv_len=8192)
        band = tuple(g for g in core.input_grad if g.head_dim)
        assert all(g.causal_keys == 4096 for g in band)
        return matmul_ms(band, gb200, "bf16", flash_attention=True, backward=True, kernel="cudnn_mxfp8")

    assert 2 * backward_ms(2) == pytest.approx(backward_ms(1))
