"""Who may call the hub: agents' signed requests (answers signed back) and the admin token.

Shared by the hub's routes (``api``) and its model and learning routes (``models_api``).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from cloud_hub.hub.service import Hub
from edge_agent.http_errors import ApiError
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.errors import AuthError, ClockSkew
from edge_agent.protocol.hub_auth import AGENT_HEADER, NONCE_HEADER, RESPONSE_HEADER, sign_answer

HUB = web.AppKey("hub", Hub)
#: The agent's id, its key and the nonce of a request whose signature held: its answer is signed.
_VERIFIED = web.RequestKey("hub_verified", tuple[str, FleetKey, str])
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def signed_request(request: web.Request, agent_id: str | None = None) -> tuple[str, bytes]:
    """Return (agent id, body) of a request signed for this hub with that agent's key; 401
    otherwise.

    One signing scheme for mesh and hub (``edge_agent.mesh.credential``, docs/hub-protocol.md
    §2): a bad signature, a request signed for another hub, a stale timestamp or a replayed
    nonce is refused and counted in ``hetmesh_hub_auth_failures_total{reason}``. The answer
    to a request whose signature held is signed, the refusal of a stale one included: it
    carries ``reason: "stale"`` and ``hub_time``, so the agent can tell its clock is off.
    """
    hub, body = request.app[HUB], await request.read()
    agent_id = request.match_info["agent_id"] if agent_id is None else agent_id
    try:
        if request.headers.get(AGENT_HEADER) != agent_id:
            raise AuthError(
                "agent_mismatch",
                f"sign the request as {agent_id} ({AGENT_HEADER} names the request's agent)",
            )
        hub.verifier.verify(request.method, request.path_qs, body, request.headers)
    except ClockSkew as err:  # genuine, but our clocks disagree: say our time, signed
        hub.metrics.auth_failures.labels(err.reason).inc()
        request[_VERIFIED] = (agent_id, hub.verifier.key_for(agent_id), err.nonce)
        raise ApiError(
            401, f"{err}; see docs/security.md", reason="stale", hub_time=hub.clock()
        ) from None
    except AuthError as err:
        hub.metrics.auth_failures.labels(err.reason).inc()
        hint = " (re-enrol if the credential changed)" if err.reason == "bad_signature" else ""
        raise ApiError(401, f"{err}{hint}; see docs/hub-protocol.md §2") from None
    key = hub.verifier.key_for(agent_id)
    request[_VERIFIED] = (agent_id, key, request.headers[NONCE_HEADER])
    return agent_id, body


@web.middleware
async def sign_answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sign the answer (errors included) to every request ``signed_request`` verified."""
    resp = await handler(request)
    verified = request.get(_VERIFIED)
    if verified is not None and isinstance(resp, web.Response) and isinstance(resp.body, bytes):
        agent_id, key, nonce = verified
        hub = request.app[HUB]
        resp.headers[RESPONSE_HEADER] = sign_answer(
            key, hub.hub_id, agent_id, nonce, resp.status, resp.body
        )
    return resp


def require_admin(request: web.Request) -> None:
    """Raise 401 unless the request carries the hub's admin token (``Bearer``)."""
    token = request.app[HUB].admin_token
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(
            401,
            f"{request.method} {request.path} changes the fleet: send 'Authorization: Bearer "
            "<admin token>' (the hub's admin_token: its config, or secrets.json in its data "
            "directory)",
        )
