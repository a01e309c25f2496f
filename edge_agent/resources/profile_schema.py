"""Validation of firmware profile documents (schema ``hetmesh.firmware_profile/1``).

Every check raises :class:`~edge_agent.errors.ProfileError` naming the file, the dotted
field (``devices[1].peak_gops.int8.source``) and what to change. The document layout is
described field by field in ``firmware_profiles/README.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, NoReturn

from edge_agent.errors import ProfileError
from edge_agent.resources.vocab import (
    PEAK_PRECISIONS,
    DeviceKind,
    ModelFormat,
    OperatorFamily,
    Precision,
    Tier,
)

SCHEMA_ID = "hetmesh.firmware_profile/1"

#: Allowed values of a figure's ``status``.
FIGURE_STATUSES: tuple[str, ...] = ("official", "measured", "derived", "unverified")

#: Keys a match rule may use; all keys of one rule must hold (AND), any rule may match (OR).
MATCH_RULE_KEYS: frozenset[str] = frozenset(
    {"arch", "cpu_model_regex", "dt_compatible", "device_node", "pci_id", "usb_id", "sysfs_path"}
)

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_MODEL_RE = re.compile(r"^[a-z0-9][a-z0-9_.]*$")
_HEX_PAIR_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")

_FIGURE_KEYS = {"value", "unit", "status", "source"}
_FIGURE_OPTIONAL = {"note", "origin_status"}
_BOARD_FIGURES = {
    "memory_bytes": "bytes",
    "memory_bw_gbs": "GB/s",
    "idle_power_w": "W",
    "max_power_w": "W",
}
_DEVICE_FIGURES = {
    **_BOARD_FIGURES,
    "efficiency": "fraction",
    "dispatch_s": "s",
    "reconfig_s": "s",
}
_DEVICE_KEYS = {
    "id",
    "kind",
    "name",
    "execution_provider",
    "precisions",
    "operator_families",
    "model_formats",
    "peak_gops",
    *_DEVICE_FIGURES,
}
#: Optional device keys (a device without ``tier`` gets ``default_tier`` of its kind).
_DEVICE_OPTIONAL = {"configurations", "latencies", "note", "tier", "pr_slots"}
MAX_PR_SLOTS = 4  # partial-reconfiguration slots an FPGA may have (the kernel's MAX_SLOTS)
_LATENCY_KEYS = {"model", "latency_ms", "precision", "batch", "metric", "status", "source"}
_LATENCY_OPTIONAL = {
    "input",
    "runtime",
    "note",
    "origin_status",
    "variant",
    "precision_detail",
    "throughput_equivalent",
}
_CONFIG_KEYS = {"id", "name", "source", "status"}
_CONFIG_OPTIONAL = {"note"}
#: Which listed precisions make each peak slot supported (Capability.peak_gops maps them).
_SLOT_USERS = {"int8": ("int8", "int4"), "fp16": ("fp16", "bf16"), "fp32": ("fp32",)}


def default_tier(kind: DeviceKind) -> Tier:
    """Return the tier of a device whose profile names none: the one rule for the default.

    GPUs, NPUs, FPGAs and DSPs are hot (real-time inference), x86 CPUs warm, ARM CPUs cold
    (batch work).
    """
    if kind == DeviceKind.CPU_X86:
        return Tier.WARM
    if kind == DeviceKind.CPU_ARM:
        return Tier.COLD
    return Tier.HOT


def normalize_model_name(name: str) -> str:
    """Return ``name`` as a profile model key: lower-case snake, dots kept (``squeezenet_v1.1``)."""
    return re.sub(r"[^a-z0-9.]+", "_", name.strip().lower()).strip("_")


class _Checker:
    """Walks one profile document, raising ProfileError at the first problem."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, field: str, problem: str) -> NoReturn:
        raise ProfileError(self.path, field, problem)

    def obj(
        self, value: object, field: str, required: set[str], optional: set[str]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, f"must be a JSON object, got {type(value).__name__}")
        for key in sorted(required - value.keys()):
            self.fail(_join(field, key), "is missing; add it (see firmware_profiles/README.md)")
        for key in sorted(value.keys() - required - optional):
            allowed = ", ".join(sorted(required | optional))
            self.fail(_join(field, key), f"is not a known field; remove it (allowed: {allowed})")
        return value

    def text(self, value: object, field: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, "must be a non-empty string")
        return value

    def number(self, value: object, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(field, f"must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            self.fail(field, f"must be a finite number >= 0, got {value!r}")
        return float(value)

    def name(self, value: object, field: str, enum: type[IntEnum]) -> str:
        text = self.text(value, field)
        if text != text.lower() or text.upper() not in enum.__members__:
            allowed = ", ".join(m.name.lower() for m in enum)
            self.fail(field, f"unknown name {text!r}; use one of: {allowed}")
        return text

    def names(self, value: object, field: str, enum: type[IntEnum]) -> list[str]:
        if not isinstance(value, list):
            self.fail(field, "must be a list of names")
        out = [self.name(item, f"{field}[{i}]", enum) for i, item in enumerate(value)]
        if len(set(out)) != len(out):
            self.fail(field, "lists a name twice; remove the duplicate")
        return out

    def status(self, value: object, field: str) -> None:
        if value not in FIGURE_STATUSES:
            self.fail(field, f"is {value!r}; use one of: {', '.join(FIGURE_STATUSES)}")

    def figure(self, value: object, field: str, unit: str) -> float:
        fig = self.obj(value, field, _FIGURE_KEYS, _FIGURE_OPTIONAL)
        number = self.number(fig["value"], f"{field}.value")
        if fig["unit"] != unit:
            self.fail(f"{field}.unit", f"is {fig['unit']!r}; convert the value to {unit!r}")
        self.status(fig["status"], f"{field}.status")
        self.text(fig["source"], f"{field}.source")
        for key in _FIGURE_OPTIONAL & fig.keys():
            self.text(fig[key], f"{field}.{key}")
        return number

    def match(self, value: object, field: str) -> None:
        match = self.obj(value, field, {"priority", "any"}, {"note"})
        priority = match["priority"]
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            self.fail(f"{field}.priority", f"must be an integer >= 0, got {priority!r}")
        rules = match["any"]
        if not isinstance(rules, list) or not rules:
            self.fail(f"{field}.any", "must be a non-empty list of rule objects")
        for i, rule in enumerate(rules):
            self.rule(rule, f"{field}.any[{i}]")
        if "note" in match:
            self.text(match["note"], f"{field}.note")

    def rule(self, value: object, field: str) -> None:
        if not isinstance(value, dict) or not value:
            self.fail(field, "must be a non-empty object of match keys")
        for key, item in value.items():
            where = f"{field}.{key}"
            if key not in MATCH_RULE_KEYS:
                self.fail(where, f"unknown match key; use: {', '.join(sorted(MATCH_RULE_KEYS))}")
            text = self.text(item, where)
            if key == "cpu_model_regex":
                try:
                    re.compile(text)
                except re.error as err:
                    self.fail(where, f"is not a valid regular expression: {err}")
            elif key in ("pci_id", "usb_id") and not _HEX_PAIR_RE.match(text):
                self.fail(where, f"is {text!r}; write 'vvvv:dddd' in lower-case hex")
            elif key in ("device_node", "sysfs_path") and not text.startswith("/"):
                self.fail(where, f"is {text!r}; write an absolute path or glob")

    def device(self, value: object, field: str) -> dict[str, Any]:
        dev = self.obj(value, field, _DEVICE_KEYS, _DEVICE_OPTIONAL)
        self.ident(dev["id"], f"{field}.id")
        self.name(dev["kind"], f"{field}.kind", DeviceKind)
        if "tier" in dev:
            self.name(dev["tier"], f"{field}.tier", Tier)
        self.text(dev["name"], f"{field}.name")
        self.text(dev["execution_provider"], f"{field}.execution_provider")
        precisions = self.names(dev["precisions"], f"{field}.precisions", Precision)
        self.names(dev["operator_families"], f"{field}.operator_families", OperatorFamily)
        self.names(dev["model_formats"], f"{field}.model_formats", ModelFormat)
        slots = {p.name.lower() for p in PEAK_PRECISIONS}
        peaks = self.obj(dev["peak_gops"], f"{field}.peak_gops", slots, set())
        for slot in sorted(slots):
            where = f"{field}.peak_gops.{slot}"
            peak = self.figure(peaks[slot], where, "GOPS")
            supported = any(p in precisions for p in _SLOT_USERS[slot])
            if supported and peak <= 0:
                self.fail(f"{where}.value", f"is 0 but precisions list {slot}; give the peak")
            if not supported and peak > 0:
                self.fail(f"{where}.value", f"must be 0: {slot} is not in precisions")
        for key, unit in _DEVICE_FIGURES.items():
            self.figure(dev[key], f"{field}.{key}", unit)
        eff = dev["efficiency"]["value"]
        if not 0 < eff <= 1:
            self.fail(f"{field}.efficiency.value", f"must be in (0, 1], got {eff!r}")
        if dev["max_power_w"]["value"] < dev["idle_power_w"]["value"]:
            self.fail(f"{field}.max_power_w.value", "is below idle_power_w; fix either figure")
        if "note" in dev:
            self.text(dev["note"], f"{field}.note")
        self.configurations(dev.get("configurations", []), f"{field}.configurations")
        if "pr_slots" in dev:  # FPGA partial-reconfiguration regions, each one configuration
            regions = self.figure(dev["pr_slots"], f"{field}.pr_slots", "slots")
            if dev["kind"] != "fpga":
                self.fail(f"{field}.pr_slots", "only an FPGA has partial-reconfiguration slots")
            if regions not in range(1, MAX_PR_SLOTS + 1):
                self.fail(f"{field}.pr_slots.value", f"must be an integer 1..{MAX_PR_SLOTS}")
        rows = dev.get("latencies", [])
        if not isinstance(rows, list):
            self.fail(f"{field}.latencies", "must be a list of latency rows")
        for i, row in enumerate(rows):
            self.latency(row, f"{field}.latencies[{i}]")
        return dev

    def configurations(self, value: object, field: str) -> None:
        if not isinstance(value, list):
            self.fail(field, "must be a list of configuration objects")
        seen: set[int] = set()
        for i, item in enumerate(value):
            where = f"{field}[{i}]"
            conf = self.obj(item, where, _CONFIG_KEYS, _CONFIG_OPTIONAL)
            cid = conf["id"]
            if isinstance(cid, bool) or not isinstance(cid, int) or cid < 1 or cid in seen:
                self.fail(f"{where}.id", f"must be a unique integer >= 1, got {cid!r}")
            seen.add(cid)
            for key in ("name", "source", *(_CONFIG_OPTIONAL & conf.keys())):
                self.text(conf[key], f"{where}.{key}")
            self.status(conf["status"], f"{where}.status")

    def latency(self, value: object, field: str) -> None:
        row = self.obj(value, field, _LATENCY_KEYS, _LATENCY_OPTIONAL)
        model = self.text(row["model"], f"{field}.model")
        if not _MODEL_RE.match(model):
            self.fail(f"{field}.model", f"is {model!r}; write {normalize_model_name(model)!r}")
        if self.number(row["latency_ms"], f"{field}.latency_ms") <= 0:
            self.fail(f"{field}.latency_ms", "must be > 0")
        self.name(row["precision"], f"{field}.precision", Precision)
        batch = row["batch"]
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            self.fail(f"{field}.batch", f"must be an integer >= 1, got {batch!r}")
        self.status(row["status"], f"{field}.status")
        for key in ("metric", "source", *(_LATENCY_OPTIONAL - {"throughput_equivalent"})):
            if key in row:
                self.text(row[key], f"{field}.{key}")
        if not isinstance(row.get("throughput_equivalent", False), bool):
            self.fail(f"{field}.throughput_equivalent", "must be true or false")

    def ident(self, value: object, field: str) -> str:
        text = self.text(value, field)
        if not _ID_RE.match(text):
            self.fail(field, f"is {text!r}; use lower-case letters, digits and '_'")
        return text


def validate_profile(raw: object, path: str, expected_id: str | None = None) -> dict[str, Any]:
    """Check ``raw`` against the profile schema and return it; raise ProfileError if invalid."""
    check = _Checker(path)
    top_required = {"schema", "id", "name", "arch_class", "match", "board", "devices"}
    doc = check.obj(raw, "(document)", top_required, {"note"})
    if doc["schema"] != SCHEMA_ID:
        check.fail("schema", f"is {doc['schema']!r}; this loader reads {SCHEMA_ID!r}")
    pid = check.ident(doc["id"], "id")
    if expected_id is not None and pid != expected_id:
        check.fail("id", f"is {pid!r} but the file is named {expected_id!r}.json; make them agree")
    check.text(doc["name"], "name")
    check.ident(doc["arch_class"], "arch_class")
    if "note" in doc:
        check.text(doc["note"], "note")
    check.match(doc["match"], "match")
    board = check.obj(doc["board"], "board", set(_BOARD_FIGURES), {"note"})
    for key, unit in _BOARD_FIGURES.items():
        check.figure(board[key], f"board.{key}", unit)
    devices = doc["devices"]
    if not isinstance(devices, list) or not devices:
        check.fail("devices", "must be a non-empty list of device objects")
    seen: set[str] = set()
    for i, item in enumerate(devices):
        dev = check.device(item, f"devices[{i}]")
        if dev["id"] in seen:
            check.fail(f"devices[{i}].id", f"duplicates device id {dev['id']!r}; rename one")
        seen.add(dev["id"])
    return doc


def iter_figures(doc: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Return ``(dotted field, figure)`` for every numeric figure of a validated profile."""
    out: list[tuple[str, Mapping[str, Any]]] = [
        (f"board.{key}", doc["board"][key]) for key in _BOARD_FIGURES
    ]
    for i, dev in enumerate(doc["devices"]):
        out += [(f"devices[{i}].peak_gops.{k}", fig) for k, fig in dev["peak_gops"].items()]
        out += [(f"devices[{i}].{key}", dev[key]) for key in _DEVICE_FIGURES]
    return out


def _join(field: str, key: str) -> str:
    return key if field == "(document)" else f"{field}.{key}"
