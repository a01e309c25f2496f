"""What the fuzz tests share: hostile-JSON hypothesis strategies, an app's routes, the error shape.

Each fuzz test names the keys and words its service knows (``json_values(keys, words)``), so
the hostile documents look close to real ones; the rest (huge numbers, NaN, deep nesting,
invalid UTF-8, empty bodies) is the same for every service.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import strategies as st

#: Integers past int64 and past a float's range.
HUGE = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**300])
#: Text for path parameters and query values: any printable UTF-8.
PARAM_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20
)


def scalars(
    words: Sequence[str],
    *,
    nan: bool = True,
    huge: st.SearchStrategy[int] | None = HUGE,
) -> st.SearchStrategy[Any]:
    """JSON scalars of every type, ``words`` the service knows among the strings.

    ``nan``: NaN too (``json.dumps`` writes it and ±Infinity as the NaN tokens).
    """
    numbers = st.integers() if huge is None else st.integers() | huge
    return (
        st.none()
        | st.booleans()
        | numbers
        | st.floats(allow_nan=nan)
        | st.text(max_size=12)
        | st.sampled_from(list(words))
    )


def json_values(
    keys: Sequence[str],
    words: Sequence[str],
    *,
    nan: bool = True,
    huge: st.SearchStrategy[int] | None = HUGE,
    width: int = 4,
    max_leaves: int = 12,
) -> st.SearchStrategy[Any]:
    """Nested JSON values: lists and objects (keys mostly the service's ``keys``) of scalars."""
    names = st.sampled_from(list(keys))
    return st.recursive(
        scalars(words, nan=nan, huge=huge),
        lambda inner: (
            st.lists(inner, max_size=width)
            | st.dictionaries(names | st.text(max_size=6), inner, max_size=width + 1)
        ),
        max_leaves=max_leaves,
    )


def odd_bodies(nest_in: str, big_number: bytes, *extra: bytes) -> list[bytes]:
    """Bodies that are not ordinary JSON documents: empty, nested past the parser's recursion
    limit (bare and under key ``nest_in``), numbers past Python's limits (``big_number``: a
    document holding one where the service reads a number), NaN, bad UTF-8, a byte-order mark.
    """
    deep = b"[" * 50_000 + b"]" * 50_000
    return [
        b"",
        b"   ",
        b"null",
        deep,
        b'{"' + nest_in.encode() + b'": ' + deep + b"}",
        b"1" * 5000,  # an integer past Python's 4300-digit conversion limit
        big_number,
        b"1e400",
        b"NaN",
        *extra,
        b'{"a": "\xff\xfe"}',  # invalid UTF-8 inside a string
        b'"\\ud800"',  # a lone surrogate
        b"\xef\xbb\xbf{}",  # a UTF-8 byte-order mark
    ]


def json_bodies(values: st.SearchStrategy[Any], odd: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """Request bodies: ``values`` as JSON, random bytes, or one of the ``odd`` bodies."""
    encoded = st.builds(lambda v: json.dumps(v).encode(), values)
    return encoded | st.binary(max_size=64) | st.sampled_from(list(odd))


def routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, path template) of every route, like tests/test_openapi_coverage.py reads them."""
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path") or (info.get("prefix", "") + "/{file}")
        out.add((route.method, re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)))
    return sorted(out)


def assert_error_shape(status: int, raw: bytes, content_type: str) -> dict[str, Any]:
    """Return the error document; fail unless it is the one JSON error shape for ``status``."""
    assert content_type == "application/json", (status, raw[:200])
    doc = json.loads(raw)
    assert isinstance(doc, dict) and set(doc) == {"ok", "error", "status"}, doc
    assert doc["ok"] is False and doc["status"] == status, doc
    assert isinstance(doc["error"], str) and doc["error"].strip(), doc
    return doc


@dataclass
class Served:
    """A service on a test server, driven from synchronous hypothesis tests on its own loop."""

    loop: asyncio.AbstractEventLoop
    client: TestClient[Any, Any]

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def send(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, str, dict[str, str]]:
        """Send raw ``body`` (as JSON); return status, raw answer, content type and headers."""

        async def go() -> tuple[int, bytes, str, dict[str, str]]:
            async with self.client.request(
                method,
                path,
                data=body,
                headers={"Content-Type": "application/json", **(headers or {})},
            ) as resp:
                return resp.status, await resp.read(), resp.content_type, dict(resp.headers)

        result: tuple[int, bytes, str, dict[str, str]] = self.run(go())
        return result
