"""Fleet credential: signatures over every field and the recipient, the window, replays
refused whatever the receiver's wall clock does, bounded nonce memory, responses."""

from __future__ import annotations

import pytest

from edge_agent.mesh.credential import (
    H_AGENT,
    H_NONCE,
    H_RECIPIENT,
    H_SIGNATURE,
    H_TIMESTAMP,
    FleetKey,
    sign_request,
    sign_response,
    verify_response,
)
from edge_agent.mesh.errors import AuthError, ClockSkew, FleetKeyError
from edge_agent.mesh.replay import KeyedVerifier, Verifier

KEY = FleetKey("fleet-key-for-unit-tests-000000")
NOW = 1_700_000_000.0
BODY = b'{"contract": {"semantics": {"gflops": 1}}}'


class Clocks:
    """A wall clock and a monotonic clock that tests move apart."""

    def __init__(self) -> None:
        self.wall, self.mono = NOW, 1000.0

    def tick(self, s: float) -> None:
        self.wall += s
        self.mono += s


def verifier(clocks: Clocks, me: str = "agent-b", **kw: float) -> Verifier:
    return Verifier(KEY, me, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono, **kw)  # type: ignore[arg-type]


def signed(nonce: str = "n1", now: float = NOW, to: str = "agent-b") -> dict[str, str]:
    return sign_request(KEY, "agent-a", "POST", "/mesh/v1/tasks", BODY, to=to, now=now, nonce=nonce)


def verify(
    headers: dict[str, str],
    *,
    method: str = "POST",
    path: str = "/mesh/v1/tasks",
    body: bytes = BODY,
    now: float = NOW,
    v: Verifier | None = None,
) -> str:
    clocks = Clocks()
    clocks.wall = now
    return (v if v is not None else verifier(clocks)).verify(method, path, body, headers)


def test_a_signed_request_verifies_and_names_its_sender() -> None:
    assert verify(signed()) == "agent-a"


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("method", {"method": "PUT"}),
        ("path", {"path": "/mesh/v1/bid"}),
        ("query", {"path": "/mesh/v1/tasks?x=1"}),
        ("body", {"body": BODY.replace(b"1", b"2")}),
    ],
)
def test_tampering_with_a_request_part_is_rejected(field: str, change: dict[str, object]) -> None:
    with pytest.raises(AuthError) as err:
        verify(signed(), **change)  # type: ignore[arg-type]
    assert err.value.reason == "bad_signature", field


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (H_TIMESTAMP, f"{NOW + 1:.3f}"),
        (H_NONCE, "n2"),
        (H_AGENT, "agent-c"),
        (H_RECIPIENT, "agent-c"),
        (H_SIGNATURE, "0" * 64),
    ],
)
def test_tampering_with_a_signed_header_is_rejected(header: str, value: str) -> None:
    headers = signed()
    headers[header] = value
    with pytest.raises(AuthError) as err:
        verify(headers)
    assert err.value.reason == "bad_signature"


def test_a_request_signed_for_another_member_is_refused_as_wrong_recipient() -> None:
    clocks = Clocks()
    for_b = signed(to="agent-b")
    with pytest.raises(AuthError) as err:
        verifier(clocks, me="agent-c").verify("POST", "/mesh/v1/tasks", BODY, for_b)
    assert err.value.reason == "wrong_recipient" and "agent-b" in str(err.value)


def test_a_request_of_the_older_scheme_is_refused_by_name() -> None:
    old = signed()
    del old[H_RECIPIENT]
    with pytest.raises(AuthError) as err:
        verify(old)
    assert err.value.reason == "old_scheme" and "upgrade" in str(err.value)


def test_a_replayed_nonce_is_rejected_even_with_a_valid_signature() -> None:
    clocks = Clocks()
    v = verifier(clocks)
    verify(signed(), v=v)
    clocks.tick(5)
    with pytest.raises(AuthError) as err:
        verify(signed(), v=v)
    assert err.value.reason == "replay"


@pytest.mark.parametrize("skew", [-31.0, 31.0, 3600.0])
def test_a_timestamp_outside_the_window_is_a_clock_skew_with_its_figure(skew: float) -> None:
    with pytest.raises(ClockSkew) as err:
        verify(signed(), now=NOW + skew)
    assert err.value.reason == "stale" and err.value.skew_s == pytest.approx(-skew)
    assert err.value.nonce == "n1"


def test_a_request_signed_with_another_key_is_rejected() -> None:
    other = FleetKey("a-different-fleet-key-00000000")
    headers = sign_request(other, "agent-a", "POST", "/mesh/v1/tasks", BODY, to="agent-b", now=NOW)
    with pytest.raises(AuthError) as err:
        verify(headers)
    assert err.value.reason == "bad_signature"


def test_unsigned_and_malformed_requests_are_rejected() -> None:
    with pytest.raises(AuthError) as err:
        verify({})
    assert err.value.reason == "unsigned"
    headers = signed()
    headers[H_TIMESTAMP] = "yesterday"
    with pytest.raises(AuthError) as err:
        verify(headers)
    assert err.value.reason == "bad_timestamp"


def test_a_bad_signature_does_not_burn_the_nonce() -> None:
    v = verifier(Clocks())
    forged = signed()
    forged[H_SIGNATURE] = "f" * 64
    with pytest.raises(AuthError):
        verify(forged, v=v)
    assert verify(signed(), v=v) == "agent-a"


def test_a_wall_clock_excursion_forward_and_back_does_not_reopen_a_replay() -> None:
    """Finding 12.3: nonces used to expire by the receiver's wall clock."""
    clocks = Clocks()
    v = verifier(clocks)  # 30 s window
    captured = signed("captured")
    assert verify(captured, v=v) == "agent-a"
    clocks.wall += 90  # the receiver's clock is stepped forward past two windows...
    assert verify(signed("during", now=clocks.wall), v=v) == "agent-a"  # ...a request lands
    clocks.wall -= 90  # ...and stepped back; one real second passed
    clocks.tick(1)
    with pytest.raises(AuthError) as err:
        verify(captured, v=v)
    assert err.value.reason == "replay"


def test_a_forgotten_nonce_stays_refused_after_the_wall_clock_is_stepped_back() -> None:
    clocks = Clocks()
    v = verifier(clocks)
    captured = signed("captured")
    verify(captured, v=v)
    clocks.tick(61)  # the nonce is kept 2 windows + 1 s of the monotonic clock, then forgotten
    assert verify(signed("later", now=clocks.wall), v=v) == "agent-a"
    assert len(v) == 1
    clocks.wall = NOW + 1  # stepped back to the capture's time: inside its window again
    with pytest.raises(AuthError) as err:
        verify(captured, v=v)
    assert err.value.reason == "too_old"


def test_nonce_memory_is_capped_and_the_cap_never_refuses_fresh_traffic() -> None:
    clocks = Clocks()
    v = verifier(clocks, window_s=10, cache_max=2)
    first = signed("n0", now=NOW - 1)
    for h in (first, signed("n1"), signed("n2", now=NOW + 1)):
        assert verify(h, v=v) == "agent-a"  # the third forgets the oldest (n0) early
    assert len(v) == 2 and v._nonces.evicted == 1
    with pytest.raises(AuthError) as err:  # ...but it is still refused: below the mark
        verify(first, v=v)
    assert err.value.reason == "too_old"
    with pytest.raises(AuthError) as err:
        verify(signed("n2", now=NOW + 1), v=v)
    assert err.value.reason == "replay"


def test_a_response_signature_binds_nonce_status_body_responder_and_requester() -> None:
    sig = sign_response(KEY, "agent-b", "n1", 200, b"{}", to="agent-a")
    verify_response(KEY, "agent-b", "n1", 200, b"{}", sig, to="agent-a")
    for args in [
        ("agent-b", "n2", 200, b"{}", "agent-a"),
        ("agent-b", "n1", 500, b"{}", "agent-a"),
        ("agent-b", "n1", 200, b"[]", "agent-a"),
        ("agent-c", "n1", 200, b"{}", "agent-a"),
        ("agent-b", "n1", 200, b"{}", "agent-c"),
    ]:
        responder, nonce, status, body, to = args
        with pytest.raises(AuthError):
            verify_response(KEY, responder, nonce, status, body, sig, to=to)  # type: ignore[arg-type]
    with pytest.raises(AuthError) as err:
        verify_response(KEY, "agent-b", "n1", 200, b"{}", None, to="agent-a")
    assert err.value.reason == "unsigned_response"


def test_fleet_keys_are_redacted_fingerprinted_and_checked() -> None:
    text = "fleet-key-for-unit-tests-000000"
    assert text not in repr(KEY) and KEY.fingerprint in repr(KEY)
    assert FleetKey(text).fingerprint == KEY.fingerprint
    assert FleetKey(FleetKey.generate()).fingerprint != KEY.fingerprint
    with pytest.raises(FleetKeyError, match="at least 16"):
        FleetKey("short")
    with pytest.raises(ValueError):
        FleetKey("   ")


def test_a_keyed_verifier_checks_each_sender_with_its_own_key_and_nonces() -> None:
    keys = {"a1": "a1-key-0000000000000000", "a2": "a2-key-0000000000000000"}
    clocks = Clocks()
    v = KeyedVerifier(keys.get, "hub-1", clock=lambda: clocks.wall, monotonic=lambda: clocks.mono)

    def request(agent: str, key: str, nonce: str, to: str = "hub-1") -> dict[str, str]:
        return sign_request(FleetKey(key), agent, "POST", "/p", BODY, to=to, now=NOW, nonce=nonce)

    assert v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n1")) == "a1"
    # the same nonce from another agent is that agent's own, not a replay
    assert v.verify("POST", "/p", BODY, request("a2", keys["a2"], "n1")) == "a2"
    clocks.tick(1)
    with pytest.raises(AuthError) as replay:
        v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n1"))
    assert replay.value.reason == "replay"
    with pytest.raises(AuthError) as other:  # a2 cannot sign as a1 with its own key
        v.verify("POST", "/p", BODY, request("a1", keys["a2"], "n2"))
    assert other.value.reason == "bad_signature"
    with pytest.raises(AuthError) as elsewhere:  # signed for another hub
        v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n5", to="hub-2"))
    assert elsewhere.value.reason == "wrong_recipient"
    with pytest.raises(AuthError) as stranger:
        v.verify("POST", "/p", BODY, request("ghost", keys["a1"], "n3"))
    assert stranger.value.reason == "unknown"
    keys["a1"] = "a1-rotated-000000000000"  # re-enrolled: the old key stops working
    with pytest.raises(AuthError):
        v.verify("POST", "/p", BODY, request("a1", "a1-key-0000000000000000", "n4"))
    assert v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n4")) == "a1"
