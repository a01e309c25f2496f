"""The intake's hot path does its per-task work once, and answers the same as before.

A single body seen before is not parsed again (a body that was refused, or names a model or
a command, is never remembered); the 202 documents, whose contract text is spliced in rather
than re-encoded, read exactly as the stored tasks; a batch encodes a repeated contract
object once; task ids stay random UUID4s; a batch's body is parsed with its whole numbers
read as ints by the parser. (Each coalesced group of single submissions is one
transaction: ``test_agent_intake_batch.py``.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.intake import BODY_CACHE_MAX_BYTES, Intake
from edge_agent.agent.core.store_batch import new_rows
from edge_agent.agent.core.task_ids import new_ids
from edge_agent.agent.web import api
from edge_agent.agent.web.api import make_app
from edge_agent.errors import ContractError
from edge_agent.http_errors import ApiError, parse_json_body
from edge_agent.placement import batch as batch_module
from edge_agent.placement import tiers as tiers_module
from edge_agent.placement.batch import prepare_all
from edge_agent.placement.codec import PreparedTask
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

Client = TestClient[Any, Any]
TASK = {"semantics": {"gflops": 0.001}, "task_class": "bench", "priority": 3}


@pytest.mark.asyncio
async def test_the_202_documents_read_as_the_stored_tasks(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    client: Client = await aiohttp_client(make_app(emulated_agent()))
    single = await client.post("/v1/tasks", json=TASK, headers={"Idempotency-Key": "a"})
    retry = await client.post("/v1/tasks", json=TASK, headers={"Idempotency-Key": "a"})
    batch = await client.post("/v1/tasks:batch", json={"tasks": [TASK, {**TASK, "tenant": "b"}]})
    assert (single.status, retry.status, batch.status) == (202, 202, 202)
    assert single.headers["Content-Type"].startswith("application/json")
    first, again = (await single.json()), (await retry.json())
    assert first["created"] is True and again["created"] is False
    together = await asyncio.gather(  # one group: the shared fields' JSON is reused
        *(
            client.post("/v1/tasks", json=TASK, headers={"Idempotency-Key": f"g{i}"})
            for i in range(3)
        ),
        client.post("/v1/tasks", json={**TASK, "tenant": "c"}),
    )
    grouped = [(await r.json())["task"] for r in together]
    assert [d["idempotency_key"] for d in grouped] == ["g0", "g1", "g2", None]
    assert [d["tenant"] for d in grouped] == ["default"] * 3 + ["c"]
    docs = [first["task"], again["task"], *(await batch.json())["tasks"], *grouped]
    assert [d.get("created") for d in docs[2:4]] == [True, True]
    same = ("id", "idempotency_key", "contract", "command", "priority", "tenant", "links")
    for doc in docs:  # every field but those a task's progress moves on since
        stored = (await (await client.get(f"/v1/tasks/{doc['id']}")).json())["task"]
        assert {k: doc[k] for k in (*same, "submitted_at", "deadline_at", "deferral")} == {
            k: stored[k] for k in (*same, "submitted_at", "deadline_at", "deferral")
        }
        assert set(doc) - {"created"} <= set(stored)
    assert docs[0]["idempotency_key"] == "a" and docs[2]["idempotency_key"] is None
    assert (docs[2]["tenant"], docs[3]["tenant"]) == ("default", "b")
    assert docs[3]["contract"]["tenant"] == "b"


@pytest.mark.asyncio
async def test_a_batch_of_different_contracts_reads_as_its_stored_tasks(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    """Deadlines, priorities and an escaped key differ per task: each 202 document still
    reads as its stored task (the fields written without ``json.dumps`` included)."""
    client: Client = await aiohttp_client(make_app(emulated_agent()))
    tasks = [
        {**TASK, "priority": i % 3, "semantics": {"gflops": 0.001 * (i + 1)}}
        | ({"requirements": {"deadline_s": 5.0 + i / 7}} if i % 2 else {})
        for i in range(6)
    ]
    key = 'k"\\é'
    resp = await client.post(
        "/v1/tasks:batch", json={"tasks": tasks}, headers={"Idempotency-Key": key}
    )
    assert resp.status == 202
    docs = (await resp.json())["tasks"]
    assert [d["idempotency_key"] for d in docs] == [f"{key}#{i}" for i in range(6)]
    for i, doc in enumerate(docs):
        stored = (await (await client.get(f"/v1/tasks/{doc['id']}")).json())["task"]
        assert set(doc) - {"created"} <= set(stored)
        for name in ("id", "idempotency_key", "links", "contract", "priority", "deadline_at"):
            assert doc[name] == stored[name], name
        if i % 2:
            assert doc["deadline_at"] == pytest.approx(doc["submitted_at"] + 5.0 + i / 7)
        else:
            assert doc["deadline_at"] is None
        assert doc["contract"]["semantics"]["gflops"] == 0.001 * (i + 1)


def test_to_json_writes_the_text_json_dumps_writes_of_to_dict() -> None:
    doc = {
        "semantics": {"gflops": 2, "operator_histogram": {"conv": 3, "gemm": 1}},
        "requirements": {
            "kinds": ["cpu", "npu"],
            "precision": ["int8", "fp16"],
            "operator_families": ["conv"],
            "model_format": ["onnx"],
            "deadline_s": 1.5,
        },
        "priority": 2,
        "tenant": "t",
    }
    contract = TaskContract.from_dict(doc)
    assert contract.to_json() == json.dumps(contract.to_dict())
    quoted = {"semantics": {"gflops": 1e14}, "task_class": 'a"b\\c\u00e9', "model": "m"}
    assert TaskContract.from_dict(quoted).to_json() == json.dumps(
        TaskContract.from_dict(quoted).to_dict()
    )
    # built in code, not parsed: whole numbers and infinities take the generic encoder
    odd = TaskContract(Semantics(gflops=2, param_bytes=math.inf), Requirements(kinds=("cpu",)))
    assert odd.to_json() == json.dumps(odd.to_dict())


def test_to_dict_is_asdict_with_tuples_as_lists() -> None:
    contract = TaskContract.from_dict(
        {
            "semantics": {"gflops": 2, "operator_histogram": {"conv": 3}},
            "requirements": {"kinds": ["npu"], "precision": ["int8", "fp16"], "deadline_s": 2},
        }
    )
    expected = dataclasses.asdict(contract)
    expected["requirements"].update(kinds=["npu"], precision=["int8", "fp16"])
    assert contract.to_dict() == expected
    assert json.dumps(contract.to_dict()) == json.dumps(expected)  # the same key order


def test_a_single_body_seen_before_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    intake = Intake([], ["echo"])
    body = json.dumps(TASK).encode()
    assert intake.known_body(body, None) is None
    first = intake.task(json.loads(body), "k1")
    intake.remember_body(body, json.loads(body), first)
    parsed = []
    monkeypatch.setattr(intake, "_task", lambda *a: parsed.append(a))  # must not be reached
    again = intake.known_body(body, "k2")
    assert again is not None and not parsed
    assert again.idempotency_key == "k2"
    assert (again.contract, again.request_hash, again.stored_contract()) == (
        first.contract,
        first.request_hash,
        first.stored_contract(),
    )


def test_refused_model_command_and_large_bodies_are_never_remembered() -> None:
    intake = Intake([], ["echo"])
    bad = json.dumps({"semantics": {"gflops": -1}}).encode()
    with pytest.raises(ContractError):
        intake.task(json.loads(bad), None)
    assert intake.known_body(bad, None) is None  # nothing to remember: it raised
    command = {"command": ["echo", "hi"]}
    task = intake.task(command, None)
    intake.remember_body(json.dumps(command).encode(), command, task)
    intake.remember_body(b'{"model": "m"}', {"model": "m"}, task)
    assert intake.known_body(json.dumps(command).encode(), None) is None
    assert intake.known_body(b'{"model": "m"}', None) is None
    padded = json.dumps(TASK).encode() + b" " * BODY_CACHE_MAX_BYTES  # valid JSON, but large
    intake.remember_body(padded, TASK, intake.task(TASK, None))
    assert intake.known_body(padded, None) is None


def count_placement_encodings(monkeypatch: pytest.MonkeyPatch) -> list[TaskContract]:
    """Record every contract placement encodes (``prepare_all``'s ``prepare``) from now on."""
    calls: list[TaskContract] = []
    real = batch_module.prepare

    def counted(contract: TaskContract) -> Any:
        calls.append(contract)
        return real(contract)

    monkeypatch.setattr(batch_module, "prepare", counted)
    return calls


def test_a_batch_encodes_each_contract_object_once(monkeypatch: pytest.MonkeyPatch) -> None:
    real = batch_module.prepare
    calls = count_placement_encodings(monkeypatch)
    one = TaskContract.from_dict(TASK)
    other = TaskContract.from_dict({**TASK, "priority": 1})  # another contract object
    prepared = prepare_all([one, other, one, one, other])
    assert len(calls) == 2
    assert [p.contract for p in prepared] == [one, other, one, one, other]
    assert prepared[0] is prepared[2] and prepared[0].row == real(one).row


@pytest.mark.asyncio
async def test_a_batch_reaches_the_kernel_with_the_rows_the_intake_checked(
    aiohttp_client: Any,
    emulated_agent: Callable[..., AgentConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Placement encodes no contract of a batch again: each is encoded once, at intake (its
    range check), and a deadline is counted from placement in the row handed on."""
    real = batch_module.prepare
    encoded = count_placement_encodings(monkeypatch)
    seen: list[list[Any]] = []
    place = tiers_module.place

    def spied(placer: Any, tasks: Any) -> Any:
        seen.append(list(tasks))
        return place(placer, tasks)

    monkeypatch.setattr(tiers_module, "place", spied)
    client: Client = await aiohttp_client(make_app(emulated_agent()))
    items = [
        {**TASK, "semantics": {"gflops": 0.001 * (i + 1)}, "requirements": {"deadline_s": 60.0}}
        for i in range(5)
    ]
    reply = await client.post("/v1/tasks:batch", json={"tasks": items})
    assert reply.status == 202
    docs = (await reply.json())["tasks"]
    for doc in docs:  # placed (the scheduler ran the batch) on the rows handed on
        for _ in range(200):
            state = (await (await client.get(f"/v1/tasks/{doc['id']}")).json())["task"]["state"]
            if state != "queued":
                break
            await asyncio.sleep(0.01)
        assert state in ("placed", "running", "done")
    assert encoded == []  # not at placement (the intake encodes through codec.prepare)
    handed = [t for call in seen for t in call]
    assert len(handed) == 5 and all(isinstance(t, PreparedTask) for t in handed)
    for task in handed:  # the row is what encoding the contract now would give
        assert task.row == real(task.contract).row
        assert 0 < task.contract.requirements.deadline_s < 60.0


def test_task_ids_sort_in_creation_order_and_differ_in_their_first_eight_characters() -> None:
    ids = new_ids(500) + new_ids(1) + new_ids(499)
    assert ids == sorted(ids)  # the indexes on them append (docs/performance.md, session 13)
    assert len({task_id[:8] for task_id in ids}) == 1000  # what the demo prints names one
    for task_id in ids:
        parsed = uuid.UUID(hex=task_id)
        assert parsed.hex == task_id and parsed.version == 8
        assert parsed.variant == uuid.RFC_4122


def test_task_ids_keep_90_random_bits() -> None:
    ids = new_ids(2000)
    # the bits after the sequence, less version and variant: each is set in about half
    free = [i for i in range(32, 128) if i not in (48, 49, 50, 51, 64, 65)]
    for bit in free:
        ones = sum(int(task_id, 16) >> (127 - bit) & 1 for task_id in ids)
        assert 800 < ones < 1200, (bit, ones)  # 2,000 fair coins: outside is 1 in 10**18


def whole_numbers(value: Any) -> Any:
    """The walk the API ran after parsing before the parser read whole floats itself: every
    float that is a whole number made an int (the reference for the test below)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def test_the_parser_reads_whole_numbers_as_the_walk_after_it_does() -> None:
    """A body is read with its whole floats as ints by the parser itself (no walk over a
    batch's 1,000 items after it): the same document ``whole_numbers`` makes of it, with
    the same errors for NaN and overlong integers."""
    body = (
        json.dumps(
            {
                "tasks": [TASK, {"semantics": {"gflops": 640.0, "bytes_in": 1e6}, "priority": 2.0}],
                "odd": [0.5, -3.0, "BIG", -0.0, 1e-7, 12345678901234567890.0, [7.0, {"x": 2.5}]],
            }
        )
        .replace('"BIG"', "1e400")
        .encode()
    )  # a literal past a float: inf, as json reads it
    want = whole_numbers(parse_json_body(body))
    got = parse_json_body(body, whole=True)
    assert got == want and repr(got) == repr(want)  # ints where whole, the same types
    assert type(got["tasks"][1]["semantics"]["gflops"]) is int
    for bad in (b'{"x": NaN}', b'{"x": 1' + b"0" * 400 + b"}", b"{"):
        with pytest.raises(ApiError) as plain:
            parse_json_body(bad)
        with pytest.raises(ApiError) as whole:
            parse_json_body(bad, whole=True)
        assert str(whole.value) == str(plain.value)


def test_new_tasks_202_text_is_their_document_whatever_their_submission_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shared fields' text is kept across groups stored at other times: each task's text
    still reads as ``task_doc`` of its row, keys in the order the documents always had, and
    a kept shape is reused for another ``submitted_at`` (not re-encoded), but not for rows
    whose other fields differ (a deferral plan, a command, a priority)."""
    intake = Intake([], ["echo"])
    plain = intake.task(dict(TASK), None)
    keyed = intake.task({**TASK, "requirements": {"deadline_s": 7.5}}, 'k"\\é')
    command = intake.task({**TASK, "command": ["echo", "hi"]}, None)
    shapes: dict[Any, Any] = {}
    encoded: list[dict[str, Any]] = []
    real = api._shape_json
    monkeypatch.setattr(api, "_shape_json", lambda row, o: encoded.append(o) or real(row, o))
    texts = []
    for now, task in [(1e9 + 0.1, plain), (1e9 + 2 / 3, keyed), (1e9 + 5.0, plain)]:
        for _, row in new_rows([task], now, {}):
            assert row is not None
            texts.append((api._task_json(dict(row), task, True, shapes), dict(row)))
    deferred = dict(next(r for _, r in new_rows([plain], 1e9 + 9.0, {}) if r is not None))
    deferred.update(state="deferred", not_before=1e9 + 7209.0)
    deferred["deferral"] = {"not_before": 1e9 + 7209.0, "why": "cheaper later"}
    texts.append((api._task_json(deferred, plain, True, shapes), deferred))
    run = dict(next(r for _, r in new_rows([command], 1e9 + 3.0, {}) if r is not None))
    run["command"] = ["echo", "hi"]
    texts.append((api._task_json(run, command, True, shapes), run))
    for text, row in texts:
        doc = api.task_doc({**row, "contract": json.loads(row["contract"])})
        assert json.loads(text) == doc
        own = ["id", "idempotency_key", "links", "deadline_at", "contract"]
        assert list(json.loads(text)) == own + [k for k in doc if k not in own]
    assert json.loads(texts[1][0])["deadline_at"] == 1e9 + 2 / 3 + 7.5
    assert json.loads(texts[3][0])["held_until"] is not None
    # one shape for the first three (other times, another key and deadline); the plan and
    # the command are unhashable: encoded each time, not kept
    assert len(shapes) == 1 and len(encoded) == 3
    assert encoded[1]["state"] == "deferred" and encoded[2]["command"] == ["echo", "hi"]
