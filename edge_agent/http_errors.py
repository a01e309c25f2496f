"""The one JSON error shape of every hetmesh HTTP API, and the middleware that produces it.

Every error answers ``{"ok": false, "error": "<what to fix>", "status": <code>}``; an
unexpected exception is logged and answered 500 without details.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from edge_agent.errors import InvalidInput
from edge_agent.storage.db import StoreError

_log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: JSON Schema of that error shape, for the agent's and the hub's OpenAPI documents.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ok", "error", "status"],
    "properties": {
        "ok": {"const": False},
        "error": {"type": "string"},
        "status": {"type": "integer"},
    },
}


class ApiError(Exception):
    """An HTTP error with a message for the client (and ``fields`` beside it in the answer)."""

    def __init__(self, status: int, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.fields = fields


#: Most digits of an integer in a request body: larger ones fit neither a float nor SQLite.
MAX_DIGITS = 300


def parse_json_body(body: bytes, *, whole: bool = False) -> Any:
    """Return a request body as JSON; ApiError 400 saying what to fix when it is not.

    Strict JSON (RFC 8259): no NaN or Infinity, integers of at most ``MAX_DIGITS`` digits, and
    nesting that Python can parse; an empty body is refused. ``whole``: every float that is
    a whole number read as an int (JSON has one number type: ``640.0`` is the integer 640, as
    JSON Schema says too, so a handler that wants an integer accepts it written either way).
    """
    if not body.strip():
        raise ApiError(400, "request body is empty: expected a JSON object")
    decoder = _WHOLE_DECODER if whole else _DECODER
    try:
        return decoder.decode(body.decode("utf-8-sig"))  # json.loads(..., kw) builds a decoder
    except UnicodeDecodeError as err:
        raise ApiError(400, f"malformed JSON: body is not UTF-8 ({err.reason})") from None
    except json.JSONDecodeError as err:
        raise ApiError(400, f"malformed JSON: {err}") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON: body is nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ApiError(400, f"malformed JSON: {name} is not a JSON number")


def _int_literal(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise ApiError(
            400,
            f"malformed JSON: the number {text[:12]}... has {digits} digits; "
            f"numbers must fit a 64-bit float (at most {MAX_DIGITS} digits)",
        )
    return int(text)


def _whole_float(text: str) -> float | int:
    """Return a JSON number with a fraction or exponent as a float, or an int when whole."""
    value = float(text)
    return int(value) if value.is_integer() else value


#: Built once: json.loads with parse_* arguments builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_int=_int_literal)
_WHOLE_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_int=_int_literal, parse_float=_whole_float
)


def error_response(status: int, message: str, **fields: Any) -> web.Response:
    """Return the one JSON error shape (``fields``: more the client can act on)."""
    doc = {**fields, "ok": False, "error": message, "status": status}
    return web.json_response(doc, status=status)


@web.middleware
async def missing_files(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer a missing static file 404 in the JSON error shape (aiohttp's own 404 is empty).

    Place it inside ``json_errors`` (after it in ``middlewares``): it raises ApiError.
    """
    resp = await handler(request)
    name = request.match_info.get("filename")  # set by static routes (``add_static``) only
    if isinstance(resp, web.FileResponse) and name is not None:
        resource = request.match_info.route.resource
        if resource is not None:
            directory = resource.get_info().get("directory")
            if isinstance(directory, Path) and not (directory / name).is_file():
                raise ApiError(404, f"no such file under {resource.canonical}/: {name}")
    return resp


def json_errors(service: str, extra: Mapping[type[Exception], int] = {}) -> Middleware:
    """Return middleware answering every error in the JSON shape; ``extra`` maps more errors.

    ``service`` names the server in messages ("the hub", "the agent").
    """

    mapped = tuple(extra.items())

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            return error_response(err.status, str(err), **err.fields)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            for kind, status in mapped:  # before the general cases: they may be subclasses
                if isinstance(err, kind):
                    return error_response(status, str(err))
            return _general(request, err, service)

    return middleware


def _general(request: web.Request, err: Exception, service: str) -> web.Response:
    """Answer the errors every API shares."""
    if isinstance(err, InvalidInput):
        return error_response(400, str(err))
    if isinstance(err, web.HTTPRequestEntityTooLarge):
        return error_response(413, f"request body too large: {err.text}")
    if isinstance(err, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(err.allowed_methods))
        resp = error_response(
            405, f"{request.method} not allowed on {request.path}; allowed: {allowed}"
        )
        resp.headers["Allow"] = allowed  # RFC 9110: a 405 lists the methods the target takes
        return resp
    if isinstance(err, web.HTTPNotFound):
        return error_response(404, f"no such endpoint: {request.method} {request.path}")
    if isinstance(err, web.HTTPException):
        if err.status < 400:
            raise err
        return error_response(err.status, err.reason)
    if isinstance(err, StoreError):
        return error_response(503, f"{service} cannot store data now: {err}")
    _log.exception("unhandled error in %s %s", request.method, request.path, exc_info=err)
    return error_response(500, f"internal error; see {service}'s log")


#: The answer of ``GET /v1/openapi.json`` in both services' documents (agent and hub).
OPENAPI_ANSWER: dict[str, Any] = {
    "200": {
        "description": "OpenAPI 3.1",
        "content": {
            "application/json": {"schema": {"type": "object", "required": ["openapi", "paths"]}}
        },
    }
}
