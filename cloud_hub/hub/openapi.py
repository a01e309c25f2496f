"""The hub's OpenAPI 3.1 document (served at ``/v1/openapi.json``)."""

from __future__ import annotations

from typing import Any

from edge_agent import __version__
from edge_agent.http_errors import ERROR_SCHEMA

_ERROR = {"$ref": "#/components/schemas/Error"}
_SIGNED: list[dict[str, list[str]]] = [{"agentSignature": []}]
_ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}]
_AGENT = {"name": "agent_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(summary: str, *, security: Any = None, params: Any = None, body: bool = False) -> Any:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {
            "200": {"description": "OK"},
            "default": {
                "description": "error",
                "content": {"application/json": {"schema": _ERROR}},
            },
        },
    }
    if security is not None:
        op["security"] = security
    if params is not None:
        op["parameters"] = params
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    return op


def document() -> dict[str, Any]:
    """Return the OpenAPI document of every hub endpoint (protocol: docs/hub-protocol.md)."""
    agent = [_AGENT]
    return {
        "openapi": "3.1.0",
        "info": {"title": "hetmesh cloud hub", "version": __version__},
        "paths": {
            "/v1/enrol": {"post": _op("join token -> fleet credential (HMAC key)", body=True)},
            "/v1/hub/proof": {
                "post": _op(
                    "answer a nonce with proof of the join token (hub discovery)", body=True
                )
            },
            "/v1/agents/{agent_id}/heartbeat": {
                "post": _op(
                    "signed heartbeat; answers the desired policy and the moves to carry out",
                    security=_SIGNED,
                    params=agent,
                    body=True,
                )
            },
            "/v1/agents/{agent_id}/sync": {
                "post": _op(
                    "outbox records, exactly once by seq", security=_SIGNED, params=agent, body=True
                ),
                "get": _op(
                    "highest seq the hub holds (resume point)", security=_SIGNED, params=agent
                ),
            },
            "/v1/fleet": {
                "get": _op(
                    "agents with liveness, devices, decisions, policies, throughput, mesh "
                    "links (state, RTT), each site's carbon, deferred work and moves"
                )
            },
            "/v1/agents": {"get": _op("agents with liveness state and last seen")},
            "/v1/devices": {"get": _op("devices with live utilization (null when stale)")},
            "/v1/decisions": {"get": _op("recent placement decisions with why-here")},
            "/v1/policies": {
                "get": _op("policies, latest version and rollout"),
                "post": _op("store a new version of a policy", security=_ADMIN, body=True),
            },
            "/v1/policies/{name}": {
                "get": _op("every version of a policy", params=[{**_AGENT, "name": "name"}])
            },
            "/v1/rollouts": {
                "get": _op("rollouts, newest first"),
                "post": _op(
                    "roll a version out: selector, canary fraction, health gate",
                    security=_ADMIN,
                    body=True,
                ),
            },
            "/v1/events": {"get": _op("server-sent events: the fleet snapshot as it changes")},
            "/v1/health": {"get": _op("hub health")},
            "/v1/reevaluation": {
                "get": _op(
                    "fleet-wide re-evaluation of deferred and queued work: moves that pay, "
                    "issued moves and their outcomes (?fresh=1: evaluate now)"
                )
            },
            "/v1/models": {
                "get": _op("registered predictor versions with their metrics"),
                "post": _op("register an ONNX predictor version", security=_ADMIN, body=True),
            },
            "/v1/models/{version}/onnx": {
                "get": _op(
                    "one version's ONNX file (sha256 checked before sending)",
                    params=[{**_AGENT, "name": "version", "schema": {"type": "integer"}}],
                )
            },
            "/v1/learning": {
                "get": _op(
                    "federated runs (run_id a string: 64-bit), models and per-agent predictor error"
                )
            },
            "/v1/learning/runs": {"post": _op("start a federated run now", security=_ADMIN)},
            "/v1/agents/{agent_id}/learning": {
                "post": _op(
                    "agent's predictor report; answers the latest model and SuperNode wanted",
                    security=_SIGNED,
                    params=agent,
                    body=True,
                )
            },
            "/v1/openapi.json": {"get": _op("this document")},
            "/metrics": {"get": _op("Prometheus metrics")},
        },
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "agentSignature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Hetmesh-Signature",
                    "description": "HMAC-SHA256 with the agent's key over method, path and "
                    "query, sha256(body), X-Hetmesh-Timestamp, X-Hetmesh-Nonce, "
                    "X-Hetmesh-Agent and X-Hetmesh-Recipient (the hub's id, from the "
                    "enrolment answer); a request signed for another hub, a reused nonce or "
                    "a timestamp outside the clock window is refused (401; a stale one with "
                    "reason and hub_time, signed). Answers carry "
                    "X-Hetmesh-Response-Signature. The scheme: docs/mesh.md, 'Signed "
                    "requests and answers'; docs/security.md.",
                },
                "adminToken": {"type": "http", "scheme": "bearer"},
            },
        },
    }
