"""Devices described inline in a fleet file (no firmware profile), with measured rates.

An inline device gives its datasheet figures directly and, optionally, ``rates``: work
units per second per model (e.g. training steps/s measured by Gavel), which the ground
truth uses before any roofline. See docs/simulator.md, "Devices described inline".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloud_hub.simulator.errors import SimulationInputError
from edge_agent.resources.device import Capability, Device
from edge_agent.resources.vocab import DeviceKind, ModelFormat, Precision, Tier, mask_of

KEYS = {
    "id",
    "kind",
    "name",
    "count",
    "peak_gops",
    "memory_gb",
    "memory_bw_gbs",
    "idle_power_w",
    "max_power_w",
    "efficiency",
    "dispatch_s",
    "rates",
    "source",
}
REQUIRED = ("id", "kind", "peak_gops", "memory_gb", "max_power_w")


@dataclass(frozen=True)
class InlineDevice:
    """One inline device instance: its local id, the Device, its measured rates."""

    local_id: str
    device: Device
    rates: Mapping[str, float]  # model -> work units per second


def _number(raw: Mapping[str, Any], key: str, where: str, field: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SimulationInputError(where, field, f"expected a finite number, got {value!r}")
    if value < 0:
        raise SimulationInputError(where, field, f"must be >= 0, got {value!r}")
    return float(value)


def parse_inline(raw: object, box_id: str, where: str, field: str) -> list[InlineDevice]:
    """Return the device instances one inline entry describes (``count`` copies)."""
    if not isinstance(raw, Mapping):
        raise SimulationInputError(where, field, f"expected an object, got {raw!r}")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise SimulationInputError(where, field, f"unknown key(s) {', '.join(unknown)}")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise SimulationInputError(where, field, f"missing {', '.join(missing)}")
    local = raw["id"]
    if not isinstance(local, str) or not local or "/" in local:
        raise SimulationInputError(where, f"{field}.id", f"expected a name without '/': {local!r}")
    try:
        kind = DeviceKind[str(raw["kind"]).upper()]
    except KeyError:
        known = ", ".join(k.name.lower() for k in DeviceKind)
        raise SimulationInputError(where, f"{field}.kind", f"expected one of {known}") from None
    peaks = raw["peak_gops"]
    if not isinstance(peaks, Mapping) or not peaks or set(peaks) - {"int8", "fp16", "fp32"}:
        raise SimulationInputError(
            where, f"{field}.peak_gops", "expected {int8|fp16|fp32: GOPS}, at least one"
        )
    peak = {p: _number(peaks, p, where, f"{field}.peak_gops.{p}", 0.0) for p in peaks}
    precisions = [p for p, v in peak.items() if v > 0]
    if "fp16" in precisions:
        precisions.append("bf16")
    if "int8" in precisions:
        precisions.append("int4")
    efficiency = _number(raw, "efficiency", where, f"{field}.efficiency", 0.5)
    if not 0 < efficiency <= 1:
        raise SimulationInputError(where, f"{field}.efficiency", "expected a fraction in (0, 1]")
    cap = Capability(
        peak_int8_gops=peak.get("int8", 0.0),
        peak_fp16_gops=peak.get("fp16", 0.0),
        peak_fp32_gops=peak.get("fp32", 0.0),
        memory_bytes=_number(raw, "memory_gb", where, f"{field}.memory_gb", 0.0) * 2**30,
        memory_bw_gbs=_number(raw, "memory_bw_gbs", where, f"{field}.memory_bw_gbs", 0.0),
        idle_power_w=_number(raw, "idle_power_w", where, f"{field}.idle_power_w", 0.0),
        max_power_w=_number(raw, "max_power_w", where, f"{field}.max_power_w", 0.0),
        precision_mask=mask_of(Precision, precisions, what="precision"),
        format_mask=(1 << ModelFormat.ONNX) | (1 << ModelFormat.COMMAND),
        execution_provider="inline",
        efficiency=efficiency,
        dispatch_s=_number(raw, "dispatch_s", where, f"{field}.dispatch_s", 0.0),
    )
    rates_raw = raw.get("rates", {})
    if not isinstance(rates_raw, Mapping):
        raise SimulationInputError(where, f"{field}.rates", "expected {model: units per second}")
    rates = {str(m): _number(rates_raw, m, where, f"{field}.rates.{m}", 0.0) for m in rates_raw}
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000:
        raise SimulationInputError(where, f"{field}.count", f"expected 1..10000, got {count!r}")
    out = []
    for k in range(count):
        lid = local if count == 1 else f"{local}-{k + 1}"
        dev = Device(
            id=f"{box_id}/{lid}",
            kind=kind,
            name=str(raw.get("name", local)),
            capability=cap,
            tier=Tier.WARM,
            emulated=True,
        )
        out.append(InlineDevice(lid, dev, rates))
    return out
