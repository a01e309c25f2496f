"""Resource pools: config and policy validation, admission waits, borrowing, yielding, API/CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.web.api import make_app
from edge_agent.cli_agent import main as cli_main
from edge_agent.errors import PolicyError
from edge_agent.placement import Policy
from edge_agent.placement.pools import Pools, PoolSpec, Usage, parse_pools

Client = TestClient[Any, Any]
#: The conftest fixtures ``until`` and ``emulated_agent``.
Until = Callable[..., Awaitable[Any]]
MakeConfig = Callable[..., AgentConfig]

#: ~200 ms on the emulated RK3588 CPU (its roofline), CPU only, nothing to run.
CPU_TASK: dict[str, Any] = {
    "semantics": {"gflops": 8.0},
    "requirements": {"kinds": ["cpu"], "model_format": None},
}
ONE_CORE = Usage(cores=1.0)


def never(task_id: str) -> bool:
    return False


def always(task_id: str) -> bool:
    return True


# --- validation ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"vision": {"cpu_core": 2}}, "vision: unknown key(s) cpu_core"),
        ({"vision": {"cpu_cores": -1}}, "vision.cpu_cores: expected a number >= 0"),
        ({"vision": {"accelerator_share": 1.5}}, "accelerator_share: expected a fraction"),
        ({"vision": {"borrow": "yes"}}, "vision.borrow: expected true or false"),
        ({"vision": 4}, "vision: expected a table of cpu_cores"),
        ([1], "expected {tenant:"),
    ],
)
def test_pool_specs_refuse_bad_values_naming_the_key(doc: Any, message: str) -> None:
    with pytest.raises(ValueError, match="where") as err:
        parse_pools(doc, "where")
    assert message in str(err.value)


def test_config_pools_section_round_trips_and_errors_name_file_and_key(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text(
        "[pools.vision]\ncpu_cores = 4\nmemory_mb = 2048\naccelerator_share = 0.5\n"
        "[pools.batch]\nborrow = true\n"
    )
    config = load_config(file, env={})
    assert config.pools == {
        "vision": PoolSpec(cpu_cores=4, memory_mb=2048, accelerator_share=0.5),
        "batch": PoolSpec(borrow=True),
    }
    again = tmp_path / "again.toml"
    again.write_text(render_default(config))
    assert load_config(again, env={}).pools == config.pools
    file.write_text("[pools.vision]\naccelerator_share = 2\n")
    with pytest.raises(ConfigError, match=r"agent.toml: \[pools\]\.vision\.accelerator_share"):
        load_config(file, env={})
    env = {"EDGE_AGENT_POOLS": '{"vision": {"memory_mb": "lots"}}'}
    with pytest.raises(ConfigError, match=r"\$EDGE_AGENT_POOLS\.vision\.memory_mb"):
        load_config(tmp_path / "again.toml", env=env)


def test_policy_pools_rule_is_validated() -> None:
    ok = Policy.from_dict({"template": "balanced", "rules": {"pools": {"a": {"cpu_cores": 1}}}})
    assert ok.rules["pools"] == {"a": {"cpu_cores": 1}}
    with pytest.raises(PolicyError, match=r"policy\.rules\.pools\.a\.borrow"):
        Policy.from_dict({"template": "balanced", "rules": {"pools": {"a": {"borrow": 1}}}})


# --- accounting ----------------------------------------------------------------------
def test_full_pool_waits_with_a_reason_and_is_admitted_once_work_finishes() -> None:
    pools = Pools({"vision": PoolSpec(cpu_cores=2)}, accelerators=1)
    assert pools.admit("v1", "vision", ONE_CORE, never).admit
    assert pools.admit("v2", "vision", ONE_CORE, never).admit
    third = pools.admit("v3", "vision", ONE_CORE, never)
    assert not third.admit and not third.never
    assert pools.reason("v3") == "waiting: pool vision full (2/2 cores)"
    assert pools.admit("x", "unpooled", Usage(cores=50), never).admit  # no pool: no limit
    pools.release("v1")
    assert pools.admit("v3", "vision", ONE_CORE, never).admit
    assert pools.reason("v3") is None


def test_memory_counts_and_a_task_larger_than_its_pool_can_never_be_admitted() -> None:
    pools = Pools({"vision": PoolSpec(memory_mb=1000)}, accelerators=0)
    assert pools.admit("a", "vision", Usage(memory_mb=600), never).admit
    wait = pools.admit("b", "vision", Usage(memory_mb=600), never)
    assert not wait.admit and "(600/1000 MB, needs 600)" in wait.reason
    huge = pools.decide("vision", Usage(memory_mb=1500), never)
    assert huge.never and huge.reason == "needs 1500 MB; pool vision has 1000 in all"


def test_accelerator_share_is_time_and_one_task_may_always_start() -> None:
    pools = Pools({"vision": PoolSpec(accelerator_share=0.5)}, accelerators=2)  # 1.0 s
    assert pools.quota("vision").accel_s == pytest.approx(1.0)
    assert pools.admit("long", "vision", Usage(accel_s=3.0), never).admit  # idle share
    assert not pools.admit("next", "vision", Usage(accel_s=0.1), never).admit
    pools.release("long")
    assert pools.admit("a", "vision", Usage(accel_s=0.6), never).admit
    assert pools.admit("b", "vision", Usage(accel_s=0.4), never).admit
    assert not pools.admit("c", "vision", Usage(accel_s=0.01), never).admit


def test_borrowed_work_yields_to_the_owner_unless_it_has_started() -> None:
    pools = Pools(
        {"vision": PoolSpec(cpu_cores=2), "batch": PoolSpec(cpu_cores=1, borrow=True)},
        accelerators=0,
    )
    assert pools.admit("b1", "batch", ONE_CORE, never).lender is None
    assert pools.admit("b2", "batch", ONE_CORE, never).lender == "vision"
    assert pools.admit("b3", "batch", ONE_CORE, never).lender == "vision"
    assert not pools.admit("b4", "batch", ONE_CORE, never).admit  # nothing idle is left
    [vision] = [p for p in pools.snapshot() if p["pool"] == "vision"]
    assert vision["used"]["cpu_cores"] == 0 and vision["lent"]["cpu_cores"] == 2
    # running borrowed work keeps the quota: the owner waits, and is told why
    running = pools.decide("vision", ONE_CORE, never)
    assert not running.admit and "2 borrowed running tasks" in running.reason
    # not started: the newest borrowed task gives way, then the next
    first = pools.admit("v1", "vision", ONE_CORE, always)
    assert first.admit and first.yield_ids == ("b3",)
    second = pools.admit("v2", "vision", ONE_CORE, lambda t: t == "b2")
    assert second.yield_ids == ("b2",)
    assert pools.holding("b2") is None and pools.holding("b3") is None
    [batch] = [p for p in pools.snapshot() if p["pool"] == "batch"]
    assert batch["used"]["cpu_cores"] == 1 and batch["borrowed"]["cpu_cores"] == 0
    assert pools.admit("b5", "batch", ONE_CORE, never).admit is False  # no lending: vision full


def test_without_borrow_a_full_pool_waits_even_when_others_are_idle() -> None:
    pools = Pools({"vision": PoolSpec(cpu_cores=8), "batch": PoolSpec(cpu_cores=1)}, 0)
    assert pools.admit("b1", "batch", ONE_CORE, never).admit
    assert not pools.admit("b2", "batch", ONE_CORE, never).admit


# --- the agent -----------------------------------------------------------------------
#: ``pooled(doc)``: a test client of an emulated agent with the [pools] ``doc`` (below).
Pooled = Callable[[dict[str, Any]], Awaitable[Client]]


@pytest.fixture
def pooled(aiohttp_client: Any, emulated_agent: MakeConfig) -> Pooled:
    """Return ``await pooled(doc)``: a test client of an ``emulated_agent`` whose pools are
    the [pools] tables ``doc``."""

    async def start(doc: dict[str, Any]) -> Client:
        config = emulated_agent(pools=parse_pools(doc, "pools"))
        client: Client = await aiohttp_client(make_app(config))
        return client

    return start


async def submit(client: Client, tenant: str, n: int) -> list[str]:
    resp = await client.post(
        "/v1/tasks:batch", json={"tasks": [{**CPU_TASK, "tenant": tenant}] * n}
    )
    assert resp.status == 202, await resp.text()
    return [t["id"] for t in (await resp.json())["tasks"]]


async def tasks(client: Client) -> dict[str, dict[str, Any]]:
    doc = await (await client.get("/v1/tasks?limit=100")).json()
    return {t["id"]: t for t in doc["tasks"]}


async def pool(client: Client, name: str) -> dict[str, Any]:
    doc = await (await client.get("/v1/pools")).json()
    return next(p for p in doc["pools"] if p["pool"] == name)


@pytest.mark.asyncio
async def test_agent_holds_a_full_pool_back_and_shows_why(pooled: Pooled, until: Until) -> None:
    client = await pooled({"vision": {"cpu_cores": 1}})
    ids = await submit(client, "vision", 3)

    async def one_admitted() -> bool:
        states = [t["state"] for t in (await tasks(client)).values()]
        return (await pool(client, "vision"))["waiting"] == 2 and states.count("queued") == 2

    await until(one_admitted, interval=0.005)
    now = await tasks(client)
    waiting = [i for i in ids if now[i]["state"] == "queued"]
    assert len(waiting) == 2
    assert now[waiting[0]]["waiting"] == "waiting: pool vision full (1/1 cores)"
    resp = await client.get(f"/v1/tasks/{waiting[0]}/explain")
    assert resp.status == 409 and "pool vision full (1/1 cores)" in (await resp.json())["error"]
    vision = await pool(client, "vision")
    assert vision["quota"]["cpu_cores"] == 1 and vision["used"]["cpu_cores"] == 1
    metrics = await (await client.get("/metrics")).text()
    assert 'hetmesh_agent_pool_used{pool="vision",resource="cpu_cores"} 1.0' in metrics
    assert 'hetmesh_agent_pool_waiting{pool="vision"} 2.0' in metrics
    out = await asyncio.to_thread(_cli, ["pools", "--url", str(client.make_url(""))])
    header, row = out.splitlines()
    assert header.split() == [
        *["POOL", "CPU", "CORES", "MEMORY", "ACCELERATOR", "BORROWED", "LENT", "TASKS", "WAITING"]
    ]
    assert row.startswith("vision") and "1/1 cores" in row and row.split()[-2:] == ["1", "2"]
    on_devices_at_once = 0

    async def all_done() -> bool:
        nonlocal on_devices_at_once
        now = await tasks(client)
        busy = sum(now[i]["state"] in ("placed", "running") for i in ids)
        on_devices_at_once = max(on_devices_at_once, busy)
        return all(now[i]["state"] == "done" for i in ids)

    await until(all_done, interval=0.005)  # sampled often: a second task on a device is seen
    assert on_devices_at_once == 1  # never more than the pool's one core
    assert (await pool(client, "vision"))["used"]["cpu_cores"] == 0


def _cli(argv: list[str]) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli_main(argv) == 0
    return buf.getvalue()


@pytest.mark.asyncio
async def test_agent_borrowed_work_yields_to_the_owner(pooled: Pooled, until: Until) -> None:
    client = await pooled({"vision": {"cpu_cores": 2}, "batch": {"cpu_cores": 1, "borrow": True}})
    batch = await submit(client, "batch", 4)

    async def lent_two() -> bool:
        return bool((await pool(client, "vision"))["lent"]["cpu_cores"] == 2)

    await until(lent_two)  # one on its own quota, two borrowed from idle vision, one waits
    assert (await pool(client, "batch"))["waiting"] == 1
    vision = await submit(client, "vision", 2)

    async def all_done() -> bool:
        now = await tasks(client)
        return all(now[i]["state"] == "done" for i in [*batch, *vision])

    await until(all_done)
    done = await tasks(client)
    yielded = [i for i in batch if done[i]["attempts"] == 2]
    assert yielded, "no borrowed task gave its quota back"
    last_vision = max(done[i]["finished_at"] for i in vision)
    assert all(done[i]["finished_at"] > last_vision for i in yielded)


# --- the simulator -------------------------------------------------------------------
def test_simulated_flood_breaks_isolation_without_pools_and_not_with_them() -> None:
    from cloud_hub.simulator.pools import FloodScenario, compare_pools, simulate

    scenario = FloodScenario(duration_s=12.0, flood_window=(2.0, 10.0), seed=3)
    runs = compare_pools(scenario)
    assert runs["without_pools"]["pool_isolation_violations"] > 10
    assert runs["pools"]["pool_isolation_violations"] == 0
    assert runs["pools_flood_borrows"]["pool_isolation_violations"] == 0
    assert runs["pools_flood_borrows"]["yielded"] > 0  # borrowed work gave way
    pooled = runs["pools"]
    assert pooled["steady_wait_max_ms"] < runs["without_pools"]["steady_wait_max_ms"] / 10
    # the same arrivals are entitled in every run, and everything is served in the end
    assert len({r["steady_entitled"] for r in runs.values()}) == 1
    assert len({r["flood_tasks_done"] for r in runs.values()}) == 1
    # no flood at all: nothing to count, whatever the pools
    calm = FloodScenario(duration_s=12.0, flood_rate=0.001, seed=3)
    assert simulate(calm, pooled=False)["pool_isolation_violations"] == 0


@pytest.mark.asyncio
async def test_agent_fails_a_task_larger_than_its_whole_pool(pooled: Pooled, until: Until) -> None:
    client = await pooled({"vision": {"memory_mb": 1}})
    body = {**CPU_TASK, "tenant": "vision"}
    body["requirements"] = {**CPU_TASK["requirements"], "min_memory_bytes": 8 * 2**20}
    resp = await client.post("/v1/tasks", json=body)
    task_id = (await resp.json())["task"]["id"]

    async def failed() -> bool:
        return bool((await tasks(client))[task_id]["state"] == "failed")

    await until(failed)
    error = (await tasks(client))[task_id]["error"]
    assert error == "refused: needs 8 MB; pool vision has 1 in all"
    assert (await pool(client, "vision"))["waiting"] == 0
