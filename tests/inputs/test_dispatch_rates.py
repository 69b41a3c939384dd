"""DeepEP's and HybridEP's dispatch (``training.moe_dispatcher``): a token once per destination device
and node, at the share of each link's rate the kernels were measured to reach
(``dispatch_measured``, derived here from the published rows of bench/data/ep_dispatch.yaml)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, device_entry, refused_device_file
from ppsim.costs.links import scenario_links
from ppsim.inputs import cluster as cl
from ppsim.inputs.hardware import DispatchRate, get_device, read_devices
from ppsim.inputs.scenario import parse_scenario
from ppsim.prediction.path import stage_to_rank

DATA = yaml.safe_load((ROOT / "bench" / "data" / "ep_dispatch.yaml").read_text())


def _nvlink_share(table: dict) -> float:
    """The rule of the data file: the mean over its rows of (dispatch + combine) / 2 x (n - 1) / n
    over the link's rate."""
    rate = DATA["link_gb_s"][table["link"]]
    return sum((d + c) / 2 * (n - 1) / n / rate for n, _, d, c in table["rows"]) / len(table["rows"])


def _network_points(table: dict) -> list[tuple[float, float]]:
    """Per node count D: (dispatch + combine) / 2 x (D - 1) / D over the NIC's rate."""
    rate, per_node = DATA["link_gb_s"][table["link"]], table["ranks_per_node"]
    return [(n / per_node, (d + c) / 2 * (n / per_node - 1) / (n / per_node) / rate) for n, _, d, c in table["rows"]]


@pytest.mark.parametrize(("devices", "dispatcher", "nvlink", "network"), [
    (("h100-sxm", "h200", "h800"), "hybridep", "h100", "h100_network"),
    (("h100-sxm", "h200", "h800"), "deepep", "h800", "h800_network"),
    (("b200", "b300"), "hybridep", "b200", None),
    (("b200", "b300"), "deepep", "b200", None),
    (("gb200", "gb300"), "hybridep", "gb200", None),
    (("gb200", "gb300"), "deepep", "gb200", None),
])
def test_the_catalogues_dispatcher_shares_follow_from_the_published_rows(
        devices: tuple[str, ...], dispatcher: str, nvlink: str, network: str | None) -> None:
    """HybridEP reaches about half of NVLink 5 on Blackwell (0.509 over a GB200 rack, 0.519 on a B200
    board), DeepEP 0.40-0.44; on Hopper 0.72 and 0.68, and 0.43-0.88 of a ConnectX-7 by node count."""
    want_nvlink = _nvlink_share(DATA[dispatcher][nvlink])
    want_network = _network_points(DATA[dispatcher][network]) if network else []
    for name in devices:
        rate = get_device(name).dispatch_rate(dispatcher)
        assert rate is not None, name
        assert rate.nvlink == pytest.approx(want_nvlink, abs=1e-3)
        assert len(rate.network) == len(want_network)
        for (d, share), (want_d, want_share) in zip(rate.network, want_network, strict=True):
            assert d == want_d and share == pytest.approx(want_share, abs=1e-3)
    assert get_device("a100-80g").dispatch_rate(dispatcher) is None  # nothing measured: the links' rates


def test_a_nics_share_is_linear_between_its_measured_node_counts_and_flat_beyond() -> None:
    rate = DispatchRate(0.5, "x", ((2.0, 0.4), (4.0, 0.8), (8.0, 0.9)))
    assert rate.network_share(2) == 0.4 and rate.network_share(1) == 0.4
    assert rate.network_share(3) == pytest.approx(0.6)
    assert rate.network_share(6) == pytest.approx(0.85)
    assert rate.network_share(16) == 0.9
    assert DispatchRate(0.5, "x").network_share(4) == 1.0


def test_a_token_goes_once_to_each_device_its_experts_are_on() -> None:
    """4 experts, 2 a device, top-2: the two experts share a device with probability C(2,2)/C(4,2) =
    1/6 each way, so a token reaches 2 (1 - 1/6) = 5/3 devices for its 2 copies: 5/6 of them.
    Qwen3-30B-A3B's 128 experts top-8 over 16 devices: 16 (1 - C(120,8)/C(128,8)) / 8."""
    assert cl.NodeDispatch(2, experts=4).device_copies(2) == pytest.approx(5 / 6)
    want = 16 * (1 - math.comb(120, 8) / math.comb(128, 8)) / 8
    assert cl.NodeDispatch(8, experts=128).device_copies(16) == pytest.approx(want)
    assert 0.82 < want < 0.83
    assert cl.NodeDispatch(8).device_copies(16) == 1.0  # experts unknown: a message per copy
    assert cl.NodeDispatch(8, experts=128).device_copies(1) == 1.0


def test_each_link_carries_the_dispatchers_bytes_at_its_measured_share() -> None:
    """One group of 16 over 2 nodes of 8 (NVLink 450, NIC 50): a device's NVLink carries its 7/15
    own-node share plus 7/8 of the 8/15 it forwards, once per device (the factor above), over the
    kernels' 0.717 of the link; its NIC the 8/15 x (1 - 1/2^8) / 4 crossing once per node, over 0.539."""
    nvlink, nic = cl.LinkSpeed(450, 3), cl.LinkSpeed(50, 5)
    c = cl.Cluster(nodes=2, devices_per_node=8, intra=nvlink, inter=nic, nics_per_node=8)
    rate = DispatchRate(0.717, "x", ((2.0, 0.539), (4.0, 0.749)))
    dispatch = cl.NodeDispatch(8, experts=128, rate=rate)
    load, _ = cl.alltoall_load(c, [list(range(16))], dispatch)
    router = cl._router(c)
    copies = dispatch.device_copies(16)
    assert load[(router.device[0], router.fabric[0])] == pytest.approx((7 / 15 + 8 / 15 * 7 / 8) * copies / 0.717)
    assert load[(router.device[0], router.nic[0])] == pytest.approx(8 / 15 * (1 - 0.5 ** 8) / 4 / 0.539)
    link = cl.expert_parallel_link(c, 1, 16, 1, 16, 1, "megatron", dispatch)
    want = min(450 / ((7 / 15 + 8 / 15 * 7 / 8) * copies / 0.717), 50 / (8 / 15 * (1 - 0.5 ** 8) / 4 / 0.539))
    assert link.bandwidth_gb_s == pytest.approx(want)


def _moe_scenario(dispatcher: str, cluster: bool) -> dict:
    data = {
        "model": {"layers": 4, "hidden": 2048, "heads": 32, "ffn_hidden": 6144, "seq_len": 4096, "vocab": 151936,
                  "mlp": "swiglu", "kv_heads": 4, "head_dim": 128,
                  "moe": {"experts": 128, "top_k": 8, "ffn_hidden": 768}},
        "pipeline": {"stages": 1, "schedule": "1f1b", "microbatches": 4},
        "training": {"micro_batch": 1, "flash_attention": True, "moe_dispatcher": dispatcher},
        "data_parallel": 16, "expert_parallel": 16, "hardware": {"device": "h100-sxm"},
    }
    if cluster:
        data["cluster"] = {"nodes": 2, "devices_per_node": 8}
    return data


def test_a_scenario_names_its_dispatcher_and_its_expert_link_slows_by_the_measured_share() -> None:
    """HybridEP on 16 H100s of one NVLink domain (no cluster): its kernels reach 0.717 of the
    datasheet's 450 GB/s, over the device-copies factor, whatever rate the collectives are priced at;
    NCCL's all-to-all runs at the rate collectives were measured to reach, 370 GB/s. On the cluster
    of 2 nodes the NIC bounds it, as worked out above."""
    hybrid = parse_scenario(_moe_scenario("hybridep", cluster=False))
    plain = parse_scenario(_moe_scenario("alltoall", cluster=False))
    device = get_device("h100-sxm")
    fast = scenario_links(plain, device, stage_to_rank(plain)).expert_parallel
    slow = scenario_links(hybrid, device, stage_to_rank(hybrid)).expert_parallel
    copies = cl.NodeDispatch(8, experts=128).device_copies(16)
    assert fast.bandwidth_bytes_per_ms == pytest.approx(370e6)
    assert slow.bandwidth_bytes_per_ms == pytest.approx(450e6 * 0.717 / copies)
    on_cluster = parse_scenario(_moe_scenario("hybridep", cluster=True))
    routed = scenario_links(on_cluster, device, stage_to_rank(on_cluster)).expert_parallel
    want = min(450 / ((7 / 15 + 8 / 15 * 7 / 8) * copies / 0.717), 50 / (8 / 15 * (1 - 0.5 ** 8) / 4 / 0.539))
    assert routed.bandwidth_bytes_per_ms == pytest.approx(want * 1e6)


def test_a_dispatchers_share_is_of_the_datasheet_link_and_of_a_link_the_scenario_gives() -> None:
    """The shares were measured against the datasheet's NVLink (900 GB/s on a GB200): on the link
    priced at the collectives' measured 679.6 GB/s HybridEP's 0.509 becomes 0.509 x 900 / 679.6 of
    it, the same 458 GB/s; on a link the scenario gives (its own figure) the share stays as measured."""
    device = get_device("gb200")
    measured = device.dispatch_rate("hybridep")
    assert measured is not None and device.intra_node_measured is not None
    rebased = device.dispatch_on("hybridep", device.collective_rate())
    assert rebased is not None
    assert rebased.nvlink * 679.6 == pytest.approx(measured.nvlink * 900)
    assert rebased.network == measured.network
    assert device.dispatch_on("hybridep", None) == measured
    assert device.dispatch_on("hybridep", device.intra_node_gb_s) == measured
    assert get_device("a100-80g").dispatch_on("hybridep", 231.6) is None
    data = _moe_scenario("hybridep", cluster=False)
    data["hardware"] = {"device": "gb200", "tp_link": {"bandwidth_gb_s": 800}}
    given = parse_scenario(data)
    copies = cl.NodeDispatch(8, experts=128).device_copies(16)
    link = scenario_links(given, device, stage_to_rank(given)).expert_parallel
    assert link.bandwidth_bytes_per_ms == pytest.approx(800e6 * measured.nvlink / copies)


@pytest.mark.parametrize(("entry", "message"), [
    ("  dispatch_measured: {nccl: {nvlink: 0.5, source: x}}", "unknown dispatcher 'nccl'"),
    ("  dispatch_measured: {hybridep: {nvlink: 1.5, source: x}}", "hybridep.nvlink is 1.5"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5}}", "hybridep is a mapping"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: ''}}", "needs a source"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: x, network: [[4, 0.5], [2, 0.6]]}}",
     "point 2: 2 domains after 4; give the points in increasing domains"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: x, network: [[1, 0.5]]}}",
     "point 1: 1 domains; give a whole number >= 2"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: x, network: [[2, 0.5], [4, 1.5]]}}",
     r"point 2: share 1.5; it must be > 0 and <= 1"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: x, network: [[2, 0.5, 1]]}}", "point 1 is"),
    ("  dispatch_measured: {hybridep: {nvlink: 0.5, source: x, network: 3}}", "network is a list"),
    ("  dispatch_measured: []", "maps a dispatcher"),
])
def test_a_device_files_dispatcher_shares_are_checked(tmp_path: Path, entry: str, message: str) -> None:
    assert refused_device_file(tmp_path, entry, message).field == "hardware.device_file"


def test_a_device_file_may_give_its_own_dispatcher_shares(tmp_path: Path) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(device_entry("  dispatch_measured: {deepep: {nvlink: 0.6, source: mine, network: [[2, 0.5]]}}"))
    rate = read_devices(path)["mine"].dispatch_rate("deepep")
    assert rate == DispatchRate(0.6, "mine", ((2.0, 0.5),))


def test_run_says_which_dispatcher_it_priced_and_notes_a_device_without_a_measured_share(tmp_path: Path) -> None:
    """The plan line names the dispatcher and its measured share; on a device with none (the A100s)
    a note says the all-to-alls run at the links' own rates and how to give a share."""
    import yaml as pyyaml

    from conftest import invoke
    from ppsim.cli import app
    from ppsim.cli.common import pricing_notes

    data = _moe_scenario("hybridep", cluster=True)
    path = tmp_path / "moe.yaml"
    path.write_text(pyyaml.safe_dump(data))
    out = invoke(app, "run", path)
    assert out.exit_code == 0, out.output
    assert ("hybridep's dispatch (its kernels at their measured 0.72 of the datasheet's NVLink (323 GB/s))"
            in " ".join(out.output.split()))
    assert pricing_notes(parse_scenario(data)) == []
    data["hardware"]["device"] = "a100-80g"
    notes = pricing_notes(parse_scenario(data))
    assert len(notes) == 1 and notes[0].startswith("training.moe_dispatcher: a100-80g has no measured share")
    path.write_text(pyyaml.safe_dump(data))
    out = invoke(app, "run", path)
    assert "at the links' own rates: no measured share for this device" in " ".join(out.output.split())
    data["training"]["moe_dispatcher"] = "alltoall"
    assert pricing_notes(parse_scenario(data)) == []
