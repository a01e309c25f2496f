"""Fuzz the hub with hostile input: never a 5xx, always the one JSON error shape, nothing lost.

Unauthenticated: random bodies (JSON of wrong types, huge numbers, NaN, deep nesting, invalid
UTF-8, empty) and methods against every route of the hub's router, path parameters filled
with real and random values. Signed: an enrolled agent sends correctly signed heartbeats,
sync batches and learning reports with hostile bodies; the records the hub accepted before
stay there exactly once and a valid sync afterwards resumes where the hub left off.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cloud_hub.hub.protocol import MAX_BATCH, RECORD_KINDS
from tests.support import fuzz
from tests.support.fuzzed_hub import Hub, fuzzed_hub

JOIN, ADMIN, AGENT = "join-me", "admin-me", "a1"
#: Records the hub accepts before any fuzzing; they must all survive it, exactly once.
BEFORE = 5
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")

KEYS = (
    "agent_id",
    "join_token",
    "labels",
    "board",
    "nonce",
    "name",
    "version",
    "selector",
    "canary_fraction",
    "max_slo_misses",
    "gate_timeout_s",
    "onnx_base64",
    "metrics",
    "records",
    "dropped_through",
    "seq",
    "kind",
    "payload",
    "created_at",
    "status",
    "policy",
    "devices",
    "peers",
    "outbox",
    "carbon",
    "hour",
    "forecast",
    "move_outcomes",
    "deferred",
    "queued",
    "queue_depth",
    "slo_misses",
    "id",
    "utilization",
)
HUGE = fuzz.HUGE | st.just(10**400)
WORDS = ["NaN", "Infinity", "-1", "1e400", "a1", "task", "ok", JOIN, ""]
VALUES = fuzz.json_values(KEYS, WORDS, huge=HUGE)
BODIES = fuzz.json_bodies(
    VALUES, fuzz.odd_bodies("records", b'{"records": [{"seq": ' + b"9" * 5000 + b"}]}")
)
#: Values for path parameters: real ones first, then anything.
PARAMS: dict[str, st.SearchStrategy[str]] = {
    "agent_id": st.sampled_from([AGENT, "ghost", "a" * 64])
    | st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)
    | fuzz.PARAM_TEXT,
    "name": st.sampled_from(["default", "p1"]) | fuzz.PARAM_TEXT,
    "version": st.sampled_from(["1", "0", "999999999"])
    | st.from_regex(r"[0-9]{1,9}", fullmatch=True),
}


def rec(seq: int, kind: str = "task") -> dict[str, Any]:
    return {
        "seq": seq,
        "kind": kind,
        "payload": {"id": f"t{seq}", "state": "done"},
        "created_at": 1.0,
    }


def stored(db: Path) -> list[tuple[int, str, str]]:
    """(seq, kind, payload) of every record of the agent the hub holds, in seq order."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT seq, kind, payload FROM records WHERE agent_id = ? ORDER BY seq", (AGENT,)
        )
        return [(int(s), str(k), str(p)) for s, k, p in rows]
    finally:
        conn.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    yield from fuzzed_hub(tmp_path_factory.mktemp("hubfuzz"), JOIN, ADMIN, AGENT, sent_before())


def sent_before() -> dict[int, dict[str, Any]]:
    """The records the hub accepts before any fuzzing, by seq."""
    return {seq: rec(seq, RECORD_KINDS[seq % len(RECORD_KINDS)]) for seq in range(1, BEFORE + 1)}


def fill(template: str, data: st.DataObject) -> str:
    def one(m: re.Match[str]) -> str:
        value = data.draw(PARAMS.get(m.group(1), fuzz.PARAM_TEXT), label=m.group(1))
        return quote(value, safe="")

    return re.sub(r"\{(\w+)\}", one, template)


def test_the_fuzz_covers_every_route(hub: Hub) -> None:
    paths = {path for _, path in hub.routes}
    assert {"/v1/enrol", "/v1/agents/{agent_id}/sync", "/v1/policies/{name}"} <= paths
    assert "/v1/models/{version}/onnx" in paths and "/dashboard/{file}" in paths


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), body=BODIES, admin=st.booleans())
def test_no_unauthenticated_request_makes_a_5xx(
    hub: Hub, data: st.DataObject, body: bytes, admin: bool
) -> None:
    any_request(hub, data, body, admin)


def any_request(hub: Hub, data: st.DataObject, body: bytes, admin: bool) -> None:
    """Send one drawn request (admin token or none): never a 5xx, errors in the error shape."""
    own, template = data.draw(st.sampled_from(hub.routes), label="route")
    method = data.draw(st.sampled_from((own, *METHODS)), label="method")
    if (method, template) == ("GET", "/v1/events"):
        method = "POST"  # the event stream never ends; its refusal of other methods is tested
    path = fill(template, data)
    if data.draw(st.booleans(), label="query"):
        path += "?fresh=1&x=" + quote(data.draw(fuzz.PARAM_TEXT, label="q"), safe="")
    if (method, template) == ("DELETE", "/v1/agents/{agent_id}/key"):
        admin = False  # the admin releasing the agent under test is its right, not a fuzz
    headers = {"Authorization": f"Bearer {ADMIN}"} if admin else {}
    status, raw, content_type = hub.request(method, path, body, headers)
    assert status < 500, (method, path, status, raw[:300])
    if status >= 300 and method != "HEAD":
        fuzz.assert_error_shape(status, raw, content_type)


NUMBER = st.floats() | st.integers() | HUGE | st.sampled_from([None, True, "1", 10**400])
ADMIN_CASES = st.one_of(
    st.tuples(
        st.just("/v1/policies"),
        st.fixed_dictionaries(
            {"name": st.sampled_from(["p1", "", 3, "x" * 300])},
            optional={
                "template": st.sampled_from(["balanced", "energy-first", "bogus", 1]),
                "blend": VALUES,
                "weights": st.dictionaries(st.sampled_from(["latency", "energy", "x"]), NUMBER)
                | VALUES,
                "version": NUMBER,
                "schema": VALUES,
            },
        ),
    ),
    st.tuples(
        st.just("/v1/rollouts"),
        st.fixed_dictionaries(
            {"name": st.sampled_from(["p1", "nope", 3])},
            optional={
                "version": st.integers(-1, 3) | HUGE | NUMBER,
                "selector": st.dictionaries(st.sampled_from(["site", "board"]), VALUES) | VALUES,
                "canary_fraction": NUMBER,
                "max_slo_misses": NUMBER,
                "gate_timeout_s": NUMBER,
            },
        ),
    ),
    st.tuples(
        st.just("/v1/models"),
        st.fixed_dictionaries(
            {},
            optional={
                "onnx_base64": st.sampled_from(["", "AAAA", "not base64!", "CAcSBA=="]) | VALUES,
                "metrics": st.dictionaries(st.text(max_size=4), NUMBER) | VALUES,
            },
        ),
    ),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=ADMIN_CASES)
def test_no_admin_request_makes_a_5xx(hub: Hub, case: tuple[str, Any]) -> None:
    """The admin's policy, rollout and model routes: bodies near valid ones, numbers hostile."""
    admin_request(hub, case)


def admin_request(hub: Hub, case: tuple[str, Any]) -> None:
    """Send one admin body near a valid one: never a 5xx; a 4xx names what to fix."""
    path, doc = case
    if path == "/v1/rollouts":  # a version that exists, so the rollout gets past the lookup
        hub.request("POST", "/v1/policies", b'{"name": "p1"}', {"Authorization": f"Bearer {ADMIN}"})
    body = json.dumps(doc).encode()
    status, raw, content_type = hub.request(
        "POST", path, body, {"Authorization": f"Bearer {ADMIN}"}
    )
    assert status < 500, (path, body[:300], raw[:300])
    if status >= 300:
        error = fuzz.assert_error_shape(status, raw, content_type)["error"]
        assert status in (400, 404, 409, 413), error
        assert re.search(
            r"\bbody\b|JSON|policy|version|canary|max_slo|gate_timeout|selector", error
        )


RECORD = (
    st.fixed_dictionaries(
        {},
        optional={
            "seq": st.integers(-5, BEFORE + 3)
            | HUGE
            | st.sampled_from([1.5, "3", None, True, [1]]),
            "kind": st.sampled_from([*RECORD_KINDS, "bogus", "", 7]),
            "payload": VALUES,
            "created_at": st.floats() | st.integers() | HUGE | st.text(max_size=4),
        },
    )
    | VALUES
)
SYNC = (
    st.fixed_dictionaries(
        {},
        optional={
            "records": st.lists(RECORD, max_size=6)
            | st.builds(lambda n: [rec(1)] * n, st.sampled_from([2, MAX_BATCH + 1]))
            | VALUES,
            "dropped_through": st.integers(-3, BEFORE) | HUGE | st.sampled_from([None, "2", 2.5]),
        },
    )
    | VALUES
)
HEARTBEAT = (
    st.fixed_dictionaries(
        {},
        optional={
            "status": st.sampled_from(["ok", "degraded", "on fire", 1]),
            "policy": st.fixed_dictionaries(
                {"name": st.sampled_from(["p1", "", 3])},
                optional={"version": st.integers(-3, 3) | HUGE | st.sampled_from(["1", 1.0, None])},
            )
            | VALUES,
            "devices": st.lists(
                st.fixed_dictionaries(
                    {"id": st.sampled_from(["rk3588/npu", "", None])},
                    optional={"utilization": st.floats() | HUGE, "queued_s": st.floats() | HUGE},
                )
                | VALUES,
                max_size=3,
            )
            | VALUES,
            "peers": st.lists(st.sampled_from(["a2", "", "bad id", 5]), max_size=3) | VALUES,
            "outbox": st.fixed_dictionaries(
                {}, optional={"pending": VALUES | HUGE, "dropped": HUGE}
            )
            | VALUES,
            "queue_depth": st.integers() | HUGE | VALUES,
            "slo_misses": st.integers() | HUGE | VALUES,
            "carbon": st.fixed_dictionaries(
                {},
                optional={
                    "hour": st.integers(-2, 30) | st.floats() | HUGE | VALUES,
                    "forecast": st.lists(st.floats() | HUGE | VALUES, max_size=4) | VALUES,
                },
            )
            | VALUES,
            "move_outcomes": st.lists(
                st.fixed_dictionaries(
                    {"id": st.sampled_from(["m1", 3])},
                    optional={"state": st.sampled_from(["done", "failed", "x"]), "reason": VALUES},
                )
                | VALUES,
                max_size=3,
            )
            | VALUES,
            "deferred": VALUES,
            "queued": VALUES,
        },
    )
    | VALUES
)
SIGNED = st.one_of(
    st.tuples(st.just("POST"), st.just("sync"), st.builds(lambda d: json.dumps(d).encode(), SYNC)),
    st.tuples(
        st.just("POST"),
        st.just("heartbeat"),
        st.builds(lambda d: json.dumps(d).encode(), HEARTBEAT),
    ),
    st.tuples(
        st.just("POST"), st.just("learning"), st.builds(lambda d: json.dumps(d).encode(), VALUES)
    ),
    st.tuples(st.sampled_from(["POST", "GET"]), st.sampled_from(["sync", "heartbeat"]), BODIES),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=SIGNED)
def test_no_signed_hostile_body_makes_a_5xx_or_loses_a_record(
    hub: Hub, case: tuple[str, str, bytes]
) -> None:
    signed_hostile_body(hub, case)


def signed_hostile_body(hub: Hub, case: tuple[str, str, bytes]) -> None:
    """Send one signed hostile sync/heartbeat/learning body: no 5xx, no record lost."""
    method, route, body = case
    status, answer = hub.signed(method, f"/v1/agents/{AGENT}/{route}", body)
    assert status < 500, (method, route, body[:300], answer)
    if status >= 400:
        assert answer["ok"] is False and answer["status"] == status, answer
        assert status in (400, 405, 413), answer
        if status == 400:  # it names what to fix: a field of the body, or the body itself
            assert re.search(r"\bbody\b|JSON", answer["error"]), answer
    held = stored(hub.db)
    seqs = [seq for seq, _, _ in held]
    assert len(seqs) == len(set(seqs))
    for seq, kind, payload in held[:BEFORE]:
        assert json.loads(payload) == hub.sent[seq]["payload"] and kind == hub.sent[seq]["kind"]


def fuzz_batch(hub: Hub, examples: int = 30) -> None:
    """Fuzz the hub here and now: any request, admin bodies, signed hostile bodies."""
    quick = settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    quick(
        given(data=st.data(), body=BODIES, admin=st.booleans())(
            lambda data, body, admin: any_request(hub, data, body, admin)
        )
    )()
    quick(given(case=ADMIN_CASES)(lambda case: admin_request(hub, case)))()
    quick(given(case=SIGNED)(lambda case: signed_hostile_body(hub, case)))()


def test_records_survive_the_fuzz_and_a_valid_sync_resumes(hub: Hub) -> None:
    """After a fuzz batch of its own (whatever ran before): the pre-fuzz records are intact
    and a valid sync resumes where the hub left off."""
    fuzz_batch(hub)
    held = {seq: (kind, payload) for seq, kind, payload in stored(hub.db)}
    for seq, r in hub.sent.items():
        assert held[seq] == (r["kind"], json.dumps(r["payload"])), seq
    acked = hub.run(hub.agent.acked())
    assert acked >= BEFORE and all(seq in held for seq in range(1, acked + 1))
    fresh = [rec(seq) for seq in range(acked + 1, acked + 4)]
    answer = hub.run(hub.agent.sync(fresh))
    assert answer["ok"] is True and answer["acked"] >= acked + 3, answer
    assert answer["applied"] + answer["duplicates"] == 3
    after = {seq: payload for seq, _, payload in stored(hub.db)}
    for r in fresh:
        if r["seq"] not in held:  # the fuzz did not already put one there
            assert json.loads(after[r["seq"]]) == r["payload"]
    again = hub.run(hub.agent.sync(fresh))  # a resend is a duplicate, not a second copy
    assert again["applied"] == 0 and again["duplicates"] == 3
    assert [seq for seq, _, _ in stored(hub.db)].count(acked + 1) == 1


def test_every_view_still_answers_after_the_fuzz(hub: Hub) -> None:
    """What a fuzz batch of its own stored (odd payloads, policies) breaks no view of the fleet."""
    fuzz_batch(hub)
    key = hub.agent.key
    assert key is not None
    nan = (
        b'{"records": [{"seq": 900, "kind": "task", "created_at": 9e18,'
        b' "payload": {"state": NaN, "latency_s": Infinity}}]}'
    )
    status, answer = hub.signed("POST", f"/v1/agents/{AGENT}/sync", nan)
    assert status == 400 and "NaN is not a JSON number" in answer["error"], answer
    overflow = (  # valid JSON whose number is infinite as a float: no JSON can store it
        b'{"records": [{"seq": 900, "kind": "task", "created_at": 9e18,'
        b' "payload": {"latency_s": 1e400}}]}'
    )
    status, answer = hub.signed("POST", f"/v1/agents/{AGENT}/sync", overflow)
    assert status == 400 and "body.records[0].payload" in answer["error"], answer
    views = [path for method, path in hub.routes if method == "GET" and "{" not in path]
    for path in [*views, "/v1/reevaluation?fresh=1", "/v1/policies/p1", f"/v1/agents/{AGENT}/sync"]:
        if path == "/v1/events":
            continue  # a stream that never ends
        status, raw, _ = hub.request("GET", path, b"")
        assert status < 500 and (status != 404 or path == "/v1/policies/p1"), (path, raw[:300])
