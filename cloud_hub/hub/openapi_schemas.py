"""Request and answer schemas of the hub's OpenAPI document (``cloud_hub/hub/openapi.py``).

Request schemas say what the handlers check (``wire``, ``Policy.from_dict``, the rollout and
model handlers); answers are ``{"ok": true, ...}`` with the fields clients read required.
"""

from __future__ import annotations

from typing import Any

from edge_agent.placement.layout import OBJECTIVE_NAMES
from edge_agent.placement.policy import RULE_DEFAULTS, SCHEMA, TEMPLATES

MAX_INT = 2**63 - 1
_OBJ: dict[str, Any] = {"type": "object"}
_LIST: dict[str, Any] = {"type": "array", "items": _OBJ}
_AGENT_ID = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}
_SHORT = {"type": ["string", "null"], "minLength": 1, "maxLength": 200}


def ok(description: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON answer ``{"ok": true, ...props}`` with every named prop required."""
    fields = {"ok": {"const": True}, **(props or {})}
    schema = {"type": "object", "required": list(fields), "properties": fields}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ENROL = {
    "type": "object",
    "required": ["agent_id", "join_token"],
    "properties": {
        "agent_id": _AGENT_ID,
        "join_token": {"type": "string", "minLength": 1},
        "labels": {
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"type": "string"},
            "description": "short labels (a key and its value: 200 characters at most)",
        },
        "board": _SHORT,
        "hostname": _SHORT,
    },
}
PROOF = {
    "type": "object",
    "required": ["nonce"],
    "properties": {"nonce": {"type": "string", "pattern": "^[0-9a-f]{32,128}$"}},
}
_WEIGHTS = {
    "type": "object",
    "propertyNames": {"enum": list(OBJECTIVE_NAMES)},
    "additionalProperties": {"type": "number", "minimum": 0},
    "description": "objective -> weight (>= 0, at least one > 0; normalised to sum 1)",
}
POLICY = {
    "type": "object",
    "additionalProperties": False,
    "description": "a policy document: exactly one of weights, template or blend",
    "oneOf": [
        {"required": ["weights"]},
        {"required": ["template"]},
        {"required": ["blend"]},
    ],
    "properties": {
        "schema": {"const": SCHEMA},
        "name": {"type": "string", "minLength": 1},
        "version": {"type": "integer", "minimum": 1, "description": "ignored: the next"},
        "weights": _WEIGHTS,
        "template": {"enum": list(TEMPLATES)},
        "blend": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": list(TEMPLATES)},
            "additionalProperties": {"type": "number", "minimum": 0},
            "description": "template -> fraction",
        },
        "rules": {
            "type": "object",
            "propertyNames": {"enum": list(RULE_DEFAULTS)},
            "description": "placement rules (docs/policies.md); each is checked on its own",
        },
    },
}
ROLLOUT = {
    "type": "object",
    "required": ["name", "version"],
    "properties": {
        "name": {"type": "string"},
        "version": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
        "selector": {"type": "object", "additionalProperties": {"type": "string"}},
        "canary_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "max_slo_misses": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
        "gate_timeout_s": {"type": ["number", "null"], "exclusiveMinimum": 0},
    },
}
MODEL_UPLOAD = {
    "type": "object",
    "required": ["onnx_base64"],
    "properties": {
        "onnx_base64": {"type": "string", "contentEncoding": "base64"},
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}
SIGNED_BODY = {"type": "object", "description": "docs/hub-protocol.md"}

ANSWERS: dict[str, dict[str, Any]] = {
    "enrol": ok(
        "enrolled: the agent's key and whom to sign for",
        {
            "agent_id": {"type": "string"},
            "hub_id": {"type": "string"},
            "key": {"type": "string"},
            "heartbeat_interval_s": {"type": "number"},
        },
    ),
    "proof": ok(
        "proof of the join token, bound to this endpoint",
        {"hub_id": {"type": "string"}, "endpoint": {"type": "string"}, "proof": {"type": "string"}},
    ),
    "heartbeat": ok(
        "the desired policy and the moves to carry out (signed)",
        {"desired_policy": {"type": ["string", "null"]}, "moves": _LIST},
    ),
    "sync": ok("applied, duplicate and lost counts (signed)"),
    "sync_state": ok("the resume point (signed)", {"acked": {"type": "integer"}}),
    "fleet": {
        "description": "the fleet snapshot",
        "content": {"application/json": {"schema": {"type": "object", "required": ["agents"]}}},
    },
    "agents": ok("agents", {"agents": _LIST}),
    "devices": ok("devices", {"devices": _LIST}),
    "decisions": ok("decisions", {"decisions": _LIST}),
    "policies": ok("policies", {"policies": _LIST}),
    "released": ok(
        "the agent's key is forgotten: its id may be enrolled again",
        {"agent_id": {"type": "string"}, "released": {"type": "boolean"}},
    ),
    "policy_stored": ok(
        "stored as the next version",
        {"name": {"type": "string"}, "version": {"type": "integer"}, "document": _OBJ},
    ),
    "versions": ok("every version, newest first", {"versions": _LIST}),
    "rollouts": ok("rollouts", {"rollouts": _LIST}),
    "rollout": ok("the rollout, started", {"rollout": _OBJ}),
    "health": ok("hub health"),
    "reevaluation": ok("the latest re-evaluation and the moves issued"),
    "models": ok("versions", {"models": _LIST}),
    "model": ok("registered", {"model": _OBJ}),
    "learning": ok("runs, models, per-agent error", {"runs": _LIST, "models": _LIST}),
    "learning_run": ok(
        "one run: run_id (a string), status, nodes that took part, replies per round",
        {"run": {"type": "object", "required": ["run_id", "status", "nodes", "rounds"]}},
    ),
    "run_queued": {
        "description": "queued: it starts at once",
        "content": {
            "application/json": {
                "schema": {"type": "object", "required": ["ok", "queued"]},
            }
        },
    },
    "agent_learning": ok("the latest model and whether to run a SuperNode (signed)"),
}
