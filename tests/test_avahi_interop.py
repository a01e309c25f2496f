"""Interop with Avahi, a third-party mDNS/DNS-SD stack, across network namespaces (root).

A LAN (``netns.Lan``): host 0 runs an `edge-agent run` daemon ``origin`` (rpi5: no NPU;
``[hub] url = "mdns"``) beside a private avahi-daemon started first (the usual Linux box:
both stacks share port 5353), host 2 a daemon ``npu`` (rk3588: the only NPU) in the same
fleet, host 1 another private avahi-daemon, the third-party host whose avahi-publish
announces what it likes; host 3 is added for a late agent. Each avahi has its own D-Bus bus
(``tests/support/avahi.py``). Avahi's tools must parse what we announce (RFC 6763 records:
instance name, SRV port and target, A address, the TXT keys of docs/mesh.md and
docs/hub-protocol.md §8), and what avahi announces is only ever a hint to us: fake agents
and hubs, a member's name, id, host name or endpoint claimed elsewhere, and goodbyes win
nothing without the fleet key or the join token.

Needs root, ``ip`` and avahi-daemon, avahi-utils, dbus: skipped with the reason where they
are missing, failed instead with ``HETMESH_REQUIRE_AVAHI=1`` or ``HETMESH_REQUIRE_ALL=1``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent import __version__
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.netns import ROOT, Lan, NetnsUnavailable
from edge_agent.mesh.netns_fleet import wait_for
from edge_agent.mesh.netns_processes import AgentProcess
from tests.conftest import required
from tests.support.avahi import AvahiHost, avahi_host, missing_tools

pytestmark = pytest.mark.slow
KEY_TEXT = "avahi-interop-fleet-key-00000000"
FP = FleetKey(KEY_TEXT).fingerprint
JOIN_TOKEN = "avahi-interop-join-token"
MESH: dict[str, object] = {"heartbeat_s": 0.5}
NPU_TASK = {
    "semantics": {"gflops": 2.0, "precision": "int8"},
    "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None},
}
ORIGIN, AVAHI, NPU, LATE = 0, 1, 2, 3  # host numbers on the LAN (LATE: added by a test)
APT_PACKAGES = "avahi-daemon avahi-utils dbus"  # Debian's, as .ci/run installs them


class Site:
    """The LAN, the two agents and the two avahi hosts of this module."""

    def __init__(self, lan: Lan, work: Path, avahi: AvahiHost, beside: AvahiHost) -> None:
        self.lan, self.work, self.avahi, self.beside = lan, work, avahi, beside
        self.key_file = key_file = work / "fleet.key"
        key_file.write_text(KEY_TEXT, encoding="utf-8")
        hub = {
            "url": "mdns",
            "join_token": JOIN_TOKEN,
            "agent_id": "origin",
            "retry_s": 0.2,
            "mdns_interfaces": [lan.address(ORIGIN)],
        }
        self.agents: list[AgentProcess] = []
        try:
            self.origin = self.start_agent(ORIGIN, "origin", "rpi5", hub)
            self.npu = self.start_agent(NPU, "npu", "rk3588")
        except BaseException:
            self.close()
            raise

    def start_agent(
        self, host: int, name: str, profile: str, hub: dict[str, object] | None = None
    ) -> AgentProcess:
        """Start an agent of the fleet on ``host`` (stopped by ``close``)."""
        lan = self.lan
        agent = AgentProcess(
            lan.ns(host), self.work, name, profile, lan.address(host), self.key_file, MESH, hub=hub
        )
        self.agents.append(agent)
        return agent

    def close(self) -> None:
        for agent in self.agents:
            agent.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    missing = missing_tools()
    if missing:
        why = f"avahi interop needs {', '.join(missing)} (apt-get install {APT_PACKAGES})"
        if required("AVAHI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        lan = Lan(hosts=3)
    except NetnsUnavailable as err:
        if required("NETNS"):
            pytest.fail(f"network namespaces unavailable (HETMESH_REQUIRE_NETNS): {err}")
        pytest.skip(f"network namespaces unavailable: {err}")
    try:
        with (
            avahi_host(lan.ns(AVAHI), lan.host_if(AVAHI), "avahi-peer") as avahi,
            avahi_host(lan.ns(ORIGIN), lan.host_if(ORIGIN), "avahi-origin") as beside,
        ):  # avahi first on origin's host: the agent's mDNS sockets share port 5353 with it
            site = Site(lan, tmp_path_factory.mktemp("avahi"), avahi, beside)
            try:
                site.origin.wait_ready()
                site.npu.wait_ready()
                yield site
            finally:
                site.close()
    finally:
        lan.close()


@pytest.fixture(autouse=True)
def withdrawn(site: Site) -> Iterator[None]:
    """Withdraw what each test had avahi publish: the next test starts from the members'
    own records only."""
    try:
        yield
    finally:
        site.avahi.withdraw()


def peers(agent: AgentProcess) -> dict[str, dict[str, Any]]:
    doc = agent.call("GET", "/v1/peers")
    return {p["agent_id"]: p for p in doc["peers"]}


def counters(agent: AgentProcess) -> dict[str, int]:
    doc: dict[str, int] = agent.call("GET", "/v1/peers")["counters"]
    return doc


#: An HTTP server that is neither agent nor hub (argv: address, port, JSON answer, log file):
#: it answers every request with the JSON given and logs each request line and body.
DECOY = """
import http.server, sys
address, port, answer, log = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
class Decoy(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(log, "a") as f:
            f.write(f"{self.command} {self.path} {body.decode(errors='replace')}\\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    do_GET = do_POST = do_PUT = _answer
    def log_message(self, *args: object) -> None:
        pass
server = http.server.HTTPServer((address, port), Decoy)
open(log, "a").close()
server.serve_forever()
"""


@contextlib.contextmanager
def decoy(site: Site, port: int, answer: dict[str, Any]) -> Iterator[Path]:
    """Serve ``DECOY`` on the avahi host at ``port``; yield its request log."""
    log = site.work / f"decoy-{port}.log"
    ns, address = site.lan.ns(AVAHI), site.lan.address(AVAHI)
    cmd = [sys.executable, "-c", DECOY, address, str(port), json.dumps(answer), str(log)]
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdin=subprocess.DEVNULL)
    try:
        wait_for(f"the decoy on port {port}", log.exists, 20)
        yield log
    finally:
        proc.terminate()
        proc.wait(5)


def wait_grows(agent: AgentProcess, before: dict[str, int], counter: str, what: str) -> None:
    """Wait (30 s at most) until ``agent``'s mesh ``counter`` exceeds its value in ``before``."""
    wait_for(what, lambda: counters(agent).get(counter, 0) > before.get(counter, 0), 30)


def refusals(agent: AgentProcess) -> int:
    """Return how many announcements ``agent`` challenged in vain or, having challenged that
    endpoint in vain lately, did not challenge again."""
    now = counters(agent)
    return sum(
        now.get(k, 0) for k in ("spoof_wrong_key", "challenge_unreachable", "rejected_backoff")
    )


def trusted_online(agent: AgentProcess, peer: str, endpoint: str) -> bool:
    row = peers(agent).get(peer)
    return (
        row is not None
        and row["trusted"]
        and row["state"] == "online"
        and (row["address"] == endpoint)
    )


def run_npu_task(origin: AgentProcess) -> dict[str, Any]:
    """Submit NPU_TASK to origin (no NPU of its own); return the task once it is final."""
    task_id = origin.call("POST", "/v1/tasks", NPU_TASK)["task"]["id"]

    def final() -> dict[str, Any] | None:
        task: dict[str, Any] = origin.call("GET", f"/v1/tasks/{task_id}")["task"]
        return task if task["state"] in ("done", "failed") else None

    task: dict[str, Any] = wait_for("the NPU task to finish", final, 30)
    return task


#: A real hub (`cloud-hub run`) announcing itself (argv: config file).
def start_hub(
    lan: Lan, work: Path, host: int, hub_id: str, join_token: str
) -> subprocess.Popen[bytes]:
    config = work / f"{hub_id}.toml"
    lines = [
        "[hub]",
        f"data_dir = {json.dumps(str(work / hub_id))}",
        f"join_token = {json.dumps(join_token)}",
        'admin_token = "avahi-interop-admin"',
        f"hub_id = {json.dumps(hub_id)}",
        "[discovery]",
        "advertise = true",
        "[api]",
        f"host = {json.dumps(lan.address(host))}",
        "port = 8480",
    ]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "cloud_hub.cli", "run", "--config", str(config)]
    with (work / f"{hub_id}.log").open("wb") as log:
        return subprocess.Popen(
            ["ip", "netns", "exec", lan.ns(host), *cmd],
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_avahi_resolves_an_agents_record_as_standard_dns_sd(site: Site) -> None:
    """avahi-browse on another host resolves the agent: instance name = agent id, SRV port
    and target, its LAN address, and the documented TXT keys as separate key=value strings."""
    found = site.avahi.browse_until("_hetmesh._tcp", "npu")
    assert found.service_type == "_hetmesh._tcp"
    assert (found.host, found.address, found.port) == ("npu.local", site.lan.address(NPU), 8470)
    assert found.interface == site.lan.host_if(AVAHI)
    txt = found.txt_map()
    assert set(txt) == {"id", "v", "port", "fp", "kinds"}
    assert txt["id"] == "npu" and txt["port"] == "8470" and txt["fp"] == FP
    assert txt["v"] == __version__ and "npu:1" in txt["kinds"].split(",")
    origin = site.avahi.browse_until("_hetmesh._tcp", "origin")
    assert (origin.address, origin.txt_map()["id"]) == (site.lan.address(ORIGIN), "origin")


def test_avahi_on_the_agents_own_host_resolves_it_and_its_peers(site: Site) -> None:
    """The common deployment: an avahi-daemon already runs on the agent's box (it bound
    5353 first). Both stacks share the port; avahi there resolves the agent's own record
    and its peer's, and the agent still hears the LAN (it trusts npu over multicast)."""
    own = site.beside.browse_until("_hetmesh._tcp", "origin")
    assert (own.address, own.port, own.txt_map()["id"]) == (
        site.lan.address(ORIGIN),
        8470,
        "origin",
    )
    peer = site.beside.browse_until("_hetmesh._tcp", "npu")
    assert (peer.address, peer.txt_map()["fp"]) == (site.lan.address(NPU), FP)
    real = f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(site.origin, "npu", real), 60)
    # npu's announcement, heard: trust may come first from npu's own signed hello (no name);
    # the name comes with npu's announcement, even one heard while that hello is checked
    # (test_mesh_discovery: it was once dropped as a duplicate challenge)
    wait_for(
        "origin to hear npu's name", lambda: counters(site.origin).get("names_seen", 0) >= 1, 60
    )


def test_avahi_resolves_the_hubs_record_as_standard_dns_sd(site: Site) -> None:
    """A real `cloud-hub run` with ``advertise = true``: avahi resolves its id, port, scheme."""
    hub = start_hub(site.lan, site.work, NPU, "hub-avahi", "not-this-fleets-token")
    try:
        found = site.avahi.browse_until("_hetmesh-hub._tcp", "hub-avahi", timeout_s=60)
    finally:
        hub.terminate()
        hub.wait(10)
    assert (found.host, found.address, found.port) == (
        "hub-avahi.local",
        site.lan.address(NPU),
        8480,
    )
    assert found.txt_map() == {
        "id": "hub-avahi",
        "v": __version__,
        "port": "8480",
        "scheme": "http",
    }


def test_an_agent_published_by_avahi_is_a_hint_never_a_peer(site: Site) -> None:
    """Fake agents announced with avahi-publish (one behind an HTTP server that is no agent,
    one at a port where nothing listens, one without a key fingerprint) are challenged and
    counted, never listed as peers, never sent work: an NPU task goes to the real NPU host."""
    origin, real = site.origin, f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(origin, "npu", real), 60)
    before = counters(origin)
    with decoy(site, 8471, {"ok": True}) as asked:
        common = ["v=0.1.0", f"fp={FP}", "kinds=npu:8"]
        publish = site.avahi.publish
        publish("-s", "npu-fast", "_hetmesh._tcp", "8471", "id=npu-fast", "port=8471", *common)
        publish("-s", "npu-dark", "_hetmesh._tcp", "8472", "id=npu-dark", "port=8472", *common)
        publish("-s", "npu-nokey", "_hetmesh._tcp", "8471", "id=npu-nokey", "port=8471", "v=1")

        def refused() -> bool:
            now = counters(origin)
            kinds = ("spoof_wrong_key", "challenge_unreachable", "spoof_no_key")
            return all(now.get(k, 0) > before.get(k, 0) for k in kinds)

        wait_for("origin to challenge and refuse avahi's fakes", refused, 30)
        assert set(peers(origin)) == {"npu"}
        task = run_npu_task(origin)
        task_id = task["id"]
        assert task["state"] == "done" and task["ran_on"] == "npu"
        assert {b["peer"] for b in task["chain"][0]["bids"]} == {"npu"}  # fakes never asked
        requests = asked.read_text().splitlines()
        assert requests and all(" /mesh/v1/" in line for line in requests)  # challenges only
        assert not any(task_id in line for line in requests)


def test_an_avahi_record_claiming_a_members_id_elsewhere_does_not_repoint_it(site: Site) -> None:
    """avahi-publish of ``npu``'s instance name and id at the avahi host's address: our
    zeroconf defends the name (avahi renames its copy), the claim is challenged and refused,
    and origin keeps ``npu`` trusted at its real address."""
    origin, real = site.origin, f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(origin, "npu", real), 60)
    before = counters(origin)
    name = site.avahi.publish(
        "-s", "npu", "_hetmesh._tcp", "8470",
        "id=npu", "port=8470", "v=0.1.0", f"fp={FP}", "kinds=npu:1",
    )  # fmt: skip
    assert name != "npu"  # the real member's name was taken: avahi renamed its record
    wait_grows(origin, before, "challenge_unreachable", "origin to challenge the claim there")
    assert trusted_online(origin, "npu", real)
    resolved = site.avahi.browse_until("_hetmesh._tcp", name)
    assert resolved.address == site.lan.address(AVAHI)  # the claim named another address


def test_avahi_taking_a_members_host_name_does_not_repoint_it(site: Site) -> None:
    """avahi-publish -a of ``npu.local`` (the SRV target of npu's record) at the avahi host's
    address. python-zeroconf does not answer the ANY probe for its host name, so avahi may
    win the name (it flushes npu's A record from the LAN's caches); whichever way the probe
    goes, origin keeps npu trusted at its real address, and a resolution that now points
    at the avahi host is challenged there and refused."""
    origin, real = site.origin, f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(origin, "npu", real), 60)
    before = refusals(origin)
    said = site.avahi.publish_attempt("-a", "-R", "npu.local", site.lan.address(AVAHI))
    if "Established" in said:  # avahi now answers for npu.local: origin re-resolves npu
        assert site.avahi.resolve_host("npu.local") == site.lan.address(AVAHI)
        wait_for(
            "origin to refuse npu's record at the avahi host's address",
            lambda: refusals(origin) > before,
            30,
        )
    else:
        assert "collision" in said.lower(), said
    for _ in range(3):  # over several heartbeats (0.5 s)
        assert trusted_online(origin, "npu", real)
        time.sleep(0.5)
    assert run_npu_task(origin)["ran_on"] == "npu"


def publish_twin(site: Site, name: str, agent_id: str) -> None:
    """Have avahi announce ``name`` with ``agent_id``, the fleet's fingerprint and SRV target
    ``npu.local``: it resolves to npu's real address and port."""
    site.avahi.publish(
        "-s", "-H", "npu.local", name, "_hetmesh._tcp", "8470",
        f"id={agent_id}", "v=0.1.0", "port=8470", f"fp={FP}", "kinds=npu:1",
    )  # fmt: skip


def test_a_record_naming_a_members_endpoint_under_another_id_trusts_nothing_new(
    site: Site,
) -> None:
    """``npu-alias`` announced by avahi at npu's own endpoint: origin's challenge is
    addressed to ``npu-alias``, npu's signed answer is not that agent's, so no phantom
    second peer is trusted; npu stays trusted and gets work, and the refused claim does not
    make origin ignore npu's records at that endpoint (regression: the refusal backed off
    the endpoint for every id, so an alias silenced the member it pointed at)."""
    origin, real = site.origin, f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(origin, "npu", real), 60)
    before = counters(origin)
    publish_twin(site, "npu-alias", "npu-alias")
    wait_grows(origin, before, "spoof_wrong_key", "origin to refuse npu-alias")
    assert set(peers(origin)) == {"npu"} and trusted_online(origin, "npu", real)
    publish_twin(site, "npu-again", "npu")  # npu's id at npu's endpoint: a true record
    wait_grows(origin, before, "names_seen", "origin to file npu-again under npu")
    assert counters(origin).get("rejected_backoff", 0) == before.get("rejected_backoff", 0)
    assert run_npu_task(origin)["ran_on"] == "npu"


def test_a_goodbye_avahi_sends_for_a_twin_of_a_member_only_makes_origin_check_it(
    site: Site,
) -> None:
    """avahi-publish -H npu.local of ``npu-twin`` with npu's id, port and fingerprint (it
    resolves to npu's real endpoint, so origin files the name under npu), then withdrawn:
    avahi's goodbye turns npu suspect, origin's signed check answers at once, and npu is
    online and gets work again: a goodbye is a hint, like an announcement."""
    origin, real = site.origin, f"{site.lan.address(NPU)}:8470"
    wait_for("origin to trust npu", lambda: trusted_online(origin, "npu", real), 60)
    before = counters(origin)
    publish_twin(site, "npu-twin", "npu")
    wait_grows(origin, before, "names_seen", "origin to file npu-twin under npu")
    site.avahi.withdraw()  # avahi sends the goodbye for npu-twin
    wait_grows(origin, before, "goodbyes", "origin to hear the goodbye")
    wait_for("npu to be online again", lambda: trusted_online(origin, "npu", real), 10)
    assert set(peers(origin)) >= {"npu"} and run_npu_task(origin)["ran_on"] == "npu"


def test_an_agent_whose_name_avahi_holds_takes_another_and_is_trusted_where_it_is(
    site: Site,
) -> None:
    """avahi announces ``late`` (id late, the fleet's fingerprint, at the avahi host) before
    the agent ``late`` starts on a new host: the agent's probe finds the name defended and
    announces under another instance name, avahi resolves that one at the agent's address
    with id ``late``, and origin trusts ``late`` there, never at the avahi host."""
    origin, lan = site.origin, site.lan
    held = site.avahi.publish(
        "-s", "late", "_hetmesh._tcp", "8470",
        "id=late", "v=0.1.0", "port=8470", f"fp={FP}", "kinds=npu:1",
    )  # fmt: skip
    assert held == "late"
    lan.add_host(LATE)
    late = site.start_agent(LATE, "late", "intel_n100")
    try:
        late.wait_ready()
        own = site.avahi.browse_until(
            "_hetmesh._tcp", lambda r: r.address == lan.address(LATE), timeout_s=60
        )
        assert own.name != "late" and own.name.startswith("late")
        assert own.txt_map()["id"] == "late" and own.port == 8470
        real = f"{lan.address(LATE)}:8470"
        wait_for(
            "origin to trust late at its own address",
            lambda: trusted_online(origin, "late", real),
            60,
        )
        held_by_avahi = site.avahi.browse_until("_hetmesh._tcp", "late")
        assert held_by_avahi.address == lan.address(AVAHI)  # avahi's record is still there
        assert trusted_online(origin, "late", real)
    finally:
        late.stop()


def test_a_hub_published_by_avahi_cannot_prove_the_join_token_and_is_refused(site: Site) -> None:
    """avahi-publish of ``_hetmesh-hub._tcp`` for a server that answers the proof question
    with a forged proof: the agent with ``[hub] url = "mdns"`` refuses it, never sends it
    the join token, never enrols."""
    origin, address = site.origin, site.lan.address(AVAHI)
    forged = {"hub_id": "hub-fake", "endpoint": f"{address}:8481", "proof": "0" * 64}
    with decoy(site, 8481, forged) as asked:
        name = site.avahi.publish(
            "-s", "hub-fake", "_hetmesh-hub._tcp", "8481",
            "id=hub-fake", "v=0.1.0", "port=8481", "scheme=http",
        )  # fmt: skip

        def refused() -> str | None:
            hub = origin.call("GET", "/v1/health")["hub"]
            last = str((hub["discovery"] or {}).get("last_refused") or "")
            return last if last.startswith(name) else None

        why = wait_for("origin to refuse avahi's hub", refused, 30)
        assert f"{address}:8481" in why and "wrong proof" in why
        hub = origin.call("GET", "/v1/health")["hub"]
        assert not hub["enrolled"] and hub["heartbeats"] == 0 and hub["hub_id"] is None
        requests = asked.read_text().splitlines()
        assert requests and all(line.startswith("POST /v1/hub/proof ") for line in requests)
        assert not any(JOIN_TOKEN in line for line in requests)
