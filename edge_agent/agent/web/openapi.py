"""The OpenAPI 3.1 document of the agent's HTTP API (served at ``/v1/openapi.json``).

The served document is this agent's: the Contract schema lists its models and the commands its
allowlist permits, and the signed mesh routes (``/mesh/v1/*``) appear when the mesh is on.
``tests/test_openapi_schemathesis.py`` checks a live agent against it with schemathesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edge_agent import __version__
from edge_agent.agent.core.store import STATES
from edge_agent.agent.web.openapi_contract import contract_schema
from edge_agent.agent.web.openapi_mesh import MESH_PATHS, MESH_SECURITY
from edge_agent.http_errors import ERROR_SCHEMA, OPENAPI_ANSWER

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
    "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[ -~]*$"},
    "description": "a retry with the same key returns the first task, never a second",
}
_OBJ: dict[str, Any] = {"type": "object"}
#: Most contracts in one batch (the route's limit, edge_agent/agent/web/api.py).
MAX_BATCH = 1000
_LIST: dict[str, Any] = {"type": "array", "items": _OBJ}


def _ok(description: str, props: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    """A JSON answer ``{"ok": true, ...props}`` (every prop required)."""
    fields = {"ok": {"const": True}, **(props or {})}
    schema = {"type": "object", "required": list(fields), "properties": fields}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "responses": {**responses, "4XX": _ERROR},
        **extra,
    }


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_TASK: dict[str, Any] = {
    "type": "object",
    "required": ["id", "state", "contract", "submitted_at", "held_until", "links"],
    "properties": {
        "id": {"type": "string"},
        "state": {"enum": list(STATES)},
        "contract": _OBJ,
        "command": {"type": ["array", "null"], "items": {"type": "string"}},
        "submitted_at": {"type": "number"},
        "held_until": {"type": ["string", "null"], "description": "ISO 8601 UTC, when held"},
        "waiting": {"type": "string", "description": "why its pool holds it back"},
        "links": {"type": "object", "required": ["self", "explain"]},
    },
}
_TASK_REF = {"$ref": "#/components/schemas/Task"}
#: Follow-ups of a submission, for clients and schemathesis's stateful phase.
_LINKS = {
    "GetTask": {"operationId": "getTask", "parameters": {"task_id": "$response.body#/task/id"}},
    "ExplainTask": {
        "operationId": "explainTask",
        "parameters": {"task_id": "$response.body#/task/id"},
    },
    "CancelTask": {
        "operationId": "cancelTask",
        "parameters": {"task_id": "$response.body#/task/id"},
    },
}
_EXPLAIN: dict[str, Any] = {
    "anyOf": [
        {"type": "object", "required": ["ok", "task_id", "state", "placed", "why_here"]},
        {"type": "object", "required": ["ok", "device", "why"], "description": "?device="},
    ]
}


def _task_paths() -> dict[str, Any]:
    contract = {"$ref": "#/components/schemas/Contract"}
    accepted = _ok("accepted and committed", {"created": {"type": "boolean"}, "task": _TASK_REF})
    accepted["links"] = _LINKS
    tasks = {"type": "array", "items": contract, "minItems": 1, "maxItems": MAX_BATCH}
    batch = {
        "type": "object",
        "required": ["tasks"],
        "additionalProperties": False,
        "properties": {"tasks": tasks},
    }
    listed = {"type": "array", "items": _TASK_REF}
    return {
        "/v1/tasks": {
            "post": _op(
                "submitTask",
                "submit a task",
                {"202": accepted},
                parameters=[_KEY],
                requestBody=_json_body(contract),
            ),
            "get": _op(
                "listTasks",
                "list tasks, newest first",
                {"200": _ok("tasks", {"tasks": listed})},
                parameters=[
                    {"name": "state", "in": "query", "schema": {"enum": list(STATES)}},
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
                "submitTasks",
                "submit up to 1000 tasks atomically",
                {"202": _ok("accepted and committed", {"tasks": listed})},
                parameters=[_KEY],
                requestBody=_json_body(batch),
            ),
        },
        "/v1/tasks/{task_id}": {
            "get": _op(
                "getTask",
                "one task",
                {"200": _ok("the task", {"task": _TASK_REF})},
                parameters=[_TASK_ID],
            ),
        },
        "/v1/tasks/{task_id}:cancel": {
            "post": _op(
                "cancelTask",
                "cancel a task that has not started (409 once it has)",
                {"200": _ok("cancelled", {"task": _TASK_REF})},
                parameters=[_TASK_ID],
            ),
        },
        "/v1/tasks/{task_id}/explain": {
            "get": _op(
                "explainTask",
                "why here, why not there (409 before it is placed)",
                {
                    "200": {
                        "description": "the decision, or one device's rejection",
                        "content": {"application/json": {"schema": _EXPLAIN}},
                    }
                },
                parameters=[
                    _TASK_ID,
                    {"name": "device", "in": "query", "schema": {"type": "string"}},
                ],
            ),
        },
    }


def _other_paths() -> dict[str, Any]:
    name = {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}
    upload = {
        "model": {"type": "string"},
        "sha256": {"type": "string"},
        "gflops": {"type": "number"},
        "precision": {"type": "string"},
    }
    return {
        "/v1/models": {
            "get": _op(
                "listModels",
                "model names",
                {"200": _ok("models", {"models": {"type": "array", "items": {"type": "string"}}})},
            ),
            "post": _op(
                "uploadModel",
                "upload an ONNX model (400 when the bytes are not a valid ONNX model)",
                {"201": _ok("stored", upload)},
                parameters=[{"name": "name", "in": "query", "required": True, "schema": name}],
                requestBody={
                    "required": True,
                    "content": {
                        "application/octet-stream": {
                            "schema": {"type": "string", "format": "binary", "minLength": 1}
                        }
                    },
                },
            ),
        },
        "/v1/devices": {
            "get": _op(
                "listDevices",
                "devices with live state",
                {"200": _ok("devices", {"devices": _LIST})},
            )
        },
        "/v1/pools": {
            "get": _op(
                "listPools",
                "resource pools: quota, used, borrowed, lent, waiting",
                {"200": _ok("pools", {"pools": _LIST})},
            )
        },
        "/v1/peers": {
            "get": _op(
                "listPeers",
                "mesh peers: id, address, state, trust, last seen, kinds; mesh counters",
                {"200": _ok("peers", {"enabled": {"type": "boolean"}, "peers": _LIST})},
            )
        },
        "/v1/health": {
            "get": _op(
                "health",
                "health: status, problems, storage, hub link, predictor",
                {
                    "200": _ok(
                        "health", {"status": {"type": "string"}, "problems": {"type": "array"}}
                    )
                },
            )
        },
        "/v1/status": {
            "get": _op(
                "status",
                "status page data: health, devices, recent tasks, queue (deferred included), "
                "mesh peers, hub link, policy",
                {"200": _ok("status", {"health": _OBJ, "devices": _LIST, "tasks": _LIST})},
            )
        },
        "/v1/openapi.json": {
            "get": _op(
                "openapi",
                "this document",
                OPENAPI_ANSWER,
            )
        },
        "/metrics": {
            "get": _op(
                "metrics",
                "Prometheus metrics",
                {"200": {"description": "text exposition", "content": {"text/plain": {}}}},
            )
        },
    }


#: ``[api] auth`` on: every operation but health (and the mesh's own) needs the API token.
API_TOKEN: dict[str, Any] = {
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "the agent's API token, in <data_dir>/api_token on its box ([api] "
        "auth_token_file); docs/security.md, 'The agent's API token'",
    }
}


def document(
    models: Sequence[str] = (),
    allowlist: Sequence[str] = (),
    mesh: bool = False,
    auth: bool = False,
) -> dict[str, Any]:
    """Return the OpenAPI document of an agent with these models, allowlist, mesh state and
    ``[api] auth`` state."""
    paths = {**_task_paths(), **_other_paths(), **(MESH_PATHS if mesh else {})}
    schemes = {**(MESH_SECURITY if mesh else {}), **(API_TOKEN if auth else {})}
    top: dict[str, Any] = {}
    if auth:
        top["security"] = [{"apiToken": []}]
        paths["/v1/health"] = {"get": {**paths["/v1/health"]["get"], "security": []}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "hetmesh edge agent", "version": __version__},
        **top,
        "paths": paths,
        "components": {
            "schemas": {
                "Contract": contract_schema(models, allowlist),
                "Task": _TASK,
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
            "securitySchemes": schemes,
        },
    }
