"""The same inputs give the same decisions, on each backend and across both."""

from __future__ import annotations

from typing import Any

import pytest

from edge_agent.placement import Device, Requirements, Semantics, TaskContract, native_available
from edge_agent.resources.vocab import DeviceKind, Health
from tests.support.placer_fleet import BACKENDS, GB, dev, placer, signature

# --- determinism ---------------------------------------------------------------------


def determinism_fleet() -> list[Device]:
    return [
        dev(
            "cpu",
            DeviceKind.CPU_X86,
            int8=300,
            fp16=150,
            fp32=150,
            mem=32 * GB,
            watts=65,
            carbon=400,
        ),
        dev(
            "gpu",
            DeviceKind.GPU_NVIDIA,
            int8=20000,
            fp16=10000,
            fp32=5000,
            mem=8 * GB,
            watts=70,
            carbon=400,
            utilization=0.3,
        ),
        dev("npu", DeviceKind.NPU, int8=6000, fp16=3000, mem=4 * GB, watts=6, carbon=50),
        dev(
            "fpga",
            DeviceKind.FPGA,
            int8=1500,
            mem=2 * GB,
            watts=10,
            reconfig_s=0.2,
            health=Health.SUSPECT,
        ),
        dev(
            "peer-gpu",
            DeviceKind.GPU_OTHER,
            int8=8000,
            fp16=4000,
            fp32=2000,
            mem=16 * GB,
            watts=40,
            carbon=20,
        ),
    ]


def determinism_tasks() -> list[TaskContract]:
    tasks = []
    for i in range(40):
        prec = ("int8", "fp16", "fp32")[i % 3]
        tasks.append(
            TaskContract(
                Semantics(
                    gflops=0.5 + (i * 7 % 11),
                    param_bytes=(i % 5) * 1e8,
                    activation_bytes=(i % 3) * 5e7,
                    precision=prec,
                ),
                Requirements(
                    device_count=1 + (i % 7 == 0),
                    config_id=int(i % 4 == 1),
                    max_latency_s=0.5 if i % 6 == 0 else 0.0,
                ),
                task_class=f"class{i % 5}",
                priority=i % 4,
            )
        )
    return tasks


def run_scenario(backend: str) -> list[tuple[Any, ...]]:
    p = placer(determinism_fleet(), backend, "balanced")
    out = [signature(d) for d in p.place(determinism_tasks())]
    first = p.place_one(determinism_tasks()[3])
    p.feedback(first, latency_s=first.service_s * 1.7)
    out += [signature(d) for d in p.place(determinism_tasks()[:10])]
    return out


@BACKENDS
def test_same_inputs_give_identical_decisions(backend: str) -> None:
    first, second = run_scenario(backend), run_scenario(backend)
    assert first == second
    assert any(s[0] for s in first) and any(len(s[1]) == 2 for s in first)


@pytest.mark.skipif(not native_available(), reason="compiled kernel not built")
def test_both_backends_give_identical_decisions() -> None:
    assert run_scenario("native") == run_scenario("python")
