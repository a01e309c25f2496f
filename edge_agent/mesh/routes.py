"""The signed peer endpoints, as an aiohttp sub-application mounted at ``/mesh/v1``.

Every request must carry a valid fleet signature for this member (else 401, counted by
reason; one signed for another member counts ``wrong_recipient``); every answer to a verified
request is signed over the request's nonce, status and body, for its sender. A hello must
also name the address it was sent to, which must be the one it arrived on (else 421, counted
``wrong_address``): a hello replayed to another of our addresses is refused.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from edge_agent.errors import InvalidInput
from edge_agent.http_errors import ApiError, parse_json_body
from edge_agent.http_limits import BODY_CAP
from edge_agent.mesh.credential import H_NONCE, H_RESPONSE, FleetKey, sign_response
from edge_agent.mesh.errors import AuthError
from edge_agent.mesh.replay import Verifier

_log = logging.getLogger(__name__)

#: Largest request body a peer endpoint accepts.
MAX_BODY = 1 << 20
#: Refusals counted under their own event name rather than ``auth_rejected_<reason>``.
OWN_EVENTS = frozenset({"wrong_recipient"})


class MeshHandlers(Protocol):
    """What the endpoints need from a node."""

    agent_id: str
    key: FleetKey
    verifier: Verifier

    def count(self, name: str) -> None: ...

    @property
    def own_endpoint(self) -> tuple[str, int]: ...  # the (address, port) we advertise

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
        node.count(err.reason if err.reason in OWN_EVENTS else f"auth_rejected_{err.reason}")
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
        nonce = request.headers[H_NONCE]
        resp.headers[H_RESPONSE] = sign_response(
            node.key, node.agent_id, nonce, resp.status, resp.body, to=sender
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
            wrong = _misdirected(request, doc, node.own_endpoint)
            if wrong is not None:
                node.count("wrong_address")
                return _error(421, wrong)
            out = await method(node)(sender, request.remote or "", doc)
        else:
            out = await method(node)(sender, doc)
        status = int(out.pop("_status", 200))
        if status >= 400:  # the one error shape, beside what the handler says (e.g. state)
            out = {**out, "ok": False, "status": status}
        return web.json_response(out, status=status)

    return handle


def _host(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def _misdirected(
    request: web.Request, doc: dict[str, Any], advertised: tuple[str, int]
) -> str | None:
    """Return why a hello's signed ``to`` is neither the address:port it arrived on nor the
    one we advertise (behind a port mapping they differ), or None."""
    to = doc.get("to")
    if not isinstance(to, str):
        return "hello: 'to' (the address:port it is sent to) is required"
    sock = None if request.transport is None else request.transport.get_extra_info("sockname")
    if not isinstance(sock, tuple) or len(sock) < 2:
        return "hello: cannot tell which address it arrived on; retry"
    host, _, port = to.rpartition(":")
    want = _host(host)
    ours = [(str(sock[0]), int(sock[1])), advertised]
    if want is None or not any(want == _host(h) and port == str(p) for h, p in ours):
        return f"hello was sent to {to[:80]!r}, not to {sock[0]}:{sock[1]}: refused as a replay"
    return None


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
