"""Hand-built devices, tasks and fleets for the Placer tests, run on both kernel backends."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.placement import (
    Capability,
    Decision,
    Device,
    LiveState,
    Placer,
    Policy,
    Requirements,
    Semantics,
    TaskContract,
    native_available,
)
from edge_agent.resources.vocab import DeviceKind, Health, Precision

BACKENDS = pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "native",
            marks=pytest.mark.skipif(not native_available(), reason="compiled kernel not built"),
        ),
        "python",
    ],
)

GB = 1e9


def dev(
    id: str,
    kind: DeviceKind = DeviceKind.GPU_NVIDIA,
    *,
    int8: float = 0.0,
    fp16: float = 0.0,
    fp32: float = 0.0,
    mem: float = 16 * GB,
    watts: float = 10.0,
    health: Health = Health.ONLINE,
    reconfig_s: float = 0.0,
    carbon: float = 0.0,
    utilization: float = 0.0,
) -> Device:
    """Return a device whose supported precisions are those with a nonzero peak."""
    mask = 0
    for prec, peak in ((Precision.INT8, int8), (Precision.FP16, fp16), (Precision.FP32, fp32)):
        if peak > 0:
            mask |= 1 << prec
    cap = Capability(
        peak_int8_gops=int8,
        peak_fp16_gops=fp16,
        peak_fp32_gops=fp32,
        memory_bytes=mem,
        memory_bw_gbs=100.0,
        idle_power_w=watts / 10,
        max_power_w=watts,
        precision_mask=mask,
        reconfig_s=reconfig_s,
    )
    return Device(
        id=id,
        kind=kind,
        name=id,
        capability=cap,
        live=LiveState(health=health, utilization=utilization),
        carbon_g_per_kwh=carbon,
    )


def task(
    gflops: float = 1.0,
    precision: str = "int8",
    *,
    cls: str = "default",
    priority: int = 0,
    **req: Any,
) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision=precision),
        Requirements(**req),
        task_class=cls,
        priority=priority,
    )


def placer(devices: list[Device], backend: str, policy: str = "latency-first", **kw: Any) -> Placer:
    return Placer(devices, Policy.template(policy), backend=backend, **kw)  # type: ignore[arg-type]


def mixed_fleet() -> list[Device]:
    return [
        dev("cpu", DeviceKind.CPU_ARM, int8=100, fp16=50, fp32=50, mem=8 * GB, watts=15),
        dev("gpu", DeviceKind.GPU_NVIDIA, int8=4000, fp16=2000, fp32=1000, mem=8 * GB, watts=60),
        dev("npu", DeviceKind.NPU, int8=10000, mem=4 * GB, watts=5),
    ]


def signature(d: Decision) -> tuple[Any, ...]:
    """Everything a decision says about the choice, without the backend label."""
    return (
        d.placed,
        d.device_ids,
        d.latency_s,
        d.service_s,
        d.energy_j,
        d.carbon_g,
        d.score,
        d.runner_up,
        d.runner_up_score,
        d.components,
        d.reject_counts,
        d.reasons,
    )
