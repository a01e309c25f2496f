"""Who may call the agent's own API: the API token, checked by one middleware.

With ``[api] auth`` on (``AgentConfig.auth_on``: by default exactly when ``[api] host`` is
not a loopback address) every request needs ``Authorization: Bearer <token>``, the token in
``AgentConfig.token_path`` (made on first start), except

- ``GET /v1/health``: liveness for load balancers and monitors (no task, model or path);
- the status page's own static files (``/``, ``/status/*``, ``/base.css``, ``/common.js``):
  the page asks for the token and sends it with its data calls (``/v1/status``);
- requests routed into a sub-application: the agent mounts one, the mesh's ``/mesh/v1``,
  which checks its own fleet-key signatures.

Everything else, ``/v1/openapi.json`` and ``/metrics`` included, answers 401 without it.
What is open is decided from the route the request resolved to, never from the raw path.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.config.settings import loopback
from edge_agent.api_token import SCHEME, ensure_token
from edge_agent.http_errors import error_response

_log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Routes (their resources' canonical paths) anyone may call: GET or HEAD only.
OPEN_ROUTES = frozenset({"/v1/health", "/", "/status", "/base.css", "/common.js"})
#: Distinct client addresses whose refusals are logged at WARNING (then at DEBUG).
LOGGED_ADDRESSES = 64


def api_auth(config: AgentConfig) -> list[Middleware]:
    """Return the middleware that asks for the API token (none when ``auth`` is off)."""
    check = token_check(config)
    return [] if check is None else [check.middleware]


def token_check(config: AgentConfig) -> TokenCheck | None:
    """Return the API token's check (None when ``auth`` is off).

    Makes the token file on first use; TokenFileError (bad input: `edge-agent run` exits 2) names
    the file and the fix when it cannot be trusted. With ``auth = "none"`` on an address other
    machines can reach, logs a WARNING at every start.
    """
    if not config.auth_on:
        if not loopback(config.host):
            _log.warning(
                '[api] auth = "none" with [api] host %s: anyone who can reach port %s can '
                'submit tasks, upload models and cancel work; set auth = "auto" or firewall '
                "the port",
                config.host,
                config.port,
            )
        return None
    return TokenCheck(ensure_token(config.token_path), str(config.token_path))


class TokenCheck:
    """The middleware: a constant-time comparison of the bearer token, 401 without it."""

    def __init__(self, token: str, where: str) -> None:
        self._token = token.encode()
        self._where = where
        self._logged: set[str] = set()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Answer 401 unless the route is open or the request carries the token."""
        if _open(request):
            return await handler(request)
        given = _bearer(request.headers.get("Authorization", ""))
        if given is not None and hmac.compare_digest(given, self._token):
            return await handler(request)
        return self._refuse(request, "missing" if given is None else "wrong")

    def allows(self, authorization: str) -> bool:
        """Return whether an ``Authorization`` header carries the token (no refusal logged:
        the express lane hands a refused request to this middleware, which answers it)."""
        given = _bearer(authorization)
        return given is not None and hmac.compare_digest(given, self._token)

    def _refuse(self, request: web.Request, why: str) -> web.Response:
        peer = request.remote or "?"
        first = peer not in self._logged and len(self._logged) < LOGGED_ADDRESSES
        if first:
            self._logged.add(peer)
        _log.log(
            logging.WARNING if first else logging.DEBUG,
            "refused %s %s from %s: %s API token",
            request.method,
            request.path,
            peer,
            why,
        )
        fix = (
            f"send the header 'Authorization: Bearer <token>' with the token in {self._where} "
            "on the agent's box (edge-agent commands there send it)"
        )
        said = "this API needs a token" if why == "missing" else "the API token is wrong"
        resp = error_response(401, f"{said}: {fix}")
        resp.headers["WWW-Authenticate"] = f'{SCHEME} realm="hetmesh-agent"'
        return resp


def _open(request: web.Request) -> bool:
    """Return whether the request may go without the token (see the module docstring)."""
    match = request.match_info
    if len(match.apps) > 1:  # routed into /mesh/v1: its own signatures guard it
        return True
    resource = match.route.resource
    return (
        request.method in ("GET", "HEAD")
        and resource is not None
        and resource.canonical in OPEN_ROUTES
    )


def _bearer(header: str) -> bytes | None:
    """Return the token of an ``Authorization: Bearer <token>`` header (None: no such header)."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != SCHEME.lower() or not token.strip():
        return None
    return token.strip().encode("utf-8", "surrogateescape")
