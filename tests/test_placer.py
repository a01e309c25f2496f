"""Behaviour of the Placer on small hand-built fleets, on both kernel backends: precision,
the example contract, no overbooking, priority, explanations and backend choice."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from edge_agent.placement import (
    Device,
    Placer,
    Requirements,
    Semantics,
    TaskContract,
    default_backend,
    native_available,
)
from edge_agent.placement.layout import OBJECTIVE_NAMES
from edge_agent.resources.vocab import DeviceKind
from tests.support.placer_fleet import BACKENDS, GB, dev, mixed_fleet, placer, task

# --- precision and kinds -------------------------------------------------------------


@BACKENDS
def test_int8_task_goes_to_the_fast_int8_npu(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "int8"))
    assert d.placed
    assert d.device_ids == ("npu",)
    assert d.backend == backend
    assert d.rejections() == {}


@BACKENDS
def test_fp32_task_cannot_go_to_an_int8_only_npu(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "fp32"))
    assert d.device_id == "gpu"
    assert "precision unsupported" in d.why_not("npu")
    assert d.rejections() == {"precision unsupported": 1}
    assert "chosen" in d.why_not("gpu")
    assert "runner-up" in d.why_not("cpu")


@BACKENDS
def test_requirements_precision_overrides_semantics_in_placement(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(
        TaskContract(Semantics(gflops=10.0, precision="fp32"), Requirements(precision="int8"))
    )
    assert d.device_id == "npu"


# --- the architecture's example contract ---------------------------------------------

EXAMPLE = Requirements(
    kinds=("accelerator",),
    precision="int8",
    min_memory_bytes=8e9,
    device_count=2,
    max_latency_s=0.005,
)


def example_task(gflops: float = 10.0) -> TaskContract:
    return TaskContract(Semantics(gflops=gflops, precision="int8"), EXAMPLE)


def gang_fleet(second_npu_mem: float = 16 * GB) -> list[Device]:
    return [
        dev("cpu", DeviceKind.CPU_ARM, int8=20000, mem=64 * GB),  # fast, but not an accelerator
        dev("npu1", DeviceKind.NPU, int8=10000, mem=16 * GB),
        dev("gpu-small", DeviceKind.GPU_NVIDIA, int8=20000, mem=4 * GB),
        dev("npu2", DeviceKind.NPU, int8=10000, mem=second_npu_mem),
    ]


@BACKENDS
def test_example_contract_placed_on_two_distinct_accelerators(backend: str) -> None:
    p = placer(gang_fleet(), backend)
    d = p.place_one(example_task())
    assert d.placed
    assert len(d.device_ids) == 2
    assert len(set(d.device_ids)) == 2
    assert set(d.device_ids) == {"npu1", "npu2"}
    assert d.latency_s <= 0.005
    assert d.rejections() == {"kind not allowed": 1, "not enough free memory": 1}
    for dev_id in d.device_ids:
        assert p.live(dev_id)["memory_free_bytes"] == pytest.approx(8 * GB)
        assert p.live(dev_id)["queued_s"] > 0


@BACKENDS
def test_example_contract_not_placed_when_only_one_accelerator_qualifies(backend: str) -> None:
    p = placer(gang_fleet(second_npu_mem=4 * GB), backend)
    d = p.place_one(example_task())
    assert d.placed is False
    assert d.device_ids == ()
    assert d.device_id is None
    assert d.rejections() == {"kind not allowed": 1, "not enough free memory": 2}
    assert d.summary().startswith("not placed")
    assert "not enough free memory" in d.summary()
    # nothing was charged to the one device that did qualify
    assert p.live("npu1")["queued_s"] == 0.0
    assert p.live("npu1")["memory_free_bytes"] == 16 * GB


@BACKENDS
def test_example_contract_not_placed_when_latency_bound_cannot_be_met(backend: str) -> None:
    p = placer(gang_fleet(), backend)
    d = p.place_one(example_task(gflops=1000.0))  # 100 ms per device
    assert not d.placed
    assert d.device_ids == ()
    assert d.rejections()["estimated latency over max_latency"] == 2
    assert "latency" in d.why_not("npu1")
    assert "estimated latency over max_latency" in d.summary()


# --- no overbooking ------------------------------------------------------------------


@BACKENDS
def test_batch_never_overbooks_memory(backend: str) -> None:
    fleet = [dev("fast8", int8=8000, mem=8 * GB), dev("slow16", int8=2000, mem=16 * GB)]
    p = placer(fleet, backend)
    decisions = p.place([task(1.0, min_memory_bytes=3 * GB) for _ in range(8)])
    on = [d.device_id for d in decisions]
    assert on.count("fast8") <= 2
    assert on.count("slow16") <= 5
    assert sum(d.placed for d in decisions) == 7  # 2 + 5 fit, the eighth does not
    assert on[0] == "fast8"
    unplaced = [d for d in decisions if not d.placed]
    assert unplaced[0].rejections() == {"not enough free memory": 2}
    assert p.live("fast8")["memory_free_bytes"] == pytest.approx(2 * GB)
    assert p.live("slow16")["memory_free_bytes"] == pytest.approx(1 * GB)


@BACKENDS
def test_batch_spreads_once_the_fast_queue_makes_it_slower(backend: str) -> None:
    fleet = [dev("fast", int8=6000), dev("slow", int8=2000)]  # 3x slower
    p = placer(fleet, backend)
    decisions = p.place([task(3.0) for _ in range(12)])
    on = [d.device_id for d in decisions]
    assert all(d.placed for d in decisions)
    assert on[0] == "fast"
    assert on.index("slow") >= 2  # fast keeps winning while its queue is short
    assert {"fast", "slow"} == set(on)
    assert on.count("fast") > on.count("slow")
    for device in ("fast", "slow"):
        latencies = [d.latency_s for d in decisions if d.device_id == device]
        assert all(b > a for a, b in itertools.pairwise(latencies))
        charged = sum(d.service_s for d in decisions if d.device_id == device)
        assert p.live(device)["queued_s"] == pytest.approx(charged)


@BACKENDS
def test_successive_place_one_calls_charge_the_queue(backend: str) -> None:
    p = placer([dev("only", int8=1000)], backend)
    first, second = p.place_one(task()), p.place_one(task())
    assert second.latency_s > first.latency_s
    assert second.latency_s == pytest.approx(first.latency_s + first.service_s)


# --- priority ------------------------------------------------------------------------


def priority_fleet() -> list[Device]:
    # the fast device fits one 3 GB task; the slow one fits many
    return [dev("fast", int8=8000, mem=4 * GB), dev("slow", int8=1000, mem=32 * GB)]


@BACKENDS
def test_high_priority_task_listed_last_gets_the_better_device(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    tasks = [
        task(cls="a", min_memory_bytes=3 * GB),
        task(cls="b", min_memory_bytes=3 * GB),
        task(cls="urgent", priority=10, min_memory_bytes=3 * GB),
    ]
    decisions = p.place(tasks)
    assert len(decisions) == len(tasks)
    assert [d.task for d in decisions] == tasks
    assert [d.task.task_class for d in decisions] == ["a", "b", "urgent"]
    assert decisions[2].device_id == "fast"
    assert decisions[0].device_id == "slow"
    assert decisions[1].device_id == "slow"


@BACKENDS
def test_equal_priority_keeps_input_order(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    decisions = p.place([task(cls=c, min_memory_bytes=3 * GB) for c in ("a", "b", "c")])
    assert [d.device_id for d in decisions] == ["fast", "slow", "slow"]
    assert [d.task.task_class for d in decisions] == ["a", "b", "c"]


@BACKENDS
def test_earlier_deadline_goes_first_at_equal_priority(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    decisions = p.place(
        [
            task(cls="late", min_memory_bytes=3 * GB, deadline_s=60.0),
            task(cls="soon", min_memory_bytes=3 * GB, deadline_s=10.0),
        ]
    )
    assert [d.device_id for d in decisions] == ["slow", "fast"]


@BACKENDS
def test_empty_batch_returns_no_decisions(backend: str) -> None:
    assert placer(priority_fleet(), backend).place([]) == []


@BACKENDS
def test_batch_larger_than_the_workspace(backend: str) -> None:
    p = placer([dev("a", int8=1000, mem=1e15), dev("b", int8=1000, mem=1e15)], backend)
    decisions = p.place([task(cls=f"c{i % 9}") for i in range(150)])
    assert len(decisions) == 150
    assert all(d.placed for d in decisions)
    assert [d.task.task_class for d in decisions] == [f"c{i % 9}" for i in range(150)]


@BACKENDS
def test_a_batch_of_one_contract_object_is_decided_as_the_same_batch_of_copies(
    backend: str,
) -> None:
    """``place`` handles a task kind once per batch (its order key, class and row): a batch
    of one contract object repeated decides exactly as the same batch of equal copies (each
    its own object, handled task by task), reason codes included, in priority order."""
    fleet = [dev("a", int8=1000, mem=1e15), dev("b", int8=300, mem=1e15), dev("c", fp32=50)]
    kinds = [task(1.0, cls="x"), task(3.0, cls="y", priority=2), task(0.5, "fp32", cls="z")]
    shared = [kinds[i % 3] for i in range(60)]
    copies = [TaskContract.from_dict(c.to_dict()) for c in shared]
    assert all(a is not b and a == b for a, b in zip(shared, copies, strict=True))
    got = placer(fleet, backend).place(shared)
    want = placer(fleet, backend).place(copies)
    for g, w in zip(got, want, strict=True):
        assert g.to_dict() == w.to_dict()
        assert (g.reasons, g.charges) == (w.reasons, w.charges)
        assert g.task_class_index == w.task_class_index
    assert len({d.reasons for d in got}) > 1  # the reason codes differ from task to task
    assert len({d.device_id for d in got}) > 1


# --- explanation ---------------------------------------------------------------------


@BACKENDS
def test_decision_to_dict_is_json_and_explains(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "fp32"))
    doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert doc["placed"] is True
    assert doc["devices"] == ["gpu"]
    assert set(doc["estimate"]) >= {"latency_s", "service_s", "energy_j", "carbon_g"}
    assert doc["estimate"]["latency_s"] == d.latency_s > 0
    assert list(doc["components"]) == list(OBJECTIVE_NAMES)
    assert len(doc["components"]) == len(OBJECTIVE_NAMES) == 7
    assert all(math.isfinite(v) and v >= 0 for v in doc["components"].values())
    assert sum(doc["components"].values()) == pytest.approx(d.score)
    assert doc["runner_up"] == "cpu"
    assert doc["runner_up_score"] >= doc["score"]
    assert doc["rejections"] == {"precision unsupported": 1}
    assert doc["summary"] == d.summary()
    assert "gpu" in doc["summary"]
    assert doc["backend"] == backend


@BACKENDS
def test_unplaced_decision_to_dict_is_json(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(kinds=("fpga",)))
    doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert doc["placed"] is False
    assert doc["devices"] == []
    assert doc["runner_up"] is None
    assert doc["runner_up_score"] is None
    assert doc["rejections"] == {"kind not allowed": 3}
    assert doc["summary"].startswith("not placed")


def test_pure_python_env_forces_the_python_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETMESH_PURE_PYTHON", "1")
    assert default_backend() == "python"
    assert Placer(mixed_fleet()).backend == "python"
    monkeypatch.delenv("HETMESH_PURE_PYTHON")
    assert default_backend() == ("native" if native_available() else "python")
