"""The signed mesh routes (``/mesh/v1/*``) in the agent's OpenAPI document.

Members call them, never people: each request must be signed with the fleet key for this
member (docs/mesh.md, "Signed requests and answers"); anything else is refused 401 before its
body is read. Bodies are strict JSON objects; unknown top-level fields are ignored.
"""

from __future__ import annotations

from typing import Any

from edge_agent.http_errors import ERROR_SCHEMA

_SIGNED: list[dict[str, list[str]]] = [{"fleetSignature": []}]
_REFUSED = {
    "description": "not signed for this member with the fleet key (reason in `error`); "
    "the answer is not signed",
    "content": {"application/json": {"schema": ERROR_SCHEMA}},
}
_SIGNED_ANSWER = {
    "description": "the answer, signed (X-Hetmesh-Response-Signature) over the request's "
    "nonce, status and body",
    "headers": {"X-Hetmesh-Response-Signature": {"schema": {"type": "string"}}},
    "content": {"application/json": {"schema": {"type": "object"}}},
}
_ERROR = {
    "description": "refused (signed)",
    "content": {"application/json": {"schema": {"type": "object", "required": ["ok", "status"]}}},
}


def _route(op_id: str, summary: str, **more: Any) -> dict[str, Any]:
    return {
        "post": {
            "operationId": op_id,
            "summary": summary,
            "security": _SIGNED,
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {"200": _SIGNED_ANSWER, "401": _REFUSED, **more, "4XX": _ERROR},
        }
    }


MESH_PATHS: dict[str, Any] = {
    "/mesh/v1/hello": _route(
        "meshHello",
        "a member introduces itself: id, kinds, endpoint; `to` names the address:port it was "
        "sent to",
        **{"421": {**_ERROR, "description": "`to` is not an address this member listens on"}},
    ),
    "/mesh/v1/heartbeat": _route("meshHeartbeat", "liveness and load of a trusted peer"),
    "/mesh/v1/bid": _route("meshBid", "estimate for a contract (placed, then released)"),
    "/mesh/v1/tasks": _route(
        "meshForward", "run a forwarded task: idempotency key, attempt, lease, payload"
    ),
    "/mesh/v1/tasks/cancel": _route(
        "meshCancel", "cancel a forwarded attempt, or ask its final state (leaves a fence)"
    ),
}

MESH_SECURITY: dict[str, Any] = {
    "fleetSignature": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Hetmesh-Signature",
        "description": "HMAC-SHA256 with the fleet key over method, path and query, "
        "sha256(body), X-Hetmesh-Timestamp, X-Hetmesh-Nonce, X-Hetmesh-Agent and "
        "X-Hetmesh-Recipient (this member's agent id); docs/mesh.md, 'Signed requests "
        "and answers'",
    }
}
