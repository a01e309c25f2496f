"""FPGA exclusive vs shared, simulated on one KV260-like board (firmware profile kria_kv260).

Tasks are jobs of ``work`` inferences, each needing configuration 1 or 2 (the profile's
two DPU images; both are timed with the published B4096 latencies). Arrivals are Poisson
at ``load`` x the full fabric's capacity, the same tasks in both modes, placed by a
hetmesh Placer (latency-first), which counts the reconfiguration cost.

* exclusive: the FPGA holds one configuration; every switch costs the profile's
  ``reconfig_s`` (1.0 s, unverified).
* shared: the fabric is split into ``slots`` equal partial-reconfiguration regions, each a
  device holding its own configuration (the engine serves one task per device). As in the
  placement kernel (``reference.py``: a slot holds 1/slots of the fabric, a configuration
  loaded in no slot costs the device's ``reconfig_s``), a slot runs at 1/slots of the full
  fabric's speed and a slot swap costs the profile's full ``reconfig_s``: the slot devices
  keep the fabric's capability ``reconfig_s``, the one figure both read. Both are
  assumptions, not measurements.

``fpga_util`` = useful fabric-seconds (service time, per slot divided by the slot count)
/ makespan; reconfiguration and idle time are not useful.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cloud_hub.simulator.agents import AgentChooser
from cloud_hub.simulator.engine import FleetState, simulate
from cloud_hub.simulator.fleet import Fleet, SimDevice, parse_fleet
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import GroundTruth
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Policy

FPGA_LABEL = (
    "simulated: KV260 profile latencies, reconfig_s 1.0 s (unverified); shared = "
    "equal partial-reconfiguration slots at 1/slots speed, slot swap reconfig_s (assumed, "
    "as the placement kernel charges)"
)
MIX = (("resnet50", 100.0, 1), ("mobilenet_v2", 300.0, 2))  # (model, inferences, config)


def kv260_fleet(slots: int = 0) -> Fleet:
    """Return one KV260 box; with ``slots`` > 0 its FPGA becomes that many slot devices."""
    fleet = parse_fleet(
        {"name": "kv260", "boxes": [{"id": "kria", "profile": "kria_kv260"}]}, "<kv260>"
    )
    if slots <= 0:
        return _with_config(fleet, [1])
    devices: list[SimDevice] = []
    for sd in fleet.devices:
        if sd.local_id != "fpga":
            devices.append(dataclasses.replace(sd, index=len(devices)))
            continue
        cap = sd.device.capability
        part = dataclasses.replace(
            cap,
            peak_int8_gops=cap.peak_int8_gops / slots,
            peak_fp16_gops=cap.peak_fp16_gops / slots,
            peak_fp32_gops=cap.peak_fp32_gops / slots,
        )  # reconfig_s kept: a slot swap costs what the kernel charges, the full figure
        for k in range(slots):
            dev = dataclasses.replace(sd.device, id=f"{sd.device.id}.slot{k}", capability=part)
            devices.append(
                dataclasses.replace(
                    sd, index=len(devices), device=dev, slowdown=sd.slowdown * slots
                )
            )
    shared = dataclasses.replace(fleet, devices=tuple(devices))
    return _with_config(shared, [1 + k % len(MIX) for k in range(slots)])


def _with_config(fleet: Fleet, configs: list[int]) -> Fleet:
    """Return ``fleet`` with its FPGA devices holding ``configs`` at the start."""
    out, k = [], 0
    for sd in fleet.devices:
        if sd.local_id == "fpga":
            live = dataclasses.replace(sd.device.live, loaded_config=configs[k])
            sd = dataclasses.replace(sd, device=dataclasses.replace(sd.device, live=live))
            k += 1
        out.append(sd)
    return dataclasses.replace(fleet, devices=tuple(out))


def fpga_tasks(n: int, load: float, seed: int) -> list[Task]:
    """Return ``n`` seeded jobs alternating configurations at random, Poisson arrivals."""
    fleet = kv260_fleet()
    truth = GroundTruth(fleet, [(m, "int8") for m, _, _ in MIX], 1, 0.0, seed)
    fpga = next(sd.index for sd in fleet.devices if sd.local_id == "fpga")
    mean_s = float(np.mean([truth.base[(m, "int8")][fpga] * w for m, w, _ in MIX]))
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(mean_s / load, n))
    kinds = rng.integers(len(MIX), size=n)
    return [
        Task(
            i,
            float(times[i]),
            MIX[k][0],
            "int8",
            3600.0,
            0,
            "default",
            0,
            MIX[k][1],
            False,
            0.0,
            MIX[k][2],
        )
        for i, k in enumerate(kinds.tolist())
    ]


def run_fpga(slots: int, tasks: list[Task], seed: int, sigma: float = 0.1) -> dict[str, Any]:
    """Simulate ``tasks`` on the exclusive (slots=0) or slotted FPGA; return its figures."""
    fleet = kv260_fleet(slots)
    types = [(m, "int8") for m, _, _ in MIX]
    truth = GroundTruth(fleet, types, len(tasks), sigma, seed)
    fpga = [sd.index for sd in fleet.devices if sd.local_id == "fpga"]
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in types}
    state = FleetState(fleet, truth, dict.fromkeys(types, fpga), memory)
    out = simulate(tasks, state, AgentChooser(fleet, Policy.template("latency-first")))
    placed = [i for i, d in enumerate(out.device) if d in fpga]
    makespan = max(out.finish_s) - tasks[0].t
    useful = sum(out.service_s[i] for i in placed) / len(fpga)
    lat = [out.latency_s[i] for i in placed] or [0.0]
    return {
        "slots": len(fpga) if slots > 0 else 1,
        "fpga_util": useful / makespan if makespan > 0 else 0.0,
        "tasks_on_fpga": len(placed),
        "rejected": len(tasks) - len(placed),  # e.g. queued work holding all the memory
        "reconfigs": sum(state.reconfigs[d] for d in fpga),
        "reconfig_s": sum(state.reconfig_busy_s[d] for d in fpga),
        "makespan_s": makespan,
        "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_n": len(placed),
        "published_share": truth.coverage(state.feasible),
    }


def compare_fpga(
    n: int = 3000, seed: int = 1, *, load: float = 0.9, slots: int = 2
) -> dict[str, Any]:
    """Run the same jobs on the exclusive and the shared FPGA."""
    tasks = fpga_tasks(n, load, seed)
    return {
        "label": FPGA_LABEL,
        "offered_load": load,
        "exclusive": run_fpga(0, tasks, seed),
        "shared": run_fpga(slots, tasks, seed),
    }
