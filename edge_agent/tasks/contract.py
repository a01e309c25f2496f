"""Task contracts: what a submitter requires (hard) and intends (soft), and how heavy it is."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from json.encoder import encode_basestring_ascii
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


#: Most distinct name lists remembered per vocabulary lookup (names repeat across contracts).
NAME_CACHE_LIMIT = 1024


def kinds_mask(names: Iterable[str]) -> int:
    """Return the device-kind mask for kind names or groups (cpu, gpu, accelerator)."""
    return _kinds_mask(tuple(names))


@functools.lru_cache(maxsize=NAME_CACHE_LIMIT)
def _kinds_mask(names: tuple[str, ...]) -> int:
    mask = 0
    for name in names:
        group = KIND_GROUPS.get(name.strip().lower())
        if group is not None:
            for kind in group:
                mask |= 1 << kind
        else:
            mask |= 1 << parse_name(DeviceKind, name, what="device kind")
    return mask


@functools.lru_cache(maxsize=NAME_CACHE_LIMIT)
def names_mask(enum: type[IntEnum], names: tuple[str, ...], what: str) -> int:
    """Return ``mask_of(enum, names)``, remembered (ValueError naming a bad name, as it)."""
    return mask_of(enum, names, what=what)


@functools.lru_cache(maxsize=NAME_CACHE_LIMIT)
def _precisions(names: tuple[str, ...]) -> tuple[Precision, ...]:
    return tuple(Precision(parse_name(Precision, n, what="precision")) for n in names)


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
        hist = self.operator_histogram
        return names_mask(OperatorFamily, tuple(hist), "operator family") if hist else 0


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
        return _precisions((req,) if isinstance(req, str) else req)

    def to_dict(self) -> dict[str, Any]:
        """Return the contract as a JSON-ready document (the inverse of ``from_dict``).

        Field by field, in declaration order (what ``dataclasses.asdict`` writes, tuples as
        lists): the intake encodes this for every new contract, so no generic walk.
        """
        sem, req = self.semantics, self.requirements
        return {
            "semantics": {
                "gflops": sem.gflops,
                "param_bytes": sem.param_bytes,
                "activation_bytes": sem.activation_bytes,
                "input_bytes": sem.input_bytes,
                "precision": sem.precision,
                "operator_histogram": dict(sem.operator_histogram),
            },
            "requirements": {
                "kinds": list(req.kinds),
                "precision": _listed(req.precision),
                "operator_families": _listed(req.operator_families),
                "model_format": _listed(req.model_format),
                "min_memory_bytes": req.min_memory_bytes,
                "device_count": req.device_count,
                "max_latency_s": req.max_latency_s,
                "deadline_s": req.deadline_s,
                "config_id": req.config_id,
                "drop_if_late": req.drop_if_late,
            },
            "task_class": self.task_class,
            "priority": self.priority,
            "tenant": self.tenant,
            "policy": self.policy,
            "model": self.model,
        }

    def to_json(self) -> str:
        """Return ``json.dumps(self.to_dict())``, the same text, written field by field.

        The intake stores every new contract as this text: the generic encoder walking
        ``to_dict`` costs about twice as much. Numbers that are not finite floats (a
        contract built in code, not parsed) take the generic path.
        """
        sem, req = self.semantics, self.requirements
        numbers = (
            sem.gflops,
            sem.param_bytes,
            sem.activation_bytes,
            sem.input_bytes,
            req.min_memory_bytes,
            req.max_latency_s,
            req.deadline_s,
        )
        if set(map(type, numbers)) != {float} or not math.isfinite(sum(numbers)):
            return _encode(self.to_dict())
        gflops, param, activation, inputs, memory, latency, deadline = map(float.__repr__, numbers)
        counts = sem.operator_histogram
        hist = ", ".join(f"{_text(k)}: {_value(v)}" for k, v in counts.items()) if counts else ""
        return (
            f'{{"semantics": {{"gflops": {gflops}, "param_bytes": {param}, '
            f'"activation_bytes": {activation}, "input_bytes": {inputs}, '
            f'"precision": {_value(sem.precision)}, "operator_histogram": {{{hist}}}}}, '
            f'"requirements": {{"kinds": {_value(req.kinds) if req.kinds else "[]"}, '
            f'"precision": {_value(req.precision)}, '
            f'"operator_families": {_value(req.operator_families)}, '
            f'"model_format": {_value(req.model_format)}, "min_memory_bytes": {memory}, '
            f'"device_count": {_value(req.device_count)}, "max_latency_s": {latency}, '
            f'"deadline_s": {deadline}, "config_id": {_value(req.config_id)}, '
            f'"drop_if_late": {_value(req.drop_if_late)}}}, '
            f'"task_class": {_value(self.task_class)}, "priority": {_value(self.priority)}, '
            f'"tenant": {_value(self.tenant)}, "policy": {_value(self.policy)}, '
            f'"model": {_value(self.model)}}}'
        )

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> TaskContract:
        """Build a contract from a JSON document, raising ContractError naming the field."""
        return _parse_contract(doc)


_text = encode_basestring_ascii  # a str as ``json.dumps`` writes it
_encode = json.JSONEncoder().encode


def _value(value: Any) -> str:
    """Return a contract field's value as ``json.dumps`` writes it (the common types inline)."""
    kind = type(value)
    if kind is str:
        return _text(value)
    if value is None:
        return "null"
    if kind is int or kind is bool:
        return "true" if value is True else "false" if value is False else int.__repr__(value)
    if kind is tuple:
        return "[" + ", ".join(map(_value, value)) + "]"
    return _encode(value)


def with_deadline(contract: TaskContract, deadline_s: float) -> TaskContract:
    """Return ``contract`` with ``requirements.deadline_s`` set (``dataclasses.replace`` twice).

    A waiting task's deadline is counted again each time it is placed; ``replace`` walks
    every field through ``__init__`` (about 20 us for the two), this copies the two records.
    """
    req = object.__new__(Requirements)
    req.__dict__.update(contract.requirements.__dict__, deadline_s=deadline_s)
    out = object.__new__(TaskContract)
    out.__dict__.update(contract.__dict__, requirements=req)
    return out


def _listed(value: str | tuple[str, ...] | None) -> str | list[str] | None:
    return list(value) if isinstance(value, tuple) else value


def _check_keys(doc: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    if type(doc) is not dict and not isinstance(doc, Mapping):  # (the ABC check is slow)
        raise ContractError(f"{where}: expected an object, got {type(doc).__name__}")
    if allowed.issuperset(doc):
        return
    unknown = sorted(set(doc) - allowed)
    raise ContractError(
        f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
    )


_SEMANTICS_KEYS = frozenset(Semantics.__dataclass_fields__)
_REQUIREMENT_KEYS = frozenset(Requirements.__dataclass_fields__)
_CONTRACT_KEYS = frozenset(TaskContract.__dataclass_fields__)
_DEFAULT_REQUIREMENTS = Requirements()
_ABSENT = object()


def _number(
    doc: Mapping[str, Any], key: str, where: str, default: float = 0.0, top: float = MAX_AMOUNT
) -> float:
    value = doc.get(key, _ABSENT)
    if value is _ABSENT:
        return default
    kind = type(value)
    if (kind is float or kind is int) and 0 <= value < top:  # NaN fails the comparison
        return float(value)
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
    _check_keys(doc, _SEMANTICS_KEYS, where)
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
        _precisions((sem.precision,))
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
    _check_keys(doc, _REQUIREMENT_KEYS, where)
    if not doc:  # every field its default (frozen: one shared instance)
        return _DEFAULT_REQUIREMENTS
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
        kinds_mask(req.kinds)
        if req.precision is not None:
            names = (req.precision,) if isinstance(req.precision, str) else req.precision
            names_mask(Precision, names, "precision")
        if req.operator_families is not None:
            names_mask(OperatorFamily, req.operator_families, "operator family")
        names_mask(ModelFormat, req.formats(), "model format")
    except ValueError as err:
        raise ContractError(f"{where}: {err}") from None
    return req


def _parse_contract(doc: Mapping[str, Any]) -> TaskContract:
    _check_keys(doc, _CONTRACT_KEYS, "contract")
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
