"""Only the Fleet API faces the LAN: the SuperLink's Control API is the hub's alone.

Issue 12, finding 1: with the CA certificate every agent holds, ``flwr supernode register``
and ``flwr run`` against the hub's learning port registered a node and ran an outsider's
ServerApp on the hub. Here the hub's Federation runs in one network namespace with its
learning port on a LAN address, an outsider runs the real ``flwr`` CLI from another, and a
SuperNode the hub registered trains from a third (so the refusals are not of everything).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import select
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from aiohttp import web

from cloud_hub.learning import fleet_gateway
from cloud_hub.learning.localfed import gated_superlink, telemetry_db
from cloud_hub.learning.pki import make_node_key, make_tls
from cloud_hub.learning.superlink import APP_DIR, FederationError, SuperLink, SuperLinkConfig
from edge_agent.http_limits import ServerLimits
from edge_agent.mesh.netns import Lan, NetnsUnavailable
from edge_agent.predictor.supernode import (
    LEGACY_GRPC_ENV,
    SUPEREXEC_POLL_ENV,
    FlowerProcess,
    SuperNodeConfig,
    flower_env,
    flower_script,
    free_loopback_port,
    stopped_cleanly,
)

HUB_SCRIPT = Path(__file__).with_name("learning_hub_ns.py")
LEARNING_PORT = 9443
LOOPBACK = {"127.0.0.1", "::1"}


def test_superlink_listens_on_loopback_only_even_with_flowers_legacy_grpc_switches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in LEGACY_GRPC_ENV:  # Flower would open its gRPC Control/Fleet APIs on 0.0.0.0
        monkeypatch.setenv(name, "1")
    link = SuperLink(SuperLinkConfig(tmp_path / "hub", port=free_loopback_port()))
    try:
        link.start()
        listening = link.process.listening()
    finally:
        link.stop()
    assert listening == {("127.0.0.1", link.cfg.port)}
    assert not any(name in link.env for name in LEGACY_GRPC_ENV)


def test_superlink_that_listens_beyond_loopback_is_stopped_at_start(tmp_path: Path) -> None:
    link = SuperLink(SuperLinkConfig(tmp_path / "hub", port=free_loopback_port()))
    health = free_loopback_port()  # Flower's gRPC health server, here on every interface
    link.process.argv += ["--health-server-address", f"0.0.0.0:{health}"]
    exposed = rf"\('(::|0\.0\.0\.0)', {health}\).*must stay on 127"  # gRPC binds :: for 0.0.0.0
    with pytest.raises(FederationError, match=exposed):
        link.start()
    assert not link.process.alive()


def _post(
    port: int, ca: Path, method: str, path: str, body: bytes = b"", chunked: bool = False
) -> tuple[int, bytes]:
    """One HTTPS request, its path sent exactly as given: (status, body)."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=ssl.create_default_context(cafile=str(ca)), timeout=30
    )
    headers = {"Content-Type": "application/protobuf"}
    try:
        if chunked:
            conn.request(method, path, body=iter([body]), headers=headers, encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.mark.asyncio
async def test_gateway_passes_fleet_calls_on_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet_gateway, "MAX_BODY", 1000)
    async with gated_superlink(tmp_path) as (link, gateway):
        assert link.cfg.tls is not None
        tls = link.cfg.tls
        for method, path in [
            ("POST", "/v1/control/register-node"),
            ("POST", "/v1/control/start-run"),
            ("POST", "/v1/runtime/create-task"),
            ("POST", "/v1/fleet/../control/start-run"),
            ("POST", "//v1/fleet/get-run"),
            ("GET", "/v1/fleet/get-run"),
            ("GET", "/health"),
            ("GET", "/docs"),
        ]:
            status, body = await asyncio.to_thread(_post, gateway.port, tls.ca_cert, method, path)
            assert (status, body) == (404, b"only the Flower Fleet API is served on the hub's "
                                            b"learning port\n"), (method, path)  # fmt: skip
        assert (gateway.refused, gateway.forwarded) == (8, 0)
        # A Fleet call is passed on: Flower's own node authentication answers it (no signature).
        status, body = await asyncio.to_thread(
            _post, gateway.port, tls.ca_cert, "POST", "/v1/fleet/get-run"
        )
        assert status == 401 and b"Invalid SuperNode authentication" in body
        assert (gateway.refused, gateway.forwarded) == (8, 1)
        for chunked in (False, True):  # a body past the cap, declared or not, is refused
            status, body = await asyncio.to_thread(
                _post, gateway.port, tls.ca_cert, "POST", "/v1/fleet/push-object", b"x" * 1001,
                chunked,
            )  # fmt: skip
            assert status == 413 and b"Maximum request body size 1000 exceeded" in body
        assert gateway.forwarded == 1


@pytest.mark.asyncio
async def test_gateway_cuts_a_slow_head_and_keeps_serving(tmp_path: Path) -> None:
    """The gateway faces the LAN like the hub's API: a head that never ends gets 408."""
    tls = make_tls(tmp_path / "pki", ["127.0.0.1"])
    upstream = free_loopback_port()  # nothing listens: only the gateway's own answers matter
    limits = ServerLimits(header_timeout_s=0.3, body_timeout_s=5.0, max_connections=64)
    gateway = fleet_gateway.FleetGateway("127.0.0.1", free_loopback_port(), upstream, tls, limits)
    await gateway.start()
    try:
        ctx = ssl.create_default_context(cafile=str(tls.ca_cert))
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port, ssl=ctx)
        writer.write(b"POST /v1/fleet/get-run HTTP/1.1\r\nHost: x\r\n")  # and no blank line
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.split(b"\r\n", 1)[0].split()[1] == b"408", answer
        assert gateway.guard.counts["header_timeout"] == 1
        status, _ = await asyncio.to_thread(_post, gateway.port, tls.ca_cert, "GET", "/docs")
        assert status == 404  # still serving (and still refusing all but the Fleet API)
    finally:
        await gateway.stop()


@pytest.mark.asyncio
async def test_gateway_keeps_a_keepalive_connection_past_the_header_timeout(
    tmp_path: Path,
) -> None:
    """A SuperNode's keep-alive connection that outlives header_timeout_s is not cut: the
    header clock covers a head in progress only (the cause of a lost training reply, #16)."""
    tls = make_tls(tmp_path / "pki", ["127.0.0.1"])
    upstream = free_loopback_port()  # nothing listens: the gateway answers 502 itself
    limits = ServerLimits(header_timeout_s=0.3, body_timeout_s=5.0, max_connections=64)
    gateway = fleet_gateway.FleetGateway("127.0.0.1", free_loopback_port(), upstream, tls, limits)
    await gateway.start()

    def three_calls() -> list[int]:
        ctx = ssl.create_default_context(cafile=str(tls.ca_cert))
        conn = http.client.HTTPSConnection("127.0.0.1", gateway.port, context=ctx, timeout=10)
        statuses = []
        try:
            for _ in range(3):  # one connection, idle longer than the header timeout between
                conn.request("POST", "/v1/fleet/pull-object", body=b"x" * 10)
                resp = conn.getresponse()
                resp.read()
                statuses.append(resp.status)
                time.sleep(2 * limits.header_timeout_s)
        finally:
            conn.close()
        return statuses

    try:
        assert await asyncio.to_thread(three_calls) == [502, 502, 502]
        assert gateway.guard.counts["header_timeout"] == 0
    finally:
        await gateway.stop()


def _ask(proc: subprocess.Popen[bytes], command: str, timeout_s: float = 60.0) -> Any:
    """Send the namespaced hub one command line; its JSON answer."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command.encode() + b"\n")
    proc.stdin.flush()
    return _answer(proc.stdout, timeout_s)


def _answer(out: IO[bytes], timeout_s: float) -> Any:
    ready, _, _ = select.select([out], [], [], timeout_s)
    line = out.readline() if ready else b""
    if not line:
        raise AssertionError(f"the namespaced hub gave no answer in {timeout_s} s")
    return json.loads(line)


def _flwr(ns: str, home: Path, *args: str) -> dict[str, Any]:
    """The real `flwr` CLI in namespace ``ns`` with its connections in ``home``: its JSON."""
    cmd = ["ip", "netns", "exec", ns, flower_script("flwr"), *args, "--format", "json"]
    env = flower_env({"FLWR_HOME": str(home)})
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90, check=False)
    try:
        reply: dict[str, Any] = json.loads(out.stdout[out.stdout.index("{") :])
    except ValueError:
        reply = {"success": False, "error-message": out.stderr[-500:], "returncode": out.returncode}
    return reply


def _connections(home: Path, ca: Path, targets: dict[str, str]) -> Path:
    """A FLWR_HOME whose config names each target address (TLS, trusting ``ca``)."""
    home.mkdir(parents=True)
    lines = ['[superlink]\ndefault = "hub"']
    for name, address in targets.items():
        lines.append(f'[superlink.{name}]\naddress = "{address}"\nroot-certificates = "{ca}"')
    (home / "config.toml").write_text("\n\n".join(lines) + "\n")
    return home


@pytest.fixture
def lan() -> Iterator[Lan]:
    try:
        lan = Lan(hosts=3)  # 0: the hub, 1: an agent the hub registers, 2: an outsider
    except NetnsUnavailable as err:
        pytest.skip(f"network namespaces unavailable: {err}")
    try:
        yield lan
    finally:
        lan.close()


@pytest.mark.slow
def test_outsider_with_the_ca_cannot_register_or_run_but_a_registered_node_trains(
    lan: Lan, tmp_path: Path
) -> None:
    hub_ip = lan.address(0)
    with (tmp_path / "hub.log").open("wb") as hub_log:
        hub = subprocess.Popen(
            ["ip", "netns", "exec", lan.ns(0), sys.executable, str(HUB_SCRIPT),
             str(tmp_path / "hub"), hub_ip, str(LEARNING_PORT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=hub_log, env=flower_env(),
        )  # fmt: skip
    with hub:
        _attack_then_train(lan, tmp_path, hub)
    assert hub.returncode == 0


def _attack_then_train(lan: Lan, tmp_path: Path, hub: subprocess.Popen[bytes]) -> None:
    hub_ip = lan.address(0)
    node: FlowerProcess | None = None
    try:
        assert hub.stdout is not None
        ready = _answer(hub.stdout, 90.0)
        ca = tmp_path / "hub" / "pki" / "ca.pem"  # what every agent is handed
        before = _ask(hub, "info")
        assert before["pids"] and {a for a, _ in before["listening"]} <= LOOPBACK
        assert [ready["superlink_port"]] == [p for _, p in before["listening"]]

        # The outsider: the CA certificate, its own key pair, the real flwr CLI, another host.
        outsider = make_node_key(tmp_path / "outsider", "outsider")
        home = _connections(
            tmp_path / "outsider-home", ca,
            {"hub": f"{hub_ip}:{LEARNING_PORT}", "direct": f"{hub_ip}:{ready['superlink_port']}"},
        )  # fmt: skip
        register = ["supernode", "register", str(outsider.public)]
        refused = before["refused"]
        for attempt in ([*register, "hub"], ["run", str(APP_DIR), "hub"]):
            reply = _flwr(lan.ns(2), home, *attempt)
            assert reply["success"] is False, reply
            now = _ask(hub, "info")["refused"]
            assert now > refused  # it reached the learning port and was turned away there
            refused = now
        reply = _flwr(lan.ns(2), home, *register, "direct")  # nothing on the LAN at that port
        assert reply["success"] is False, reply

        # The hub itself registers an agent's key (its learning poll) and starts its run.
        assert _ask(hub, "run") == {"wanted": True}
        agent = make_node_key(tmp_path / "agent", "agent")
        answer = _ask(hub, f"report box1 {agent.public}")
        assert answer["run"]["active"] and answer["run"]["superlink"] == f"{hub_ip}:{LEARNING_PORT}"
        root = tmp_path / "agent" / "superlink-ca.pem"
        root.write_text(answer["run"]["root_certificates"])
        cfg = SuperNodeConfig(
            superlink=answer["run"]["superlink"],
            node_config={"telemetry-db": str(telemetry_db(tmp_path / "box1.db", seed=1))},
            root_certificates=root,
            auth_private_key=agent.private,
            runtime_port=free_loopback_port(),
            superexec_poll_s=0.25,
            flwr_home=tmp_path / "box1-flwr",
        )
        env = flower_env({"FLWR_HOME": str(cfg.flwr_home), SUPEREXEC_POLL_ENV: "0.25"})
        node = FlowerProcess(
            "box1", ["ip", "netns", "exec", lan.ns(1), *cfg.argv()], env, tmp_path / "box1.log"
        )
        node.start()
        during = _ask(hub, "info")  # SuperExec and the ServerApp are up by now, or soon
        record = _ask(hub, "wait", timeout_s=240.0)
        assert record["status"] == "completed", (record, node.log_tail())
        assert record["model_version"] == 1
        run_log = (tmp_path / "hub" / "superlink" / f"run-{record['run_id']}.log").read_text()
        assert "Received 1 results and 0 failures" in run_log  # box1 trained, through the gateway
        after = _ask(hub, "info")
        assert after["forwarded"] > 0  # the node's Fleet calls went through the gateway
        assert {a for a, _ in during["listening"] + after["listening"]} <= LOOPBACK

        # What the SuperLink holds: the hub's one node and the hub's one run, nothing else.
        hub_home = Path(ready["home"])
        nodes = _flwr(lan.ns(0), hub_home, "supernode", "list", "hetmesh")
        assert nodes["success"] and len(nodes["nodes"]) == 1, nodes
        runs = _flwr(lan.ns(0), hub_home, "ls", "hetmesh")
        assert runs["success"] and [int(r["run-id"]) for r in runs["runs"]] == [record["run_id"]]
        assert stopped_cleanly(node.stop())
    finally:
        if node is not None:
            node.stop()
        if hub.poll() is None:
            _ask(hub, "stop", timeout_s=60.0)
            hub.wait(30)


@pytest.mark.asyncio
async def test_a_fleet_call_slower_than_the_head_timeout_is_answered_not_cut(
    tmp_path: Path,
) -> None:
    """Seen in CI under load: the gateway's head clock ran on while a call waited upstream,
    so a SuperNode's ``pull-object`` got 408 and the node dropped out of the round."""
    tls = make_tls(tmp_path / "pki", ["127.0.0.1"])

    async def slow(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(1.0)  # longer than the head timeout below
        return web.Response(body=b"late but whole")

    upstream_app = web.Application()
    upstream_app.router.add_post("/v1/fleet/pull-object", slow)
    runner = web.AppRunner(upstream_app)
    await runner.setup()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tls.server_cert, tls.server_key)
    upstream = free_loopback_port()
    await web.TCPSite(runner, "127.0.0.1", upstream, ssl_context=server_ctx).start()
    limits = ServerLimits(header_timeout_s=0.3, body_timeout_s=5.0, max_connections=64)
    gateway = fleet_gateway.FleetGateway("127.0.0.1", free_loopback_port(), upstream, tls, limits)
    await gateway.start()
    try:
        for _ in range(2):
            status, body = await asyncio.to_thread(
                _post, gateway.port, tls.ca_cert, "POST", "/v1/fleet/pull-object", b"x" * 100
            )
            assert (status, body) == (200, b"late but whole")
        assert gateway.guard.counts["header_timeout"] == 0 and gateway.forwarded == 2
    finally:
        await gateway.stop()
        await runner.cleanup()
