"""Public placement API: devices + tasks + policy -> decisions, with feedback.

    from edge_agent.placement import Placer, Policy, devices_from_profiles, contract_from_onnx

Everything the agent, the simulator and outside evaluations need is importable here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_agent.placement.codec import PreparedTask, prepare
from edge_agent.placement.decision import Decision
from edge_agent.placement.kernel import default_backend, native_available
from edge_agent.placement.layout import OBJECTIVE_NAMES, REASON_NAMES
from edge_agent.placement.placer import Placer
from edge_agent.placement.policy import TEMPLATES, Policy
from edge_agent.resources.device import Capability, Device, LiveState
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

__all__ = [
    "OBJECTIVE_NAMES",
    "REASON_NAMES",
    "TEMPLATES",
    "Capability",
    "Decision",
    "Device",
    "LiveState",
    "Placer",
    "Policy",
    "PreparedTask",
    "Requirements",
    "Semantics",
    "TaskContract",
    "contract_from_onnx",
    "default_backend",
    "devices_from_profiles",
    "native_available",
    "prepare",
]


def devices_from_profiles(
    names: list[str], *, emulated: bool = True, directory: Path | None = None
) -> list[Device]:
    """Return the devices of the named firmware profiles, ids prefixed per board.

    A name may repeat ("rk3588", "rk3588"): each copy becomes its own box ("rk3588#2").
    """
    from edge_agent.resources.profiles import load_profile

    devices: list[Device] = []
    seen: dict[str, int] = {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        prefix = name if seen[name] == 1 else f"{name}#{seen[name]}"
        devices.extend(load_profile(name, directory).devices(emulated=emulated, id_prefix=prefix))
    return devices


def contract_from_onnx(model: str | Path, **requirements: Any) -> TaskContract:
    """Return a contract whose semantics are extracted from an ONNX model file."""
    from edge_agent.tasks.onnx_semantics import contract_from_onnx as _from_onnx

    return _from_onnx(model, **requirements)
