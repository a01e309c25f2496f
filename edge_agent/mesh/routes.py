"""The signed peer endpoints, as an aiohttp sub-application mounted at ``/mesh/v1``.

Every request must carry a valid fleet signature (else 401, counted by reason); every
answer to a verified request is signed over the request's nonce, status and body.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from edge_agent.errors import InvalidInput
from edge_agent.http_errors import ApiError, parse_json_body
from edge_agent.http_limits import BODY_CAP
from edge_agent.mesh.credential import H_NONCE, H_RESPONSE, FleetKey, Verifier, sign_response
from edge_agent.mesh.errors import AuthError

_log = logging.getLogger(__name__)

#: Largest request body a peer endpoint accepts.
MAX_BODY = 1 << 20


class MeshHandlers(Protocol):
    """What the endpoints need from a node."""

    agent_id: str
    key: FleetKey
    verifier: Verifier

    def count(self, name: str) -> None: ...

    async def on_hello(self, sender: str, remote: str, doc: dict[str, Any]) -> dict[str, Any]: ...

    async def on_heartbeat(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]: ...

    async def on_bid(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]: ...

    async def on_forward(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]: ...

    async def on_cancel(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]: ...


NODE = web.AppKey("mesh_node", MeshHandlers)
SENDER = web.RequestKey("mesh_sender", str)
DOC = web.RequestKey("mesh_doc", dict[str, Any])
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message, "status": status}, status=status)


@web.middleware
async def _signed(request: web.Request, handler: _Handler) -> web.StreamResponse:
    node = request.app[NODE]
    body = await request.read()  # read already, within BODY_CAP, by the service's guard
    try:
        sender = node.verifier.verify(request.method, request.path_qs, body, request.headers)
    except AuthError as err:
        node.count(f"auth_rejected_{err.reason}")
        _log.debug("mesh: refused %s from %s: %s", request.path, request.remote, err)
        return _error(401, str(err))  # unsigned: we never sign an unverified nonce
    try:
        doc = parse_json_body(body) if body.strip() else {}
        if not isinstance(doc, dict):
            raise InvalidInput(f"body: expected a JSON object, got {type(doc).__name__}")
        request[SENDER], request[DOC] = sender, doc
        resp = await handler(request)
    except ApiError as err:  # answered here, so that the answer is signed
        resp = _error(err.status, str(err))
    except (ValueError, KeyError, TypeError) as err:
        resp = _error(400, f"bad request: {err}")
    if isinstance(resp, web.Response) and isinstance(resp.body, bytes):
        resp.headers[H_RESPONSE] = sign_response(
            node.key, node.agent_id, request.headers[H_NONCE], resp.status, resp.body
        )
    return resp


def _endpoint(
    method: Callable[[MeshHandlers], Callable[..., Awaitable[dict[str, Any]]]],
    with_remote: bool = False,
) -> _Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        node = request.app[NODE]
        sender, doc = request[SENDER], request[DOC]
        if with_remote:
            out = await method(node)(sender, request.remote or "", doc)
        else:
            out = await method(node)(sender, doc)
        status = int(out.pop("_status", 200))
        if status >= 400:  # the one error shape, beside what the handler says (e.g. state)
            out = {**out, "ok": False, "status": status}
        return web.json_response(out, status=status)

    return handle


def make_mesh_app(node: MeshHandlers) -> web.Application:
    """Return the sub-application; mount it with ``app.add_subapp("/mesh/v1", sub)``."""
    app = web.Application(middlewares=[_signed], client_max_size=MAX_BODY)
    app[NODE], app[BODY_CAP] = node, MAX_BODY  # the service's guard reads bodies to this cap
    app.router.add_post("/hello", _endpoint(lambda n: n.on_hello, with_remote=True))
    app.router.add_post("/heartbeat", _endpoint(lambda n: n.on_heartbeat))
    app.router.add_post("/bid", _endpoint(lambda n: n.on_bid))
    app.router.add_post("/tasks", _endpoint(lambda n: n.on_forward))
    app.router.add_post("/tasks/cancel", _endpoint(lambda n: n.on_cancel))
    return app
