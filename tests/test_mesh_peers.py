"""Advertisement hints and the bounded peer table: TXT limits, rate limit, cap, liveness."""

from __future__ import annotations

import pytest

from edge_agent.mesh.advertise import TXT_MAX_BYTES, Hint, build_txt, parse_txt
from edge_agent.mesh.errors import AdvertError
from edge_agent.mesh.peers import OFFLINE, ONLINE, SUSPECT, PeerTable

FP = "0123456789abcdef"


def hint(
    agent: str = "b", address: str = "127.0.0.2", port: int = 9000, fp: str | None = FP
) -> Hint:
    return Hint(agent, "0.1.0", port, fp, "npu:1", address, f"{agent}._hetmesh._tcp.local.")


def test_txt_round_trips_and_stays_small_and_secret_free() -> None:
    props = build_txt("agent-1", "0.1.0", 8470, FP, "cpu_arm:1,npu:1")
    raw = {k.encode(): v.encode() for k, v in props.items()}
    got = parse_txt("agent-1._hetmesh._tcp.local.", "127.0.0.1", raw)
    assert (got.agent_id, got.api_port, got.fingerprint, got.kinds) == (
        "agent-1",
        8470,
        FP,
        "cpu_arm:1,npu:1",
    )
    assert set(props) == {"id", "v", "port", "fp", "kinds"}
    with pytest.raises(AdvertError, match="over 400"):
        build_txt("agent-1", "0.1.0", 8470, FP, "x" * TXT_MAX_BYTES)


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({b"id": b"a", b"port": b"99999"}, "port"),
        ({b"id": b"a", b"port": b"1", b"fp": b"zz"}, "fp"),
        ({b"id": b"bad id!", b"port": b"1"}, "agent id"),
    ],
)
def test_malformed_announcements_name_the_field(props: dict[bytes, bytes], field: str) -> None:
    with pytest.raises(AdvertError, match=field):
        parse_txt("x._hetmesh._tcp.local.", "127.0.0.1", dict(props))


def test_hints_never_trust_and_unkeyed_or_foreign_services_are_counted() -> None:
    t = PeerTable("a", FP)
    assert t.admit(hint()) is True and t.peers == {}
    assert t.admit(hint(fp=None)) is False
    assert t.admit(hint(fp="f" * 16)) is False
    assert t.counters["spoof_no_key"] == 1 and t.counters["foreign_fleet"] == 1
    t.challenge_failed(hint(), "bad_key")
    assert t.counters["spoof_wrong_key"] == 1
    assert t.admit(hint()) is False and t.counters["rejected_backoff"] == 1


def test_announcements_are_rate_limited_per_source() -> None:
    t = PeerTable("a", FP, rate_per_s=0.001, burst=3)
    results = [t.admit(hint(agent=f"p{i}")) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert t.counters["rate_limited"] == 2
    assert t.admit(hint(agent="q", address="127.0.0.3")) is True  # another source


def test_the_table_is_capped_and_evicts_offline_peers_first() -> None:
    t = PeerTable("a", FP, cap=2, offline_after=1)
    t.trust("p1", "127.0.0.2", 1, "v", "")
    t.trust("p2", "127.0.0.3", 1, "v", "")
    assert t.admit(hint(agent="p3", address="127.0.0.4")) is False
    assert t.counters["table_full"] == 1
    t.missed("p1")
    assert t.peers["p1"].state == OFFLINE
    assert t.admit(hint(agent="p3", address="127.0.0.4")) is True
    assert "p1" not in t.peers and t.counters["evicted"] == 1


def test_liveness_goes_suspect_then_offline_and_recovers() -> None:
    t = PeerTable("a", FP, offline_after=3)
    t.trust("p", "127.0.0.2", 1, "v", "", name="p._hetmesh._tcp.local.")
    t.missed("p")
    assert t.peers["p"].state == SUSPECT and t.online() == []
    t.missed("p")
    t.missed("p")
    assert t.peers["p"].state == OFFLINE
    t.seen("p")
    assert t.peers["p"].state == ONLINE
    assert t.goodbye("p._hetmesh._tcp.local.") == "p"
    assert t.peers["p"].state == SUSPECT and t.counters["goodbyes"] == 1
