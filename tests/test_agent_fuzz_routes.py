"""Fuzz every route of a mesh-enabled agent with hostile input: never a 5xx, nothing lost.

API: random methods, path parameters (real task ids and random ones), query strings and
bodies (JSON of wrong types, huge numbers, NaN, deep nesting, invalid UTF-8, empty) against
every route of the agent's router, the status page's static files included; every error is
the one JSON shape. Mesh: unsigned and wrongly signed requests are refused 401 and counted;
requests signed with the fleet key but carrying hostile bodies get a signed 4xx naming the
field; a task and a forwarded attempt accepted before the fuzz are still there after it, and
a normal submit and a normal forward afterwards still complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.agent.core.store import STATES
from edge_agent.agent.mesh.link import PREFIX
from edge_agent.mesh import FleetKey, sign_request
from edge_agent.mesh.credential import H_RESPONSE, H_SIGNATURE, H_TIMESTAMP
from edge_agent.placement import TaskContract
from tests.support.fuzz import (
    HUGE,
    PARAM_TEXT,
    assert_error_shape,
    json_bodies,
    json_values,
    odd_bodies,
)
from tests.support.fuzzed_agent import CONTRACT, PEER, TASK_KEYS, Agent, final_state, fuzzed_agent

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
MESH_ROUTES = ("hello", "heartbeat", "bid", "tasks", "tasks/cancel")
KEYS = (
    *TASK_KEYS,
    "tasks",
    "contract",
    "key",
    "attempt",
    "lease_s",
    "payload",
    "agent_id",
    "api_port",
    "version",
)
WORDS = ["NaN", "-1", "1e400", "tiny_cnn_int8", "int8", "npu", "../x", ""]
VALUES = json_values(KEYS, WORDS)
ODD_BODIES = odd_bodies(
    "contract", b'{"attempt": ' + b"9" * 5000 + b"}", b'{"lease_s": NaN, "attempt": Infinity}'
)
BODIES = json_bodies(VALUES, ODD_BODIES)
QUERY = st.dictionaries(
    st.sampled_from(["limit", "state", "device", "name", "fresh", "x"]),
    st.sampled_from(["0", "1", "10000", "10001", "-1", "1e3", "", "99" * 20, *STATES]) | PARAM_TEXT,
    max_size=3,
)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    yield from fuzzed_agent(tmp_path_factory.mktemp("agentfuzz"))


def test_the_fuzz_covers_every_route(agent: Agent) -> None:
    paths = {path for _, path in agent.routes}
    api = {"/v1/tasks", "/v1/tasks:batch", "/v1/tasks/{task_id}", "/v1/tasks/{task_id}:cancel"}
    api |= {"/v1/tasks/{task_id}/explain", "/v1/models", "/v1/devices", "/v1/pools"}
    api |= {"/v1/peers", "/v1/status", "/v1/health", "/v1/openapi.json", "/metrics", "/"}
    assert api | {"/status/{file}"} | {f"{PREFIX}/{r}" for r in MESH_ROUTES} <= paths


def test_a_missing_status_page_file_is_a_json_404(agent: Agent) -> None:
    status, raw, content_type, _ = agent.request("GET", "/status/nope.js")
    assert status == 404 and "nope.js" in assert_error_shape(status, raw, content_type)["error"]
    status, raw, _, _ = agent.request("GET", "/status/app.js")
    assert status == 200 and raw


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), body=BODIES)
def test_no_unsigned_request_makes_a_5xx(agent: Agent, data: st.DataObject, body: bytes) -> None:
    unsigned_request(agent, data, body)


def unsigned_request(agent: Agent, data: st.DataObject, body: bytes) -> None:
    """Send one drawn request without a signature: never a 5xx, errors in the error shape."""
    own, template = data.draw(st.sampled_from(agent.routes), label="route")
    method = data.draw(st.sampled_from((own, *METHODS)), label="method")

    def param(m: re.Match[str]) -> str:
        if m.group(1) == "task_id":
            value = data.draw(
                st.sampled_from([agent.task_id, "0", "f" * 64])
                | st.from_regex(r"[0-9a-f]{1,64}", fullmatch=True)
                | PARAM_TEXT,
                label="task_id",
            )
        else:
            value = data.draw(
                st.sampled_from(["app.js", "index.html", "nope.js", "..", "%2e%2e"]) | PARAM_TEXT,
                label=m.group(1),
            )
        return quote(value, safe="")

    path = re.sub(r"\{(\w+)\}", param, template)
    query = data.draw(QUERY, label="query")
    if query:
        path += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
    status, raw, content_type, _ = agent.request(method, path, body)
    assert status < 500, (method, path, status, raw[:300])
    if status >= 300 and method != "HEAD":
        assert_error_shape(status, raw, content_type)


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("no headers", "unsigned"),
        ("timestamp not a number", "bad_timestamp"),
        ("timestamp of 1970", "stale"),
        ("signature forged", "bad_signature"),
        ("another fleet's key", "bad_signature"),
        ("sent twice", "replay"),
    ],
)
@pytest.mark.parametrize("route", MESH_ROUTES)
def test_an_unsigned_or_wrongly_signed_mesh_request_is_refused_and_counted(
    agent: Agent, route: str, how: str, reason: str
) -> None:
    path, body = f"{PREFIX}/{route}", json.dumps({"contract": CONTRACT}).encode()
    sent = sign_request(agent.key, PEER, "POST", path, body, to=agent.mesh.agent_id)
    if how == "no headers":
        sent = {}
    elif how == "timestamp not a number":
        sent[H_TIMESTAMP] = "soon"
    elif how == "timestamp of 1970":  # signed then: a genuine request from a wrong clock
        sent = sign_request(agent.key, PEER, "POST", path, body, to=agent.mesh.agent_id, now=1.0)
    elif how == "signature forged":
        sent[H_SIGNATURE] = "00" * 32
    elif how == "another fleet's key":
        other = FleetKey("another-fleet-key-0000000000000000")
        sent = sign_request(other, PEER, "POST", path, body, to=agent.mesh.agent_id)
    else:  # the first use is answered; the second is a replay
        assert agent.request("POST", path, body, sent)[0] < 500
    before = agent.counters().get(f"auth_rejected_{reason}", 0)
    status, raw, content_type, answer_headers = agent.request("POST", path, body, sent)
    assert status == 401, raw[:300]
    assert_error_shape(status, raw, content_type)
    assert H_RESPONSE not in answer_headers  # an unverified nonce is never signed
    assert agent.counters()[f"auth_rejected_{reason}"] == before + 1


NUMBER: st.SearchStrategy[Any] = (
    st.floats() | st.integers() | HUGE | st.sampled_from([None, True, "1", [1], {}])
)
CONTRACT_FIELDS = st.fixed_dictionaries(
    {"semantics": st.fixed_dictionaries({"gflops": st.just(0.1) | NUMBER}) | VALUES},
    optional={
        "requirements": st.fixed_dictionaries(
            {},
            optional={
                "kinds": st.lists(st.sampled_from(["npu", "cpu", "warp", ""]), max_size=2) | VALUES,
                "device_count": st.integers(0, 9) | NUMBER,
                "model_format": st.sampled_from([None, "onnx", "tflite", 3]),
                "max_latency_s": NUMBER,
            },
        )
        | VALUES,
        "priority": st.integers(-3, 3) | NUMBER,
        "tenant": st.sampled_from(["default", "t\x00", "x" * 100, 3]),
        "model": st.sampled_from([None, "tiny_cnn_int8", "../../etc/passwd", 4]),
    },
)
#: Contracts near valid ones (a third with an unknown field), and anything else.
CONTRACTS = (
    CONTRACT_FIELDS | st.builds(lambda c, v: {**c, "bogus": v}, CONTRACT_FIELDS, VALUES) | VALUES
)
ATTEMPTS = st.integers(1, 3) | (
    st.integers(-3, 0)
    | HUGE
    | st.sampled_from([2**31, 1.0, 1.5, "1", None, True, [1], float("inf")])
)
KEYS_OF_ATTEMPTS = st.sampled_from(["before-1", "k1", "k2"]) | (
    st.sampled_from(["", "x" * 200, 5, None, ["k1"]]) | PARAM_TEXT
)
LEASES = st.sampled_from([30, 5.0]) | (
    NUMBER | st.sampled_from([-1, 0, 1e-9, 1e300, 10**400, float("nan")])
)


def _slow(doc: dict[str, Any]) -> bool:
    """A valid forward of real work under a long lease: it would run, legitimately, for long."""
    try:
        heavy = TaskContract.from_dict(doc["contract"]).semantics.gflops > 10
    except (ValueError, KeyError, TypeError):
        return False
    lease = doc.get("lease_s")
    return heavy and isinstance(lease, (int, float)) and not lease <= 5


FORWARDS = st.fixed_dictionaries(
    {"contract": st.just(CONTRACT) | CONTRACTS, "key": KEYS_OF_ATTEMPTS, "attempt": ATTEMPTS},
    optional={"lease_s": LEASES, "payload": st.just({}) | VALUES, "bogus": VALUES},
).filter(lambda d: not _slow(d))
MESH_BODIES = st.one_of(
    st.tuples(st.just("bid"), st.fixed_dictionaries({}, optional={"contract": CONTRACTS})),
    st.tuples(st.just("tasks"), FORWARDS),
    st.tuples(
        st.just("tasks/cancel"),
        st.fixed_dictionaries(
            {},
            optional={"key": KEYS_OF_ATTEMPTS, "attempt": ATTEMPTS, "bogus": VALUES},
        ),
    ),
    st.tuples(
        st.just("hello"),
        st.fixed_dictionaries(
            {},
            optional={
                "agent_id": VALUES,
                "api_port": NUMBER | st.sampled_from([0, 65536, -1]),
                "version": VALUES,
                "kinds": VALUES,
            },
        ),
    ),
    st.tuples(st.just("heartbeat"), VALUES),
)


HOSTILE_MESH = MESH_BODIES | st.tuples(st.sampled_from(MESH_ROUTES), BODIES)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=HOSTILE_MESH)
def test_no_signed_hostile_mesh_body_makes_a_5xx(agent: Agent, case: tuple[str, Any]) -> None:
    signed_hostile_body(agent, case)


def signed_hostile_body(agent: Agent, case: tuple[str, Any]) -> None:
    """Send one signed hostile mesh body: never a 5xx; a 400 names what to fix."""
    route, doc = case
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    status, answer = agent.signed(route, body)
    assert status < 500, (route, body[:300], answer)
    if status >= 400:
        assert answer["ok"] is False and answer["status"] == status, answer
        assert status in (400, 409, 413) or (route, status) == ("hello", 421), answer
        if status == 400:  # it names what to fix: a field of the body, or the body itself
            assert re.search(
                r"\bbody\b|JSON|contract|semantics|requirements|key|attempt|lease_s|payload",
                answer["error"],
            ), answer


#: (route, field, value, status, what the error names): a valid forward (or bid) with one
#: field made hostile; ``None`` as the value leaves the field out.
ONE_FIELD = [
    ("tasks", "lease_s", -1, 400, "lease_s"),
    ("tasks", "lease_s", 0, 400, "lease_s"),
    ("tasks", "lease_s", None, 400, "lease_s"),
    ("tasks", "lease_s", "30", 400, "lease_s"),
    ("tasks", "lease_s", True, 400, "lease_s"),
    ("tasks", "lease_s", float("inf"), 400, "Infinity is not a JSON number"),
    ("tasks", "lease_s", 10**400, 400, "digits"),
    ("tasks", "lease_s", 1e300, 200, ""),  # a huge lease is a long one: the task runs
    ("tasks", "attempt", 0, 400, "attempt"),
    ("tasks", "attempt", -1, 400, "attempt"),
    ("tasks", "attempt", 2**31, 400, "attempt"),
    ("tasks", "attempt", 2**63, 400, "attempt"),
    ("tasks", "attempt", 1.0, 400, "attempt"),
    ("tasks", "attempt", True, 400, "attempt"),
    ("tasks", "attempt", "1", 400, "attempt"),
    ("tasks", "attempt", None, 400, "attempt"),
    ("tasks", "key", "", 400, "key"),
    ("tasks", "key", "x" * 200, 400, "key"),
    ("tasks", "key", 5, 400, "key"),
    ("tasks", "contract", None, 400, "contract"),
    ("tasks", "contract", "run it", 400, "contract"),
    ("tasks", "contract", {}, 400, "contract.semantics"),
    ("tasks", "contract", {"semantics": {"gflops": -1}}, 400, "semantics.gflops"),
    ("tasks", "contract", {"semantics": {"gflops": 1e300}}, 400, "semantics.gflops"),
    ("tasks", "contract", {"semantics": {"gflops": 2**64}}, 400, "semantics.gflops"),
    ("tasks", "contract", {**CONTRACT, "bogus": 1}, 400, "bogus"),
    ("tasks", "contract", {**CONTRACT, "priority": 2**63}, 400, "contract.priority"),
    ("tasks", "contract", {**CONTRACT, "tenant": "a\x00b"}, 400, "contract.tenant"),
    ("tasks", "payload", [1], 400, "payload"),
    ("tasks", "payload", "x", 400, "payload"),
    ("tasks", "bogus", {"deep": [1, 2]}, 200, ""),  # unknown fields: a newer peer's, ignored
    ("tasks/cancel", "attempt", 2**63, 400, "attempt"),
    ("tasks/cancel", "attempt", 0, 400, "attempt"),
    ("tasks/cancel", "key", ["k"], 400, "key"),
    ("bid", "contract", None, 400, "contract"),
    ("bid", "contract", {"semantics": {"gflops": "1"}}, 400, "semantics.gflops"),
    ("bid", "contract", {**CONTRACT, "requirements": {"device_count": 99}}, 400, "device_count"),
    ("hello", "api_port", 2**80, 200, ""),  # not a port: no trust from it, still an answer
    ("hello", "agent_id", {"x": 1}, 200, ""),
]


@pytest.mark.parametrize(("route", "field", "value", "status", "named"), ONE_FIELD)
def test_one_hostile_field_of_a_signed_request_is_refused_naming_it(
    agent: Agent, route: str, field: str, value: Any, status: int, named: str
) -> None:
    key = f"one-{route}-{field}-{ONE_FIELD.index((route, field, value, status, named))}"
    doc: dict[str, Any] = {"contract": CONTRACT, "key": key, "attempt": 1, "lease_s": 30}
    if route == "hello":
        doc["to"] = agent.endpoint
    if value is None:
        del doc[field]
    else:
        doc[field] = value
    answer_status, answer = agent.signed(route, json.dumps(doc).encode())
    assert answer_status == status, answer
    if status >= 400:
        assert answer["ok"] is False and answer["status"] == status, answer
        assert named in answer["error"], answer
    elif route == "tasks":
        assert answer["state"] == "done", answer


@pytest.mark.parametrize(
    ("method", "route", "status"),
    [("GET", "bid", 405), ("PUT", "tasks", 405), ("POST", "nope", 404), ("POST", "", 404)],
)
def test_a_signed_request_to_no_mesh_endpoint_is_a_json_4xx(
    agent: Agent, method: str, route: str, status: int
) -> None:
    path, body = f"{PREFIX}/{route}", b"{}"
    headers = sign_request(agent.key, PEER, method, path, body, to=agent.mesh.agent_id)
    answer_status, raw, content_type, _ = agent.request(method, path, body, headers)
    assert answer_status == status, raw[:300]
    assert_error_shape(answer_status, raw, content_type)


def test_a_hello_signed_with_our_own_agent_id_is_a_409_in_the_error_shape(agent: Agent) -> None:
    path, body = f"{PREFIX}/hello", json.dumps({"api_port": 1, "to": agent.endpoint}).encode()
    me = agent.mesh.agent_id
    headers = sign_request(agent.key, me, "POST", path, body, to=me)
    status, raw, content_type, _ = agent.request("POST", path, body, headers)
    assert status == 409 and "is ours" in assert_error_shape(status, raw, content_type)["error"]


def fuzz_batch(agent: Agent, examples: int = 40) -> None:
    """Fuzz the agent here and now: unsigned requests, then signed hostile mesh bodies."""
    quick = settings(
        max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    quick(
        given(data=st.data(), body=BODIES)(lambda data, body: unsigned_request(agent, data, body))
    )()
    quick(given(case=HOSTILE_MESH)(lambda case: signed_hostile_body(agent, case)))()


def test_the_agent_keeps_working_after_the_fuzz(agent: Agent) -> None:
    """After a fuzz batch of its own (whatever ran before): earlier work is intact, new work
    completes."""
    fuzz_batch(agent)
    status, raw, _, _ = agent.request("GET", f"/v1/tasks/{agent.task_id}")
    assert status == 200
    after = json.loads(raw)["task"]
    assert {k: after[k] for k in ("state", "result", "device")} == {
        k: agent.task[k] for k in ("state", "result", "device")
    }
    # the forwarded attempt accepted before: still done, answered, never rerun
    status, answer = agent.signed("tasks/cancel", b'{"key": "before-1", "attempt": 1}')
    assert status == 200 and answer["state"] == "done", answer
    body = {"contract": CONTRACT, "key": "before-1", "attempt": 2, "lease_s": 30}
    status, answer = agent.signed("tasks", json.dumps(body).encode())
    assert status == 200 and answer.get("duplicate") is True, answer
    # new work: a submit through the API and a forward through the mesh both complete
    status, raw, _, _ = agent.request("POST", "/v1/tasks", b'{"semantics": {"gflops": 0.2}}')
    assert status == 202, raw[:300]
    task = agent.run(final_state(agent.client, json.loads(raw)["task"]["id"]))
    assert task["state"] == "done", task
    body = {"contract": CONTRACT, "key": "after-1", "attempt": 1, "lease_s": 30}
    status, answer = agent.signed("tasks", json.dumps(body).encode())
    assert status == 200 and answer["state"] == "done", answer
    status, raw, _, _ = agent.request("GET", "/v1/health")
    assert status == 200 and json.loads(raw)["ok"] is True
