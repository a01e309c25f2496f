"""Bad input to the Placer raises a clear error and changes nothing already accepted."""

from __future__ import annotations

import pytest

from edge_agent.errors import InvalidInput
from edge_agent.resources.vocab import Health
from tests.support.placer_fleet import BACKENDS, GB, dev, mixed_fleet, placer, signature, task

# --- bad input -----------------------------------------------------------------------


@BACKENDS
def test_nan_utilization_is_rejected_and_loses_nothing(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.place_one(task())
    before = {i: p.live(i) for i in p.device_ids}
    with pytest.raises(InvalidInput, match="utilization"):
        p.update_live("gpu", utilization=float("nan"))
    with pytest.raises(InvalidInput, match="utilization"):
        p.update_live("gpu", queued_s=5.0, utilization=1.5)  # one bad value: nothing applied
    assert {i: p.live(i) for i in p.device_ids} == before
    reference = placer(mixed_fleet(), backend)
    reference.place_one(task())
    assert signature(p.place_one(task(3.0, "fp16"))) == signature(
        reference.place_one(task(3.0, "fp16"))
    )


@BACKENDS
@pytest.mark.parametrize("field", ["queued_s", "memory_free_bytes", "predicted_utilization"])
def test_update_live_rejects_bad_numbers(backend: str, field: str) -> None:
    p = placer(mixed_fleet(), backend)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InvalidInput, match=field):
            p.update_live("gpu", **{field: bad})
    assert p.place_one(task()).placed


@BACKENDS
def test_update_live_rejects_an_unknown_health(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    with pytest.raises(InvalidInput):
        p.update_live("gpu", health=7)  # type: ignore[arg-type]
    assert p.live("gpu")["health"] == float(Health.ONLINE)


@BACKENDS
def test_update_live_applies_good_values(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.update_live("gpu", utilization=0.5, queued_s=0.25, memory_free_bytes=1 * GB)
    live = p.live("gpu")
    assert (live["utilization"], live["queued_s"], live["memory_free_bytes"]) == (0.5, 0.25, GB)


@BACKENDS
def test_advance_rejects_bad_seconds_and_loses_nothing(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.place_one(task())
    queued = p.live("npu")["queued_s"]
    for bad in (float("nan"), -1.0):
        with pytest.raises(InvalidInput):
            p.advance(bad)
        assert p.live("npu")["queued_s"] == queued
    assert p.place_one(task()).placed


@BACKENDS
def test_unknown_device_id_raises(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    with pytest.raises(InvalidInput, match="nope"):
        p.update_live("nope", utilization=0.5)
    with pytest.raises(InvalidInput, match="nope"):
        p.live("nope")
    with pytest.raises(InvalidInput, match="nope"):
        p.correction("default", "nope")
    d = p.place_one(task())
    assert "not a device of this fleet" in d.why_not("nope")


@BACKENDS
@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan"), float("inf")])
def test_feedback_with_bad_latency_raises_and_changes_nothing(backend: str, latency: float) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task())
    queued = p.live("npu")["queued_s"]
    with pytest.raises(InvalidInput, match="latency"):
        p.feedback(d, latency_s=latency)
    assert p.live("npu")["queued_s"] == queued
    assert p.correction("default", "npu") == 1.0


@BACKENDS
def test_feedback_with_bad_energy_or_unplaced_decision_raises(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task())
    with pytest.raises(InvalidInput, match="energy"):
        p.feedback(d, latency_s=d.service_s, energy_j=-1.0)
    unplaced = p.place_one(task(kinds=("fpga",)))
    assert not unplaced.placed
    with pytest.raises(InvalidInput):
        p.feedback(unplaced, latency_s=0.01)


@BACKENDS
def test_duplicate_device_ids_raise(backend: str) -> None:
    with pytest.raises(InvalidInput, match="unique"):
        placer([dev("x", int8=1000), dev("x", int8=2000)], backend)


@BACKENDS
def test_bad_learning_rate_raises(backend: str) -> None:
    for lr in (0.0, 1.5, float("nan")):
        with pytest.raises(InvalidInput, match="learning_rate"):
            placer(mixed_fleet(), backend, learning_rate=lr)
