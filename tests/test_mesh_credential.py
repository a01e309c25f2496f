"""Fleet credential: signatures over every field, replay window, nonce cache, responses."""

from __future__ import annotations

import pytest

from edge_agent.mesh.credential import (
    H_AGENT,
    H_NONCE,
    H_SIGNATURE,
    H_TIMESTAMP,
    FleetKey,
    KeyedVerifier,
    Verifier,
    sign_request,
    sign_response,
    verify_response,
)
from edge_agent.mesh.errors import AuthError, FleetKeyError

KEY = FleetKey("fleet-key-for-unit-tests-000000")
NOW = 1_700_000_000.0
BODY = b'{"contract": {"semantics": {"gflops": 1}}}'


def signed() -> dict[str, str]:
    return sign_request(KEY, "agent-a", "POST", "/mesh/v1/tasks", BODY, now=NOW, nonce="n1")


def verify(
    headers: dict[str, str],
    *,
    method: str = "POST",
    path: str = "/mesh/v1/tasks",
    body: bytes = BODY,
    now: float = NOW,
    verifier: Verifier | None = None,
) -> str:
    v = verifier if verifier is not None else Verifier(KEY)
    return v.verify(method, path, body, headers, now=now)


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
        (H_AGENT, "agent-b"),
        (H_SIGNATURE, "0" * 64),
    ],
)
def test_tampering_with_a_signed_header_is_rejected(header: str, value: str) -> None:
    headers = signed()
    headers[header] = value
    with pytest.raises(AuthError) as err:
        verify(headers)
    assert err.value.reason == "bad_signature"


def test_a_replayed_nonce_is_rejected_even_with_a_valid_signature() -> None:
    v = Verifier(KEY)
    verify(signed(), verifier=v)
    with pytest.raises(AuthError) as err:
        verify(signed(), verifier=v, now=NOW + 5)
    assert err.value.reason == "replay"


@pytest.mark.parametrize("skew", [-31.0, 31.0, 3600.0])
def test_a_timestamp_outside_the_window_is_rejected(skew: float) -> None:
    with pytest.raises(AuthError) as err:
        verify(signed(), now=NOW + skew)
    assert err.value.reason == "stale"


def test_a_request_signed_with_another_key_is_rejected() -> None:
    other = FleetKey("a-different-fleet-key-00000000")
    headers = sign_request(other, "agent-a", "POST", "/mesh/v1/tasks", BODY, now=NOW)
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
    v = Verifier(KEY)
    forged = signed()
    forged[H_SIGNATURE] = "f" * 64
    with pytest.raises(AuthError):
        verify(forged, verifier=v)
    assert verify(signed(), verifier=v) == "agent-a"


def test_the_nonce_cache_is_bounded_and_forgets_expired_nonces() -> None:
    v = Verifier(KEY, window_s=10, cache_max=2)
    for i in range(2):
        h = sign_request(KEY, "a", "POST", "/p", b"", now=NOW, nonce=f"n{i}")
        v.verify("POST", "/p", b"", h, now=NOW)
    h = sign_request(KEY, "a", "POST", "/p", b"", now=NOW, nonce="n9")
    with pytest.raises(AuthError) as err:
        v.verify("POST", "/p", b"", h, now=NOW)
    assert err.value.reason == "busy"
    later = NOW + 25  # both old nonces expired (2 windows), their timestamps are stale anyway
    h = sign_request(KEY, "a", "POST", "/p", b"", now=later, nonce="n9")
    assert v.verify("POST", "/p", b"", h, now=later) == "a"
    assert len(v) == 1


def test_a_response_signature_binds_nonce_status_body_and_responder() -> None:
    sig = sign_response(KEY, "agent-b", "n1", 200, b"{}")
    verify_response(KEY, "agent-b", "n1", 200, b"{}", sig)
    for args in [
        ("agent-b", "n2", 200, b"{}"),
        ("agent-b", "n1", 500, b"{}"),
        ("agent-b", "n1", 200, b"[]"),
        ("agent-c", "n1", 200, b"{}"),
    ]:
        with pytest.raises(AuthError):
            verify_response(KEY, *args, sig)
    with pytest.raises(AuthError) as err:
        verify_response(KEY, "agent-b", "n1", 200, b"{}", None)
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
    v = KeyedVerifier(keys.get, window_s=30)

    def request(agent: str, key: str, nonce: str) -> dict[str, str]:
        return sign_request(FleetKey(key), agent, "POST", "/p", BODY, now=NOW, nonce=nonce)

    assert v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n1"), now=NOW) == "a1"
    # the same nonce from another agent is that agent's own, not a replay
    assert v.verify("POST", "/p", BODY, request("a2", keys["a2"], "n1"), now=NOW) == "a2"
    with pytest.raises(AuthError) as replay:
        v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n1"), now=NOW + 1)
    assert replay.value.reason == "replay"
    with pytest.raises(AuthError) as other:  # a2 cannot sign as a1 with its own key
        v.verify("POST", "/p", BODY, request("a1", keys["a2"], "n2"), now=NOW)
    assert other.value.reason == "bad_signature"
    with pytest.raises(AuthError) as stranger:
        v.verify("POST", "/p", BODY, request("ghost", keys["a1"], "n3"), now=NOW)
    assert stranger.value.reason == "unknown"
    keys["a1"] = "a1-rotated-000000000000"  # re-enrolled: the old key stops working
    with pytest.raises(AuthError):
        v.verify("POST", "/p", BODY, request("a1", "a1-key-0000000000000000", "n4"), now=NOW)
    assert v.verify("POST", "/p", BODY, request("a1", keys["a1"], "n4"), now=NOW) == "a1"
