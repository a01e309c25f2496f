"""Capability summaries: built from a node's own placer, bounded, hostile ones refused."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.mesh import FleetKey, MeshConfig
from edge_agent.mesh.standalone import emulated_node
from edge_agent.mesh.summary import (
    MAX_CLASSES,
    MAX_NAME,
    MAX_NAMES,
    MAX_SECONDS,
    RecentContracts,
    SummaryError,
    build_summary,
    parse_summary,
)
from edge_agent.placement import TaskContract

GOOD: dict[str, Any] = {
    "v": 1,
    "kinds": ["gpu_nvidia"],
    "formats": ["onnx"],
    "queued_s": 0.5,
    "classes": {"yolov8n": 0.0035},
}


def contract(name: str) -> TaskContract:
    return TaskContract.from_dict({"task_class": name, "semantics": {"gflops": 1.0}})


def test_a_summary_carries_kinds_formats_queue_and_the_recent_classes(tmp_path: Path) -> None:
    node = emulated_node(
        MeshConfig(agent_id="j"), FleetKey("k" * 32), ["jetson_orin_nano"], tmp_path / "j.db"
    )
    yolo = TaskContract.from_dict(
        {"model": "yolov8n", "task_class": "yolov8n", "semantics": {"gflops": 8.7}}
    )
    node.recent.note(yolo)
    doc = json.loads(json.dumps(build_summary(node.placer, node.recent)))  # as on the wire
    summary = parse_summary(doc, received=1.0)
    assert summary.kinds == ("cpu_arm", "gpu_nvidia") and "tensorrt" in summary.formats
    assert summary.queued_s == 0.0 and set(summary.classes) == {"yolov8n"}
    assert summary.classes["yolov8n"] == pytest.approx(node.placer.preview(yolo).latency_s)
    assert summary.fresh(2.0, 1.0) and not summary.fresh(2.5, 1.0)


def test_recent_classes_are_bounded_and_keep_the_latest() -> None:
    recent = RecentContracts()
    for i in range(MAX_CLASSES + 10):
        recent.note(contract(f"c{i}"))
    names = [c.task_class for c in recent.contracts()]
    assert len(names) == MAX_CLASSES and names[-1] == f"c{MAX_CLASSES + 9}" and "c0" not in names


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"v": 2}, "summary.v"),
        ({"classes": []}, "summary.classes"),
        ({"classes": {"a": math.nan}}, "summary.classes['a']"),
        ({"classes": {"a": math.inf}}, "summary.classes['a']"),
        ({"classes": {"a": -0.001}}, "summary.classes['a']"),
        ({"classes": {"a": True}}, "summary.classes['a']"),
        ({"classes": {"a": "3 ms"}}, "summary.classes['a']"),
        ({"classes": {"": 0.1}}, "summary.classes"),
        ({"classes": {"a\x1b[2J": 0.1}}, "summary.classes"),
        ({"classes": {"x" * (MAX_NAME + 1): 0.1}}, "summary.classes"),
        ({"classes": {f"c{i}": 0.1 for i in range(MAX_CLASSES + 1)}}, "summary.classes"),
        ({"queued_s": MAX_SECONDS * 2}, "summary.queued_s"),
        ({"queued_s": None}, "summary.queued_s"),
        ({"kinds": "gpu"}, "summary.kinds"),
        ({"kinds": ["gpu"] * (MAX_NAMES + 1)}, "summary.kinds"),
        ({"formats": [1]}, "summary.formats"),
    ],
)
def test_a_hostile_summary_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(SummaryError) as err:
        parse_summary({**GOOD, **change}, received=0.0)
    assert str(err.value).startswith(field)


_json = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(st.text(max_size=70), inner),
    max_leaves=60,
)


@settings(max_examples=150, deadline=None)
@given(
    base=st.fixed_dictionaries({}, optional={k: _json for k in GOOD}),
    extra=st.dictionaries(st.sampled_from(list(GOOD)), _json, max_size=3),
)
def test_any_document_parses_within_bounds_or_is_refused(
    base: dict[str, Any], extra: dict[str, Any]
) -> None:
    doc = {**GOOD, **base, **extra}
    try:
        summary = parse_summary(doc, received=0.0)
    except SummaryError as err:
        assert str(err).startswith("summary")
        return
    assert len(summary.classes) <= MAX_CLASSES and len(summary.kinds) <= MAX_NAMES
    for value in [summary.queued_s, *summary.classes.values()]:
        assert math.isfinite(value) and 0.0 <= value <= MAX_SECONDS


def test_a_node_keeps_the_last_good_summary_and_counts_a_refused_one(tmp_path: Path) -> None:
    node = emulated_node(MeshConfig(agent_id="o"), FleetKey("k" * 32), ["rpi5"], tmp_path / "o.db")
    node.peers.trust("p", "127.0.0.2", 8000, "0.1.0", "gpu_nvidia:1")
    node._take_summary("p", GOOD)
    good = node.peers.peers["p"].summary
    assert good is not None and good.classes == {"yolov8n": 0.0035}
    node._take_summary("p", {**GOOD, "classes": {"yolov8n": -1.0}})  # a lie: refused
    assert node.peers.peers["p"].summary is good and node.counters["summary_rejected"] == 1
    node._take_summary("stranger", GOOD)  # not a trusted peer: nothing kept
    assert "stranger" not in node.peers.peers and node.counters["summaries_received"] == 1
