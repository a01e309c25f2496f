"""update_live_many's cheap writes (session 10): a column that already holds the values is
skipped, the rest are written straight into the device cells, and the kernel is told to
recompute its per-device constants only when a column they read was written."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.errors import InvalidInput
from edge_agent.placement import kernel
from edge_agent.placement import layout as L
from tests.test_placer_hot_path import _fleet
from tests.test_placer_quality import task


def test_an_unchanged_health_list_is_skipped_and_a_changed_one_applies(backend: str) -> None:
    """The same list object, changed in place between calls, is written: the skip compares
    the values with the device table's, never the list's identity."""
    p = _fleet(backend)
    health = [0.0, 0.0, 0.0]
    p.update_live_many(queued_s=[0.0, 0.0, 0.0], health=health)
    assert p.place_one(task(10.0)).device_id == "gpu"
    p.update_live_many(queued_s=[0.0, 0.0, 0.0], health=health)  # unchanged: skipped
    assert [p.live(d)["health"] for d in p.device_ids] == [0.0, 0.0, 0.0]
    health[0] = 2.0  # the GPU offline, in the same list
    p.update_live_many(queued_s=[0.0, 0.0, 0.0], health=health)
    assert p.live("gpu")["health"] == 2.0
    offline = p.place_one(task(10.0))
    assert offline.device_id == "npu"
    health[0] = 0.0
    p.update_live_many(health=health)
    assert p.place_one(task(10.0)).device_id == "gpu"


def test_a_bad_value_beside_an_unchanged_column_changes_nothing(backend: str) -> None:
    p = _fleet(backend)
    p.update_live_many(queued_s=[0.5, 0.0, 0.0], health=[0.0, 1.0, 0.0])
    with pytest.raises(InvalidInput, match=r"health must be finite numbers in \[0, 2.0\]"):
        p.update_live_many(queued_s=[9.0, 9.0, 9.0], health=[0.0, 1.5, 0.0])
    with pytest.raises(InvalidInput, match=r"queued_s must be finite numbers"):
        p.update_live_many(health=[0.0, 1.0, 0.0], queued_s=[1.0, math.nan, 1.0])
    assert [p.live(d)["queued_s"] for d in p.device_ids] == [0.5, 0.0, 0.0]
    assert [p.live(d)["health"] for d in p.device_ids] == [0.0, 1.0, 0.0]


_COLUMNS = {
    "utilization": st.floats(0.0, 1.0),
    "predicted_utilization": st.floats(0.0, 1.0),
    "queued_s": st.floats(0.0, 5.0),
    "health": st.sampled_from([0.0, 1.0, 2.0]),
    "memory_free_bytes": st.sampled_from([0.0, 1e8, 4e9, 8e9]),
}
_WRITE = st.dictionaries(
    st.sampled_from(sorted(_COLUMNS)), st.just(None), min_size=1, max_size=3
).flatmap(
    lambda names: st.fixed_dictionaries(
        {name: st.lists(_COLUMNS[name], min_size=3, max_size=3) for name in names}
    )
)


@pytest.mark.skipif(not kernel.native_available(), reason="the compiled kernel is not built")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_WRITE, st.booleans()), min_size=1, max_size=8))
def test_the_kernel_sees_every_write_as_its_twin_does(
    steps: list[tuple[dict[str, list[float]], bool]],
) -> None:
    """The native kernel keeps its rows' constants between calls; after any sequence of
    writes (utilization, whose constants it must recompute, and columns it reads as they
    stand), it decides as the twin, which recomputes everything on every call."""
    native, twin = _fleet("native"), _fleet("python")
    for write, release in steps:
        native.update_live_many(**write)
        twin.update_live_many(**write)
        got, want = native.place_one(task(10.0)), twin.place_one(task(10.0))
        assert got.device_ids == want.device_ids
        assert got.latency_s == want.latency_s and got.reasons == want.reasons
        if release and got.placed:
            native.release(got)
            twin.release(want)


def test_what_only_numpy_converts_still_goes_through_numpy(backend: str) -> None:
    """A string the kernel's write cannot take is converted by numpy, as before."""
    p = _fleet(backend)
    p.update_live_many(queued_s=["0.5", 0, 0])  # type: ignore[list-item]
    assert p.live("gpu")["queued_s"] == 0.5
    with pytest.raises(InvalidInput, match="queued_s must be numbers"):
        p.update_live_many(queued_s=[[1.0], 0.0, 0.0])
    with pytest.raises(InvalidInput, match=r"queued_s must be finite numbers in \[0, inf\]"):
        p.update_live_many(queued_s=[0.0, 2**1100, 0.0])
    assert p.live("gpu")["queued_s"] == 0.5


_VALUES = st.floats(allow_nan=True) | st.sampled_from([0.0, 1.0, 2.0, -0.0, 0.5, 1.5])


@pytest.mark.skipif(not kernel.native_available(), reason="the compiled kernel is not built")
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([*L.LIVE_TOP, L.DEV_KIND, L.DEV_SLOTS]), max_size=3, unique=True),
    st.lists(_VALUES, min_size=9, max_size=9),
)
def test_the_kernels_live_write_and_its_twin_agree(cols: list[int], values: list[float]) -> None:
    """hm_set_live and PythonCall.set_live: the same verdict (written, the first bad value,
    or a column that is not live) and the same rows after it."""
    native, twin = _fleet("native"), _fleet("python")
    flat = values[: 3 * len(cols)]
    got = native._call.set_live(cols, len(cols), flat)
    want = twin._call.set_live(cols, len(cols), flat)
    assert got == want
    assert np.array_equal(native._ws.devices, twin._ws.devices, equal_nan=True)
    if got == -1:  # written: each value in its column, and only there
        for k, col in enumerate(cols):
            assert native._ws.devices[:, col].tolist() == flat[3 * k : 3 * k + 3]
    else:
        assert np.array_equal(native._ws.devices, _fleet("native")._ws.devices)


@pytest.mark.parametrize("device_ids", [None, ("gpu", "cpu", "npu")])
def test_an_array_inside_a_list_is_refused_clearly_and_changes_nothing(
    backend: str, device_ids: tuple[str, ...] | None
) -> None:
    """A one-element array compared as a number passed the plain-list check, and numpy's
    write then raised ValueError after the columns before it were written."""
    p = _fleet(backend)
    with pytest.raises(InvalidInput, match="queued_s must be numbers"):
        p.update_live_many(device_ids, health=[1.0, 1.0, 1.0], queued_s=[np.array([1.0]), 0.0, 0.0])
    assert [p.live(d)["health"] for d in p.device_ids] == [0.0, 0.0, 0.0]
    assert p.live("gpu")["queued_s"] == 0.0
