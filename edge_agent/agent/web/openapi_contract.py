"""JSON Schema of a task contract as the agent's intake accepts it (for ``/v1/openapi.json``).

The schema says what intake checks, so that a body valid by it is accepted and one invalid by
it is refused: one of ``model``, ``semantics`` or ``command`` is required; names come from the
vocabulary (``edge_agent.resources.vocab``); numbers have intake's bounds; a deferrable task
needs ``requirements.deadline_s > 0``. ``model`` lists the models this agent has and
``command`` the argv[0] its allowlist permits, so the served document is this agent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from edge_agent.resources.vocab import DeviceKind, ModelFormat, OperatorFamily, Precision
from edge_agent.tasks.contract import (
    KIND_GROUPS,
    MAX_AMOUNT,
    MAX_CONFIG_ID,
    MAX_DEVICE_COUNT,
    MAX_PRIORITY,
    MAX_SECONDS,
    NAME_MAX,
)

#: What no value satisfies (a field this agent refuses whatever it holds).
NEVER: dict[str, Any] = {"not": {}}


def names(enum: type[IntEnum]) -> list[str]:
    """Return the lower-case member names of ``enum`` (the spelling the API documents)."""
    return [m.name.lower() for m in enum]


def _amount(top: float = MAX_AMOUNT) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "exclusiveMaximum": top}


def _one_or_many(values: list[str]) -> dict[str, Any]:
    """A name, a non-empty list of names, or null (none asked for)."""
    return {
        "anyOf": [
            {"type": "null"},
            {"enum": values},
            {"type": "array", "minItems": 1, "items": {"enum": values}},
        ]
    }


#: A tenant or task class: printable (ASCII documented), at most NAME_MAX characters.
_NAME = {"type": ["string", "null"], "maxLength": NAME_MAX, "pattern": "^[ -~]*$"}

SEMANTICS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "description": "how heavy the task is (omitted numbers are 0)",
    "properties": {
        "gflops": _amount(),
        "param_bytes": _amount(),
        "activation_bytes": _amount(),
        "input_bytes": _amount(),
        "precision": {"enum": [*names(Precision), None]},
        "operator_histogram": {
            "type": "object",
            "propertyNames": {"enum": names(OperatorFamily)},
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
    },
}

REQUIREMENTS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "description": "hard requirements; a device failing one is rejected with its reason",
    "properties": {
        "kinds": {
            "type": ["array", "null"],
            "items": {"enum": [*names(DeviceKind), *KIND_GROUPS]},
            "description": "device kinds or groups (cpu, gpu, accelerator); empty: any",
        },
        "precision": {
            **_one_or_many(names(Precision)),
            "description": "several: each device runs the fastest it offers",
        },
        "operator_families": {"type": ["array", "null"], "items": {"enum": names(OperatorFamily)}},
        "model_format": {
            **_one_or_many(names(ModelFormat)),
            "description": "the formats the task is compiled for; null: any",
        },
        "min_memory_bytes": _amount(),
        "device_count": {"type": "integer", "minimum": 1, "maximum": MAX_DEVICE_COUNT},
        "max_latency_s": {**_amount(MAX_SECONDS), "description": "0: no bound"},
        "deadline_s": {**_amount(MAX_SECONDS), "description": "from submission; 0: none"},
        "config_id": {"type": "integer", "minimum": 0, "maximum": MAX_CONFIG_ID},
        "drop_if_late": {
            "type": "boolean",
            "description": "leave unplaced (not late) when no device meets the deadline",
        },
    },
}


def contract_schema(models: Sequence[str], allowlist: Sequence[str]) -> dict[str, Any]:
    """Return the Contract schema for an agent with these models and command allowlist."""
    model: dict[str, Any] = {
        "anyOf": [{"enum": list(models)}, {"type": "null"}] if models else [{"type": "null"}],
        "description": "a model in this agent's model directory (its semantics are read "
        "from the file); upload one with POST /v1/models",
    }
    command = (
        {
            "type": "array",
            "minItems": 1,
            "prefixItems": [{"enum": list(allowlist)}],
            "items": {"type": "string"},
            "description": "argv of a command task; argv[0] from the config's command_allowlist",
        }
        if allowlist
        else {**NEVER, "description": "command tasks are off: the command_allowlist is empty"}
    )
    ways: list[dict[str, Any]] = [{"required": ["semantics"]}]
    if models:
        ways.append({"required": ["model"], "properties": {"model": {"enum": list(models)}}})
    if allowlist:
        ways.append({"required": ["command"]})
    return {
        "type": "object",
        "additionalProperties": False,
        "description": "a task contract: give `model` (its semantics are extracted), "
        "`semantics` (an opaque task) or `command` (an allowlisted program)",
        "anyOf": ways,
        "properties": {
            "model": model,
            "semantics": SEMANTICS,
            "requirements": REQUIREMENTS,
            "task_class": _NAME,
            "priority": {"type": "integer", "minimum": -MAX_PRIORITY, "maximum": MAX_PRIORITY},
            "tenant": _NAME,
            "policy": {"type": ["string", "null"], "description": "preferred policy (soft)"},
            "deferrable": {
                "type": "boolean",
                "description": "hold until a low-carbon, low-load hour that still meets "
                "requirements.deadline_s (required, > 0, when true)",
            },
            "command": command,
        },
        "if": {"required": ["deferrable"], "properties": {"deferrable": {"const": True}}},
        "then": {
            "required": ["requirements"],
            "properties": {
                "requirements": {
                    "required": ["deadline_s"],
                    "properties": {"deadline_s": {"exclusiveMinimum": 0}},
                }
            },
        },
    }
