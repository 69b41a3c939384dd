"""Built-in device catalogue: dense peak throughput per dtype, memory, and the usual links.

Figures are vendor datasheet values (dense, no sparsity). ``efficiency`` is the fraction of peak
a large GPT matmul reaches in practice; a scenario may override it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsim.errors import ScenarioError


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    peak_tflops: dict[str, float]  #: dense peak per dtype (bf16, fp16, fp32)
    memory_gb: float
    hbm_gb_s: float  #: memory bandwidth, used for the (memory-bound) optimizer step
    efficiency: float  #: achievable fraction of peak on GPT-sized matmuls
    intra_node_gb_s: float  #: per-direction bandwidth to a device in the same node (NVLink)
    intra_node_latency_us: float
    inter_node_gb_s: float  #: per-device NIC bandwidth to another node
    inter_node_latency_us: float

    def peak_flops(self, dtype: str) -> float:
        return self.peak_tflops[dtype] * 1e12


DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("a100-40g", "NVIDIA A100 SXM 40GB", {"bf16": 312, "fp16": 312, "fp32": 19.5}, 40, 1555, 0.6, 300, 3, 25, 5),
        Device("a100-80g", "NVIDIA A100 SXM 80GB", {"bf16": 312, "fp16": 312, "fp32": 19.5}, 80, 2039, 0.6, 300, 3, 25, 5),
        Device("h100-sxm", "NVIDIA H100 SXM 80GB", {"bf16": 989, "fp16": 989, "fp32": 67}, 80, 3350, 0.55, 450, 3, 50, 5),
        Device("h200", "NVIDIA H200 SXM 141GB", {"bf16": 989, "fp16": 989, "fp32": 67}, 141, 4800, 0.55, 450, 3, 50, 5),
        Device(
            "cpu",
            "one x86 CPU core per rank, gloo over shared memory (calibrate with a profile)",
            {"bf16": 0.02, "fp16": 0.01, "fp32": 0.05},
            24,
            20,
            0.5,
            2,
            50,
            1,
            100,
        ),
    )
}


def get_device(name: str) -> Device:
    try:
        return DEVICES[name]
    except KeyError:
        raise ScenarioError(
            f"unknown device {name!r}; choose one of: {', '.join(DEVICES)}", field="hardware.device"
        ) from None
