"""Firmware profiles: load a board's JSON file, validate it, and turn it into Devices.

A profile describes one kind of board (RK3588, Jetson Orin Nano, Kria KV260, ...): the
rules that recognise it and every compute unit it carries, each figure with its status
and source. The files live in ``firmware_profiles/`` (installed as the package data
``edge_agent.firmware_profiles``); their schema is documented in that folder's README.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import InvalidInput, ProfileError
from edge_agent.package_data import package_data_dir
from edge_agent.resources.device import Capability, Device
from edge_agent.resources.profile_schema import (
    FIGURE_STATUSES,
    MATCH_RULE_KEYS,
    SCHEMA_ID,
    default_tier,
    iter_figures,
    normalize_model_name,
    validate_profile,
)
from edge_agent.resources.vocab import (
    DeviceKind,
    ModelFormat,
    OperatorFamily,
    Precision,
    Tier,
    mask_of,
)

__all__ = [
    "FIGURE_STATUSES",
    "MATCH_RULE_KEYS",
    "SCHEMA_ID",
    "FirmwareProfile",
    "list_profiles",
    "load_profile",
    "normalize_model_name",
    "profiles_dir",
]

_PACKAGE = "edge_agent.firmware_profiles"


@dataclass(frozen=True)
class FirmwareProfile:
    """One validated board profile; ``device_specs`` are the raw device objects."""

    id: str
    name: str
    arch_class: str
    match_priority: int
    match_rules: tuple[Mapping[str, str], ...]
    board: Mapping[str, Mapping[str, Any]]
    device_specs: tuple[Mapping[str, Any], ...]
    latencies: Mapping[str, tuple[Mapping[str, Any], ...]]
    path: Path

    def device_spec(self, device_local_id: str) -> Mapping[str, Any]:
        """Return the raw device object called ``device_local_id``; InvalidInput if absent."""
        for spec in self.device_specs:
            if spec["id"] == device_local_id:
                return spec
        known = ", ".join(str(s["id"]) for s in self.device_specs)
        raise InvalidInput(f"profile {self.id!r} has no device {device_local_id!r}; has: {known}")

    def figures(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Return ``(dotted field, figure)`` for every numeric figure in this profile."""
        doc = {"board": self.board, "devices": list(self.device_specs)}
        return iter_figures(doc)

    def devices(self, emulated: bool, id_prefix: str | None = None) -> list[Device]:
        """Return one Device per unit, with ids ``"<id_prefix or profile id>/<local id>"``."""
        prefix = id_prefix if id_prefix is not None else self.id
        return [self._device(spec, emulated, prefix) for spec in self.device_specs]

    def published_latency_ms(
        self,
        device_local_id: str,
        model: str,
        precision: str | Precision | None = None,
        *,
        include_throughput: bool = False,
    ) -> float | None:
        """Return the lowest published latency (ms) of ``model`` on a device, or None.

        Rows that are 1000/FPS of a pipelined accelerator (``throughput_equivalent``) are
        not latencies and count only with ``include_throughput=True``.
        """
        self.device_spec(device_local_id)
        key = normalize_model_name(model)
        want = None if precision is None else _precision_name(precision)
        found = [
            float(row["latency_ms"])
            for row in self.latencies.get(device_local_id, ())
            if row["model"] == key
            and (want is None or row["precision"] == want)
            and (include_throughput or not row.get("throughput_equivalent", False))
        ]
        return min(found) if found else None

    def _device(self, spec: Mapping[str, Any], emulated: bool, prefix: str) -> Device:
        peaks = spec["peak_gops"]
        cap = Capability(
            peak_int8_gops=_value(peaks["int8"]),
            peak_fp16_gops=_value(peaks["fp16"]),
            peak_fp32_gops=_value(peaks["fp32"]),
            memory_bytes=_value(spec["memory_bytes"]),
            memory_bw_gbs=_value(spec["memory_bw_gbs"]),
            idle_power_w=_value(spec["idle_power_w"]),
            max_power_w=_value(spec["max_power_w"]),
            precision_mask=mask_of(Precision, spec["precisions"], what="precision"),
            operator_mask=mask_of(
                OperatorFamily, spec["operator_families"], what="operator family"
            ),
            format_mask=mask_of(ModelFormat, spec["model_formats"], what="model format"),
            execution_provider=str(spec["execution_provider"]),
            efficiency=_value(spec["efficiency"]),
            dispatch_s=_value(spec["dispatch_s"]),
            reconfig_s=_value(spec["reconfig_s"]),
        )
        kind = DeviceKind[str(spec["kind"]).upper()]
        return Device(
            id=f"{prefix}/{spec['id']}",
            kind=kind,
            name=str(spec["name"]),
            capability=cap,
            tier=Tier[str(spec["tier"]).upper()] if "tier" in spec else default_tier(kind),
            emulated=emulated,
            profile=self.id,
        )


def profiles_dir() -> Path:
    """Return the folder of shipped profiles: the installed package data, else the checkout's."""
    return package_data_dir(_PACKAGE, "firmware_profiles")


def list_profiles(directory: str | Path | None = None) -> list[str]:
    """Return the sorted ids (file stems) of the ``*.json`` profiles in ``directory``."""
    folder = Path(directory) if directory is not None else profiles_dir()
    return sorted(p.stem for p in folder.glob("*.json") if p.is_file())


def load_profile(name_or_path: str | Path, directory: str | Path | None = None) -> FirmwareProfile:
    """Load and validate a profile by id (looked up in ``directory``) or by file path."""
    path = _resolve(name_or_path, directory)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        folder = path.parent
        known = ", ".join(list_profiles(folder)) if folder.is_dir() else "none"
        raise ProfileError(str(path), "(file)", f"not found; profiles here: {known}") from None
    except OSError as err:
        raise ProfileError(str(path), "(file)", f"cannot be read: {err}") from err
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        problem = f"is not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}"
        raise ProfileError(str(path), "(file)", problem) from None
    doc = validate_profile(raw, str(path), expected_id=path.stem)
    specs = tuple(doc["devices"])
    return FirmwareProfile(
        id=doc["id"],
        name=doc["name"],
        arch_class=doc["arch_class"],
        match_priority=doc["match"]["priority"],
        match_rules=tuple(dict(rule) for rule in doc["match"]["any"]),
        board=doc["board"],
        device_specs=specs,
        latencies={s["id"]: tuple(s.get("latencies", ())) for s in specs},
        path=path,
    )


def _resolve(name_or_path: str | Path, directory: str | Path | None) -> Path:
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or text.endswith(".json"):
        return Path(name_or_path)
    folder = Path(directory) if directory is not None else profiles_dir()
    return folder / f"{text}.json"


def _value(figure: Mapping[str, Any]) -> float:
    return float(figure["value"])


def _precision_name(precision: str | Precision) -> str:
    if isinstance(precision, Precision):
        return precision.name.lower()
    return precision.strip().lower()
