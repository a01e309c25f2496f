"""place_one's ordinary call and update_live_many's plain-list check (session 7): what they
keep bound between calls is rebound or updated when what it mirrors changes."""

from __future__ import annotations

import math
import sys
from array import array

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edge_agent.errors import InvalidInput, KernelError
from edge_agent.placement import Placer, Policy
from edge_agent.placement import layout as L
from edge_agent.placement.explore import Explorer
from edge_agent.placement.live import _listed_ok
from edge_agent.resources.vocab import DeviceKind
from tests.test_placer_quality import dev, task

_FLOAT_MAX = sys.float_info.max


def _fleet(backend: str) -> Placer:
    devices = [
        dev("gpu", int8=1000),
        dev("cpu", DeviceKind.CPU_ARM, int8=200),
        dev("npu", int8=400),
    ]
    return Placer(devices, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]


def test_place_one_decides_on_the_new_buffers_after_new_classes_grow_the_workspace(
    backend: str,
) -> None:
    """A task prepared before its Placer's workspace grew (new classes) is placed from the
    new workspace's rows: as a twin Placer decides it, and not from the old buffers."""
    p, twin = _fleet(backend), _fleet(backend)
    early = p.prepare(task(10.0, cls="early"))
    before = p._ws
    for k in range(12):  # more classes than the correction rows first allocated
        p.prepare(task(1.0, cls=f"c{k}"))
        twin.prepare(task(1.0, cls=f"c{k}"))
    assert p._ws is not before  # the workspace was rebuilt
    p.update_live("gpu", queued_s=1.0)  # the GPU busy: the NPU finishes first
    twin.update_live("gpu", queued_s=1.0)
    got = p.place_one(early)
    want = twin.place([task(10.0, cls="early")])[0]
    assert got.device_id == want.device_id == "npu"
    assert got.latency_s == want.latency_s and got.score == want.score
    restricted = p.place_one(early, candidates=("gpu", "cpu"))
    assert restricted.device_id == "cpu" and restricted.reasons is not None
    assert restricted.reasons[2] == L.R_EXCLUDED  # the NPU left out by the new mask


@pytest.mark.parametrize("candidates", [None, ("cpu", "npu")])
def test_a_bad_device_row_is_named_on_the_bound_call(
    backend: str, candidates: tuple[str, ...] | None
) -> None:
    """The bound call returns its status only; a failure still names the offending row."""
    p = _fleet(backend)
    prepared = p.prepare(task(1.0))
    p.place_one(prepared)  # the rows are checked and kept as valid
    p._ws.devices[2, L.DEV_QUEUE_S] = -1.0  # out of range, behind the Placer's back
    p._call.devices_changed()
    with pytest.raises(KernelError, match=r"\(row 2\)"):
        p.place_one(prepared, candidates=candidates)


def _row(assigned: int, *, flags: float = 0.0, latency: float = 1.0) -> array[float]:
    row = array("d", bytes(8 * L.OUT_FIELDS))
    row[L.OUT_ASSIGNED] = assigned
    row[L.OUT_FLAGS] = flags
    row[L.OUT_EST + L.EST_LATENCY_S] = latency
    row[L.OUT_EST + L.EST_SERVICE_S] = 1.0
    return row


def test_a_usual_decision_holds_its_device_only_while_the_pair_is_untried() -> None:
    """Explorer.decided reads a Python mirror of the untried flags: tried, trusted (a
    published figure) and fully tried classes must read as the numpy row does."""
    e = Explorer(3)
    e.add_class()
    e.decided(0, "first", _row(1))
    assert e.busy.tolist() == [0, 1, 0]  # an untried pair's first task measures it
    e.finished("first", None)
    e.tried(0, 1)
    e.decided(0, "second", _row(1))
    assert e.busy.tolist() == [0, 0, 0]  # tried: no longer held
    e.set_sources(0, ("published, at this precision", "roofline", "roofline"))
    e.decided(0, "third", _row(0))
    assert e.busy.tolist() == [0, 0, 0]  # trusted by its source
    e.decided(0, "fourth", _row(-1))
    assert e.busy.tolist() == [0, 0, 0]  # not placed
    e.tried(0, 2)
    assert e._optimism[0] is None and e.untried[0] is None  # all tried or trusted: gone
    e.decided(0, "fifth", _row(2))
    assert e.busy.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("row", "pressed"),
    [(_row(0), False), (_row(0, flags=L.OF_LATE), True), (_row(0, latency=4.5), True)],
)
def test_a_usual_decision_sets_pressed_when_late_or_congested(
    row: array[float], pressed: bool
) -> None:
    e = Explorer(1)
    e.add_class()
    e.decided(0, "key", row)
    assert e.pressed[0] is pressed


def _numpy_verdict(values: list[object], bound: float, integral: bool) -> bool:
    """The check update_live_many makes on anything but a plain list (the reference)."""
    try:
        v = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return False
    ok = bool(((v >= 0.0) & (v <= bound)).all())
    return ok and (not integral or bool((v == np.floor(v)).all()))


_BOUNDS = st.sampled_from([1.0, 2.0, _FLOAT_MAX])


@given(st.lists(st.floats() | st.sampled_from([True, False]), min_size=3, max_size=3), _BOUNDS)
def test_a_plain_list_of_floats_is_judged_as_numpy_judges_it(
    values: list[float], bound: float
) -> None:
    for integral in (False, True):
        want = _numpy_verdict(values, bound, integral)
        assert _listed_ok(values, 3, bound, integral) == want
        assert _listed_ok(tuple(values), 3, bound, integral) == want


@given(st.lists(st.integers(min_value=-3, max_value=2**1100), min_size=3, max_size=3), _BOUNDS)
def test_a_plain_list_passes_only_what_numpy_passes(values: list[int], bound: float) -> None:
    """Integers past the largest float: the check may decline one that numpy rounds into
    range, never pass one that numpy refuses (a declined list goes to numpy)."""
    for integral in (False, True):
        if _listed_ok(values, 3, bound, integral):
            assert _numpy_verdict(values, bound, integral)


@pytest.mark.parametrize(
    "values", [["0.5", 1.0, 1.0], [None, 1.0, 1.0], [1j, 1.0, 1.0], [[1.0], 1.0, 1.0]]
)
def test_what_is_not_a_plain_number_is_left_to_numpy(values: list[object]) -> None:
    """Strings, None and the like: the Python check declines, numpy converts or refuses."""
    assert _listed_ok(values, 3, _FLOAT_MAX, False) is False
    assert _listed_ok([0.5, 1.0], 3, _FLOAT_MAX, False) is False  # the wrong length
    assert _listed_ok(np.array([0.5, 1.0, 1.0]), 3, _FLOAT_MAX, False) is False


def test_a_plain_list_writes_what_its_numpy_array_writes(backend: str) -> None:
    listed, arrayed = _fleet(backend), _fleet(backend)
    queued, health = [0.25, 3.0, 0.0], [0.0, 1.0, 2.0]
    listed.update_live_many(queued_s=queued, health=health)
    arrayed.update_live_many(queued_s=np.array(queued), health=np.array(health))
    for device_id in listed.device_ids:
        assert listed.live(device_id) == arrayed.live(device_id)
    assert listed.live("npu")["health"] == 2.0 and listed.live("cpu")["queued_s"] == 3.0
    assert math.isclose(
        listed.place_one(task(10.0)).latency_s, arrayed.place_one(task(10.0)).latency_s
    )


def test_an_integer_past_the_largest_float_is_refused_clearly() -> None:
    """numpy raised OverflowError through update_live_many; now the usual InvalidInput."""
    p = _fleet("python")
    with pytest.raises(InvalidInput, match=r"queued_s must be finite numbers in \[0, inf\]"):
        p.update_live_many(queued_s=[0.0, 2**1100, 0.0])
    assert p.live("cpu")["queued_s"] == 0.0
