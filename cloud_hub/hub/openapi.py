"""The hub's OpenAPI 3.1 document (served at ``/v1/openapi.json``).

Success codes and answers as the handlers give them; signed routes (agents only) answer 401
to anything not signed by an enrolled agent for this hub; admin routes 401 without the admin
token. ``tests/test_openapi_schemathesis.py`` checks a live hub against it.
"""

from __future__ import annotations

from typing import Any

from cloud_hub.hub import openapi_schemas as s
from edge_agent import __version__
from edge_agent.http_errors import ERROR_SCHEMA, OPENAPI_ANSWER

_ERROR = {"description": "refused", "content": {"application/json": {"schema": ERROR_SCHEMA}}}
_SIGNED: list[dict[str, list[str]]] = [{"agentSignature": []}]
_ADMIN: list[dict[str, list[str]]] = [{"adminToken": []}]
_AGENT = {
    "name": "agent_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
}
_UNSIGNED = {**_ERROR, "description": "not signed by this enrolled agent for this hub"}
_NO_ADMIN = {**_ERROR, "description": "no or a wrong 'Authorization: Bearer <admin token>'"}


def _op(
    summary: str,
    answers: dict[str, Any],
    *,
    security: Any = None,
    params: Any = None,
    body: dict[str, Any] | None = None,
) -> Any:
    responses = dict(answers)
    if security is _SIGNED:
        responses["401"] = _UNSIGNED
    elif security is _ADMIN:
        responses["401"] = _NO_ADMIN
    op: dict[str, Any] = {"summary": summary, "responses": {**responses, "4XX": _ERROR}}
    if security is not None:
        op["security"] = security
    if params is not None:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def _get(summary: str, answer: str, **kw: Any) -> Any:
    return _op(summary, {"200": s.ANSWERS[answer]}, **kw)


def _id_param(name: str, description: str) -> dict[str, Any]:
    """A path parameter naming one thing by id or unique prefix (edge_agent.id_prefix)."""
    schema = {"type": "string", "minLength": 1, "maxLength": 80, "pattern": "^[^/]+$"}
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema}  # fmt: skip


def _raw(description: str, media: str) -> dict[str, Any]:
    return {"description": description, "content": {media: {}}}


def _paths() -> dict[str, Any]:
    a, agent = s.ANSWERS, [_AGENT]
    return {
        "/v1/enrol": {
            "post": _op(
                "join token -> fleet credential (HMAC key); 401 for a wrong join token; an "
                "enrolled id again only signed with its current key (409 reason 'enrolled' "
                "unsigned) or after the admin released it",
                {"201": a["enrol"], "401": _ERROR, "409": _ERROR},
                body=s.ENROL,
            )
        },
        "/v1/hub/proof": {
            "post": _op(
                "answer a nonce with proof of the join token (hub discovery)",
                {"200": a["proof"]},
                body=s.PROOF,
            )
        },
        "/v1/agents/{agent_id}/heartbeat": {
            "post": _op(
                "signed heartbeat; answers the desired policy and the moves to carry out",
                {"200": a["heartbeat"]},
                security=_SIGNED,
                params=agent,
                body=s.SIGNED_BODY,
            )
        },
        "/v1/agents/{agent_id}/sync": {
            "post": _op(
                "outbox records, exactly once by seq",
                {"200": a["sync"]},
                security=_SIGNED,
                params=agent,
                body=s.SIGNED_BODY,
            ),
            "get": _get(
                "highest seq the hub holds (resume point)",
                "sync_state",
                security=_SIGNED,
                params=agent,
            ),
        },
        "/v1/agents/{agent_id}/key": {
            "delete": _op(
                "release an agent's id: forget its key (404: not enrolled)",
                {"200": a["released"], "404": _ERROR},
                security=_ADMIN,
                params=agent,
            )
        },
        "/v1/fleet": {
            "get": _get(
                "agents with liveness, devices, decisions, policies, throughput, mesh links "
                "(state, RTT), each site's carbon, deferred work and moves",
                "fleet",
            )
        },
        "/v1/agents": {"get": _get("agents with liveness state and last seen", "agents")},
        "/v1/devices": {"get": _get("devices with live utilization (null when stale)", "devices")},
        "/v1/decisions": {"get": _get("recent placement decisions with why-here", "decisions")},
        "/v1/policies": {
            "get": _get("policies, latest version and rollout", "policies"),
            "post": _op(
                "store a new version of a policy",
                {"201": a["policy_stored"]},
                security=_ADMIN,
                body=s.POLICY,
            ),
        },
        "/v1/policies/{name}": {
            "get": _get(
                "every version of a policy (404: none)",
                "versions",
                params=[{**_AGENT, "name": "name", "schema": {"type": "string"}}],
            )
        },
        "/v1/rollouts": {
            "get": _get("rollouts, newest first", "rollouts"),
            "post": _op(
                "roll a version out: selector, canary fraction, health gate",
                {"201": a["rollout"]},
                security=_ADMIN,
                body=s.ROLLOUT,
            ),
        },
        "/v1/events": {
            "get": _op(
                "server-sent events: the fleet snapshot as it changes",
                {"200": _raw("an event stream (not JSON)", "text/event-stream")},
            )
        },
        "/v1/health": {"get": _get("hub health", "health")},
        "/v1/reevaluation": {
            "get": _get(
                "fleet-wide re-evaluation of deferred and queued work: moves that pay, "
                "issued moves and their outcomes (?fresh=1: evaluate now)",
                "reevaluation",
                params=[{"name": "fresh", "in": "query", "schema": {"type": "string"}}],
            )
        },
        "/v1/models": {
            "get": _get("registered predictor versions with their metrics", "models"),
            "post": _op(
                "register an ONNX predictor version (400: not a valid ONNX model)",
                {"201": a["model"]},
                security=_ADMIN,
                body=s.MODEL_UPLOAD,
            ),
        },
        "/v1/models/{version}/onnx": {
            "get": _op(
                "one version's ONNX file (sha256 checked before sending; 404: no such version)",
                {"200": _raw("the ONNX bytes (X-Model-Sha256)", "application/octet-stream")},
                params=[
                    _id_param("version", "its number (3 or v3) or a unique sha256 prefix (4+)")
                ],
            )
        },
        "/v1/learning": {
            "get": _get(
                "federated runs (run_id a string: 64-bit), models and per-agent error", "learning"
            )
        },
        "/v1/learning/runs": {
            "post": _op(
                "start a federated run now; 409 while one is queued or running (its run_id) "
                "or when learning is off",
                {"202": a["run_queued"], "409": _ERROR},
                security=_ADMIN,
            )
        },
        "/v1/learning/runs/{run_id}": {
            "get": _get(
                "one federated run: the nodes that took part and each round's replies "
                "(404: no such run, or an ambiguous prefix)",
                "learning_run",
                params=[_id_param("run_id", "a whole Flower run id or a unique prefix (4+)")],
            )
        },
        "/v1/agents/{agent_id}/learning": {
            "post": _op(
                "agent's predictor report; answers the latest model and SuperNode wanted",
                {"200": a["agent_learning"]},
                security=_SIGNED,
                params=agent,
                body=s.SIGNED_BODY,
            )
        },
        "/v1/openapi.json": {
            "get": _op(
                "this document",
                OPENAPI_ANSWER,
            )
        },
        "/metrics": {
            "get": _op("Prometheus metrics", {"200": _raw("text exposition", "text/plain")})
        },
    }


def document() -> dict[str, Any]:
    """Return the OpenAPI document of every hub endpoint (protocol: docs/hub-protocol.md)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "hetmesh cloud hub", "version": __version__},
        "paths": _paths(),
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
