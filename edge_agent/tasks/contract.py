"""Task contracts: what a submitter requires (hard) and intends (soft), and how heavy it is."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from edge_agent.errors import ContractError
from edge_agent.resources.vocab import (
    DeviceKind,
    ModelFormat,
    OperatorFamily,
    Precision,
    mask_of,
    parse_name,
)

#: Most devices one task may ask for (a gang of accelerators).
MAX_DEVICE_COUNT = 8
#: Bounds that keep every figure exact in the kernel's doubles and in SQLite integers.
MAX_PRIORITY = 1_000_000  # |priority|
MAX_CONFIG_ID = 2**31 - 1
MAX_AMOUNT = 1e15  # gflops and byte counts (a petabyte, a peta-operation)
MAX_SECONDS = 1e9  # latency bounds and deadlines (about 31 years)

#: Kind groups a contract may name besides the exact kinds.
KIND_GROUPS: dict[str, tuple[DeviceKind, ...]] = {
    "cpu": (DeviceKind.CPU_X86, DeviceKind.CPU_ARM),
    "gpu": (DeviceKind.GPU_NVIDIA, DeviceKind.GPU_OTHER),
    "accelerator": (
        DeviceKind.GPU_NVIDIA,
        DeviceKind.GPU_OTHER,
        DeviceKind.NPU,
        DeviceKind.FPGA,
        DeviceKind.DSP,
    ),
}


def kinds_mask(names: list[str]) -> int:
    """Return the device-kind mask for kind names or groups (cpu, gpu, accelerator)."""
    mask = 0
    for name in names:
        group = KIND_GROUPS.get(name.strip().lower())
        if group is not None:
            for kind in group:
                mask |= 1 << kind
        else:
            mask |= 1 << parse_name(DeviceKind, name, what="device kind")
    return mask


@dataclass(frozen=True)
class Semantics:
    """How heavy a task is: work, bytes moved, precision, operator mix."""

    gflops: float  # giga-operations for one run (MACs count as 2)
    param_bytes: float = 0.0
    activation_bytes: float = 0.0
    input_bytes: float = 0.0  # bytes shipped to a remote device with the task
    precision: str = "fp32"
    operator_histogram: dict[str, int] = field(default_factory=dict)

    def operator_mask(self) -> int:
        """Return the operator-family mask this task needs."""
        return mask_of(OperatorFamily, self.operator_histogram, what="operator family")


@dataclass(frozen=True)
class Requirements:
    """Hard requirements; a device that fails one is rejected with its reason."""

    kinds: tuple[str, ...] = ()  # empty = any kind
    # None = the semantics' precision; several = each device runs the fastest it offers
    precision: str | tuple[str, ...] | None = None
    operator_families: tuple[str, ...] | None = None  # None = the semantics' families
    # the formats the task is compiled for (onnx, rknn, hef, xmodel, engine, ...); None = any
    model_format: str | tuple[str, ...] | None = None
    min_memory_bytes: float = 0.0  # per device
    device_count: int = 1
    max_latency_s: float = 0.0  # 0 = no bound
    deadline_s: float = 0.0  # relative to placement time; 0 = none
    config_id: int = 0  # required FPGA configuration; 0 = none
    drop_if_late: bool = False  # leave unplaced (not late) when no device meets the deadline

    def formats(self) -> tuple[str, ...]:
        """Return the accepted model formats (empty = any)."""
        fmt = self.model_format
        return () if fmt is None else (fmt,) if isinstance(fmt, str) else tuple(fmt)


@dataclass(frozen=True)
class TaskContract:
    """A task as submitted: identity, class, hard requirements, soft intent, semantics."""

    semantics: Semantics
    requirements: Requirements = Requirements()
    task_class: str = "default"  # tasks of one class share correction factors
    priority: int = 0  # higher runs first
    tenant: str = "default"
    policy: str | None = None  # preferred policy name (soft)
    model: str | None = None  # model file or name, for execution

    def memory_needed(self) -> float:
        """Return the bytes of memory the task needs on each device it runs on."""
        sem = self.semantics
        return max(self.requirements.min_memory_bytes, sem.param_bytes + sem.activation_bytes)

    def precision(self) -> Precision:
        """Return the precision the task runs at (the first, when several are allowed)."""
        return self.precisions()[0]

    def precisions(self) -> tuple[Precision, ...]:
        """Return the precisions the task may run at, the preferred first."""
        req = self.requirements.precision or self.semantics.precision
        names = (req,) if isinstance(req, str) else req
        return tuple(Precision(parse_name(Precision, n, what="precision")) for n in names)

    def to_dict(self) -> dict[str, Any]:
        """Return the contract as a JSON-ready document (the inverse of ``from_dict``)."""
        doc = asdict(self)
        doc["requirements"]["kinds"] = list(self.requirements.kinds)
        for key in ("precision", "model_format"):
            if isinstance(doc["requirements"][key], tuple):
                doc["requirements"][key] = list(doc["requirements"][key])
        if self.requirements.operator_families is not None:
            doc["requirements"]["operator_families"] = list(self.requirements.operator_families)
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> TaskContract:
        """Build a contract from a JSON document, raising ContractError naming the field."""
        return _parse_contract(doc)


def _check_keys(doc: Mapping[str, Any], allowed: set[str], where: str) -> None:
    if not isinstance(doc, Mapping):
        raise ContractError(f"{where}: expected an object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise ContractError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def _number(
    doc: Mapping[str, Any], key: str, where: str, default: float = 0.0, top: float = MAX_AMOUNT
) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ContractError(f"{where}.{key}: expected a number, got {value!r}")
    if isinstance(value, int) and not 0 <= value < top:  # before float(): huge ints overflow
        raise ContractError(f"{where}.{key}: must be a number in [0, {top:g}), got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ContractError(f"{where}.{key}: must be a finite number >= 0, got {value!r}")
    if value >= top:
        raise ContractError(f"{where}.{key}: must be a number in [0, {top:g}), got {value!r}")
    return float(value)


def _string_list(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ContractError(f"{where}.{key}: expected a list of strings, got {value!r}")
    return tuple(value)


def _names(doc: Mapping[str, Any], key: str, where: str) -> str | tuple[str, ...] | None:
    """Return a name, a non-empty list of names (as a tuple), or None."""
    value = doc.get(key)
    if isinstance(value, list):
        if not value or not all(isinstance(v, str) for v in value):
            raise ContractError(f"{where}.{key}: expected a name or a non-empty list of names")
        return tuple(value)
    return _optional_str(doc, key, where)


def _optional_str(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise ContractError(f"{where}.{key}: expected a string, got {value!r}")
    return value


#: Longest tenant or task class name (they label metrics, pools and tier rules).
NAME_MAX = 64


def _name(doc: Mapping[str, Any], key: str) -> str | None:
    """Return a tenant or task class name: printable, at most ``NAME_MAX`` characters."""
    value = _optional_str(doc, key, "contract")
    if value is not None and (len(value) > NAME_MAX or not value.isprintable()):
        shown = value[:20] + ("..." if len(value) > 20 else "")
        raise ContractError(
            f"contract.{key}: expected a printable name of at most {NAME_MAX} characters, "
            f"got {shown!r} ({len(value)} characters)"
        )
    return value


def _parse_semantics(doc: Mapping[str, Any]) -> Semantics:
    where = "semantics"
    _check_keys(doc, {f for f in Semantics.__dataclass_fields__}, where)
    hist = doc.get("operator_histogram", {})
    if not isinstance(hist, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in hist.items()
    ):
        raise ContractError(f"{where}.operator_histogram: expected {{family: count >= 0}}")
    sem = Semantics(
        gflops=_number(doc, "gflops", where),
        param_bytes=_number(doc, "param_bytes", where),
        activation_bytes=_number(doc, "activation_bytes", where),
        input_bytes=_number(doc, "input_bytes", where),
        precision=_optional_str(doc, "precision", where) or "fp32",
        operator_histogram=dict(hist),
    )
    try:
        parse_name(Precision, sem.precision, what="precision")
        sem.operator_mask()
    except ValueError as err:
        raise ContractError(f"{where}: {err}") from None
    return sem


def _flag(doc: Mapping[str, Any], key: str, where: str) -> bool:
    value = doc.get(key, False)
    if not isinstance(value, bool):
        raise ContractError(f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _parse_requirements(doc: Mapping[str, Any]) -> Requirements:
    where = "requirements"
    _check_keys(doc, {f for f in Requirements.__dataclass_fields__}, where)
    count = doc.get("device_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_DEVICE_COUNT:
        raise ContractError(f"{where}.device_count: expected an integer 1..{MAX_DEVICE_COUNT}")
    config = doc.get("config_id", 0)
    if isinstance(config, bool) or not isinstance(config, int) or not 0 <= config <= MAX_CONFIG_ID:
        raise ContractError(f"{where}.config_id: expected an integer 0..{MAX_CONFIG_ID}")
    req = Requirements(
        kinds=_string_list(doc, "kinds", where) or (),
        precision=_names(doc, "precision", where),
        operator_families=_string_list(doc, "operator_families", where),
        model_format=_names(doc, "model_format", where),
        min_memory_bytes=_number(doc, "min_memory_bytes", where),
        device_count=count,
        max_latency_s=_number(doc, "max_latency_s", where, top=MAX_SECONDS),
        deadline_s=_number(doc, "deadline_s", where, top=MAX_SECONDS),
        config_id=config,
        drop_if_late=_flag(doc, "drop_if_late", where),
    )
    try:
        kinds_mask(list(req.kinds))
        if req.precision is not None:
            names = (req.precision,) if isinstance(req.precision, str) else req.precision
            mask_of(Precision, names, what="precision")
        if req.operator_families is not None:
            mask_of(OperatorFamily, req.operator_families, what="operator family")
        mask_of(ModelFormat, req.formats(), what="model format")
    except ValueError as err:
        raise ContractError(f"{where}: {err}") from None
    return req


def _parse_contract(doc: Mapping[str, Any]) -> TaskContract:
    _check_keys(doc, {f for f in TaskContract.__dataclass_fields__}, "contract")
    if "semantics" not in doc:
        raise ContractError("contract.semantics: required (gflops at least, or give a model)")
    priority = doc.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ContractError(f"contract.priority: expected an integer, got {priority!r}")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise ContractError(
            f"contract.priority: must be within -{MAX_PRIORITY}..{MAX_PRIORITY}, got {priority}"
        )
    return TaskContract(
        semantics=_parse_semantics(doc["semantics"]),
        requirements=_parse_requirements(doc.get("requirements", {})),
        task_class=_name(doc, "task_class") or "default",
        priority=priority,
        tenant=_name(doc, "tenant") or "default",
        policy=_optional_str(doc, "policy", "contract"),
        model=_optional_str(doc, "model", "contract"),
    )
