"""A schedulable device: a fixed capability vector plus mutable live state."""

from __future__ import annotations

from dataclasses import dataclass, field

from edge_agent.resources.vocab import (
    ALL_OPERATOR_FAMILIES,
    DeviceKind,
    Health,
    ModelFormat,
    OperatorFamily,
    Precision,
    Tier,
    names_of,
)


@dataclass(frozen=True)
class Capability:
    """What a device can do, in SI-like units the kernel reads directly.

    Throughput is in giga-operations per second per precision (0 = unsupported),
    memory in bytes, bandwidth in GB/s, power in watts, times in seconds.
    """

    peak_int8_gops: float
    peak_fp16_gops: float
    peak_fp32_gops: float
    memory_bytes: float
    memory_bw_gbs: float
    idle_power_w: float
    max_power_w: float
    precision_mask: int
    operator_mask: int = ALL_OPERATOR_FAMILIES
    format_mask: int = 1 << ModelFormat.ONNX
    execution_provider: str = "CPUExecutionProvider"
    efficiency: float = 0.5  # achievable fraction of peak for typical models
    dispatch_s: float = 0.0  # fixed per-inference overhead (driver, DMA setup)
    reconfig_s: float = 0.0  # e.g. an FPGA bitstream swap
    link_latency_s: float = 0.0  # > 0 when the device sits on a peer
    link_bw_gbs: float = 0.0  # 0 = input transfer not modelled

    def peak_gops(self, precision: Precision) -> float:
        """Return peak throughput for ``precision`` (GOPS); 0 when unsupported."""
        if not self.precision_mask & (1 << precision):
            return 0.0
        if precision == Precision.INT8 or precision == Precision.INT4:
            return self.peak_int8_gops
        if precision == Precision.FP16 or precision == Precision.BF16:
            return self.peak_fp16_gops
        return self.peak_fp32_gops


@dataclass
class LiveState:
    """How busy a device is now; the agent updates it, the kernel reads it."""

    utilization: float = 0.0  # 0..1, load not placed by hetmesh included
    memory_free_bytes: float | None = None  # None = all memory free
    queued_s: float = 0.0  # seconds of work already committed
    temperature_c: float = 0.0
    power_w: float = 0.0
    predicted_utilization: float = 0.0  # the load predictor's forecast, 0..1
    health: Health = Health.ONLINE
    loaded_config: int = 0  # FPGA configuration id currently loaded (0 = none)


@dataclass
class Device:
    """One schedulable compute unit (a CPU, a GPU, an NPU, an FPGA, ...)."""

    id: str
    kind: DeviceKind
    name: str
    capability: Capability
    live: LiveState = field(default_factory=LiveState)
    tier: Tier = Tier.WARM
    emulated: bool = False
    profile: str | None = None  # firmware profile the figures came from
    carbon_g_per_kwh: float = 0.0  # grid intensity at the device's site

    def summary(self) -> dict[str, object]:
        """Return a JSON-ready description of this device."""
        cap = self.capability
        return {
            "id": self.id,
            "kind": self.kind.name.lower(),
            "name": self.name,
            "emulated": self.emulated,
            "profile": self.profile,
            "tier": self.tier.name.lower(),
            "execution_provider": cap.execution_provider,
            "precisions": names_of(Precision, cap.precision_mask),
            "operator_families": names_of(OperatorFamily, cap.operator_mask),
            "model_formats": names_of(ModelFormat, cap.format_mask),
            "peak_gops": {
                "int8": cap.peak_int8_gops,
                "fp16": cap.peak_fp16_gops,
                "fp32": cap.peak_fp32_gops,
            },
            "memory_bytes": cap.memory_bytes,
            "memory_bw_gbs": cap.memory_bw_gbs,
            "idle_power_w": cap.idle_power_w,
            "max_power_w": cap.max_power_w,
            "reconfig_s": cap.reconfig_s,
            "link_latency_s": cap.link_latency_s,
            "health": self.live.health.name.lower(),
            "utilization": self.live.utilization,
            "queued_s": self.live.queued_s,
        }
