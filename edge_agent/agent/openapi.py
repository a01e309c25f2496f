"""The OpenAPI 3.1 document of the agent's HTTP API (served at ``/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from edge_agent import __version__
from edge_agent.http_errors import ERROR_SCHEMA

_ERROR = {"$ref": "#/components/responses/Error"}
_TASK_ID = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "description": "a task id, or a unique prefix of one (4 or more characters)",
    "schema": {"type": "string", "pattern": "^[^/:]{1,128}$"},
}
_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
    "description": "a retry with the same key returns the first task, never a second",
}


def _ok(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    body = schema or {"type": "object", "properties": {"ok": {"const": True}}}
    return {"description": description, "content": {"application/json": {"schema": body}}}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**responses, "4XX": _ERROR}, **extra}


_CONTRACT: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "description": "a task contract; give `model` (a name in the model directory) to have "
    "its semantics extracted, or `semantics` for an opaque task",
    "properties": {
        "model": {"type": "string"},
        "semantics": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "gflops": {"type": "number", "minimum": 0},
                "param_bytes": {"type": "number", "minimum": 0},
                "activation_bytes": {"type": "number", "minimum": 0},
                "input_bytes": {"type": "number", "minimum": 0},
                "precision": {"type": "string"},
                "operator_histogram": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                },
            },
        },
        "requirements": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kinds": {"type": "array", "items": {"type": "string"}},
                "precision": {"type": ["string", "null"]},
                "operator_families": {"type": ["array", "null"], "items": {"type": "string"}},
                "model_format": {"type": ["string", "null"]},
                "min_memory_bytes": {"type": "number", "minimum": 0},
                "device_count": {"type": "integer", "minimum": 1, "maximum": 8},
                "max_latency_s": {"type": "number", "minimum": 0},
                "deadline_s": {"type": "number", "minimum": 0},
                "config_id": {"type": "integer", "minimum": 0},
            },
        },
        "task_class": {"type": "string"},
        "priority": {"type": "integer"},
        "tenant": {"type": "string"},
        "policy": {"type": ["string", "null"]},
        "deferrable": {
            "type": "boolean",
            "description": "hold until a low-carbon, low-load hour that still meets "
            "requirements.deadline_s (required, > 0, when true)",
        },
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "argv of a command task; argv[0] must be allowlisted",
        },
    },
}


def document() -> dict[str, Any]:
    """Return the OpenAPI document."""
    contract = {"$ref": "#/components/schemas/Contract"}
    accepted = _ok("accepted and committed", {"type": "object"})
    return {
        "openapi": "3.1.0",
        "info": {"title": "hetmesh edge agent", "version": __version__},
        "paths": {
            "/v1/tasks": {
                "post": _op(
                    "submit a task",
                    {"202": accepted},
                    parameters=[_KEY],
                    requestBody={
                        "required": True,
                        "content": {"application/json": {"schema": contract}},
                    },
                ),
                "get": _op(
                    "list tasks, newest first",
                    {"200": _ok("tasks")},
                    parameters=[
                        {"name": "state", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10000},
                        },
                    ],
                ),
            },
            "/v1/tasks:batch": {
                "post": _op(
                    "submit up to 1000 tasks atomically",
                    {"202": accepted},
                    parameters=[_KEY],
                    requestBody={
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["tasks"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "tasks": {
                                            "type": "array",
                                            "items": contract,
                                            "minItems": 1,
                                            "maxItems": 1000,
                                        }
                                    },
                                }
                            }
                        },
                    },
                ),
            },
            "/v1/tasks/{task_id}": {
                "get": _op("one task", {"200": _ok("the task")}, parameters=[_TASK_ID]),
            },
            "/v1/tasks/{task_id}:cancel": {
                "post": _op(
                    "cancel a task that has not started",
                    {"200": _ok("cancelled")},
                    parameters=[_TASK_ID],
                ),
            },
            "/v1/tasks/{task_id}/explain": {
                "get": _op(
                    "why here, why not there",
                    {"200": _ok("the decision")},
                    parameters=[
                        _TASK_ID,
                        {"name": "device", "in": "query", "schema": {"type": "string"}},
                    ],
                ),
            },
            "/v1/models": {
                "get": _op("model names", {"200": _ok("models")}),
                "post": _op(
                    "upload an ONNX model",
                    {"201": _ok("stored")},
                    parameters=[
                        {
                            "name": "name",
                            "in": "query",
                            "required": True,
                            "schema": {
                                "type": "string",
                                "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                            },
                        }
                    ],
                    requestBody={
                        "required": True,
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary"}
                            }
                        },
                    },
                ),
            },
            "/v1/devices": {"get": _op("devices with live state", {"200": _ok("devices")})},
            "/v1/pools": {
                "get": _op(
                    "resource pools: quota, used, borrowed, lent, waiting", {"200": _ok("pools")}
                )
            },
            "/v1/peers": {
                "get": _op(
                    "mesh peers: id, address, state, trust, last seen, kinds; mesh counters",
                    {"200": _ok("peers")},
                )
            },
            "/v1/health": {"get": _op("health", {"200": _ok("health")})},
            "/v1/status": {
                "get": _op(
                    "status page data: health, devices, queue, deferred tasks (held_until), recent "
                    "tasks, mesh peers (state, RTT), hub link, policy",
                    {"200": _ok("status")},
                )
            },
            "/v1/openapi.json": {"get": _op("this document", {"200": _ok("OpenAPI")})},
            "/metrics": {
                "get": _op(
                    "Prometheus metrics",
                    {"200": {"description": "text exposition", "content": {"text/plain": {}}}},
                )
            },
        },
        "components": {
            "schemas": {
                "Contract": _CONTRACT,
                "Error": ERROR_SCHEMA,
            },
            "responses": {
                "Error": {
                    "description": "the request was refused",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
            },
        },
    }
