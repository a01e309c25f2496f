"""Task contracts: parsing, round trips, validation errors, kinds, memory and precision."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from edge_agent.errors import ContractError, InvalidInput
from edge_agent.placement import Requirements, Semantics, TaskContract
from edge_agent.resources.vocab import DeviceKind, Precision
from edge_agent.tasks.contract import KIND_GROUPS, MAX_DEVICE_COUNT, kinds_mask

FULL_DOC: dict[str, Any] = {
    "semantics": {
        "gflops": 8.2,
        "param_bytes": 25_000_000,
        "activation_bytes": 5_000_000.5,
        "input_bytes": 602_112,
        "precision": "int8",
        "operator_histogram": {"conv": 53, "gemm": 1, "pool": 2},
    },
    "requirements": {
        "kinds": ["accelerator", "cpu_arm"],
        "precision": "int8",
        "operator_families": ["conv", "gemm"],
        "model_format": "onnx",
        "min_memory_bytes": 8e9,
        "device_count": 2,
        "max_latency_s": 0.005,
        "deadline_s": 1.5,
        "config_id": 3,
    },
    "task_class": "resnet50",
    "priority": 10,
    "tenant": "lab",
    "policy": "latency-first",
    "model": "resnet50.onnx",
}


def _doc(**changes: Any) -> dict[str, Any]:
    """Return a copy of FULL_DOC with dotted-path changes ("requirements.kinds": [...])."""
    doc = copy.deepcopy(FULL_DOC)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        target = doc
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return doc


_DELETE = object()


def _bad(field: str, **changes: Any) -> Any:
    return pytest.param(
        _doc(**{k.replace("__", "."): v for k, v in changes.items()}),
        field,
        id=f"{field}:{next(iter(changes))}",
    )


# --- round trip ----------------------------------------------------------------------


def test_from_dict_reads_every_field() -> None:
    c = TaskContract.from_dict(FULL_DOC)
    assert c.semantics == Semantics(
        gflops=8.2,
        param_bytes=25e6,
        activation_bytes=5_000_000.5,
        input_bytes=602_112.0,
        precision="int8",
        operator_histogram={"conv": 53, "gemm": 1, "pool": 2},
    )
    assert c.requirements == Requirements(
        kinds=("accelerator", "cpu_arm"),
        precision="int8",
        operator_families=("conv", "gemm"),
        model_format="onnx",
        min_memory_bytes=8e9,
        device_count=2,
        max_latency_s=0.005,
        deadline_s=1.5,
        config_id=3,
    )
    assert (c.task_class, c.priority, c.tenant, c.policy, c.model) == (
        "resnet50",
        10,
        "lab",
        "latency-first",
        "resnet50.onnx",
    )


def test_to_dict_from_dict_round_trip_through_json() -> None:
    c = TaskContract.from_dict(FULL_DOC)
    doc = c.to_dict()
    assert json.loads(json.dumps(doc)) == doc
    again = TaskContract.from_dict(json.loads(json.dumps(doc)))
    assert again == c
    assert again.to_dict() == doc


def test_round_trip_of_a_minimal_and_an_opaque_contract() -> None:
    minimal = TaskContract(Semantics(gflops=1.0))
    assert TaskContract.from_dict(minimal.to_dict()) == minimal
    opaque = TaskContract(Semantics(gflops=0.5), Requirements(model_format=None, kinds=("cpu",)))
    again = TaskContract.from_dict(json.loads(json.dumps(opaque.to_dict())))
    assert again == opaque
    assert again.requirements.model_format is None


def test_defaults_when_fields_are_omitted() -> None:
    c = TaskContract.from_dict({"semantics": {"gflops": 2}})
    assert c.semantics.precision == "fp32"
    assert c.semantics.gflops == 2.0
    assert c.requirements == Requirements()
    assert c.requirements.model_format is None  # any format: hef/xmodel devices not excluded
    assert (c.task_class, c.priority, c.tenant, c.policy, c.model) == (
        "default",
        0,
        "default",
        None,
        None,
    )


@pytest.mark.parametrize("count", [1, MAX_DEVICE_COUNT])
def test_device_count_bounds_are_accepted(count: int) -> None:
    c = TaskContract.from_dict(_doc(**{"requirements.device_count": count}))
    assert c.requirements.device_count == count


# --- validation errors ---------------------------------------------------------------

BAD = [
    _bad("colour", colour="red"),
    _bad("speed", requirements__speed=1),
    _bad("flops", semantics__flops=1.0),
    _bad("gflops", semantics__gflops=-1.0),
    _bad("gflops", semantics__gflops=float("nan")),
    _bad("gflops", semantics__gflops=float("inf")),
    _bad("gflops", semantics__gflops="8.2"),
    _bad("gflops", semantics__gflops=True),
    _bad("param_bytes", semantics__param_bytes=float("nan")),
    _bad("activation_bytes", semantics__activation_bytes=-5),
    _bad("input_bytes", semantics__input_bytes="1kB"),
    _bad("min_memory_bytes", requirements__min_memory_bytes="8GB"),
    _bad("min_memory_bytes", requirements__min_memory_bytes=-1),
    _bad("max_latency_s", requirements__max_latency_s=float("nan")),
    _bad("deadline_s", requirements__deadline_s=None),
    _bad("priority", priority=True),
    _bad("priority", priority="high"),
    _bad("priority", priority=1.5),
    _bad("device_count", requirements__device_count=0),
    _bad("device_count", requirements__device_count=MAX_DEVICE_COUNT + 1),
    _bad("device_count", requirements__device_count=2.0),
    _bad("device_count", requirements__device_count=True),
    _bad("config_id", requirements__config_id=-1),
    _bad("precision", semantics__precision="fp8"),
    _bad("precision", requirements__precision="int2"),
    _bad("precision", requirements__precision=8),
    _bad("device kind", requirements__kinds=["tpu"]),
    _bad("kinds", requirements__kinds="gpu"),
    _bad("operator family", semantics__operator_histogram={"conv": 1, "fft": 2}),
    _bad("operator family", requirements__operator_families=["conv", "fft"]),
    _bad("operator_histogram", semantics__operator_histogram={"conv": -1}),
    _bad("operator_histogram", semantics__operator_histogram={"conv": True}),
    _bad("model format", requirements__model_format="pickle"),
    _bad("task_class", task_class=5),
    _bad("semantics", semantics=_DELETE),
    _bad("semantics", semantics=[1.0]),
    _bad("requirements", requirements="fast"),
]


@pytest.mark.parametrize(("doc", "field"), BAD)
def test_invalid_contract_raises_contract_error_naming_the_field(doc: dict, field: str) -> None:
    with pytest.raises(ContractError) as info:
        TaskContract.from_dict(doc)
    assert field in str(info.value)
    assert isinstance(info.value, InvalidInput)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"semantics": {"gflops": 1}, "extra": 1}, "contract"),
        ({"semantics": {"gflops": 1, "extra": 1}}, "semantics"),
        ({"semantics": {"gflops": 1}, "requirements": {"extra": 1}}, "requirements"),
    ],
)
def test_unknown_field_message_says_where(doc: dict, where: str) -> None:
    with pytest.raises(ContractError, match=rf"^{where}: unknown field\(s\) extra"):
        TaskContract.from_dict(doc)


def test_non_mapping_contract_raises_contract_error() -> None:
    with pytest.raises(ContractError, match="contract"):
        TaskContract.from_dict("gflops=1")  # type: ignore[arg-type]


# --- kinds ---------------------------------------------------------------------------


def _bits(*kinds: DeviceKind) -> int:
    mask = 0
    for k in kinds:
        mask |= 1 << int(k)
    return mask


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["cpu"], _bits(DeviceKind.CPU_X86, DeviceKind.CPU_ARM)),
        (["gpu"], _bits(DeviceKind.GPU_NVIDIA, DeviceKind.GPU_OTHER)),
        (
            ["accelerator"],
            _bits(
                DeviceKind.GPU_NVIDIA,
                DeviceKind.GPU_OTHER,
                DeviceKind.NPU,
                DeviceKind.FPGA,
                DeviceKind.DSP,
            ),
        ),
        (["npu"], _bits(DeviceKind.NPU)),
        (["fpga"], _bits(DeviceKind.FPGA)),
        (["cpu_arm"], _bits(DeviceKind.CPU_ARM)),
        (["gpu-nvidia"], _bits(DeviceKind.GPU_NVIDIA)),
        (["CPU", " Npu "], _bits(DeviceKind.CPU_X86, DeviceKind.CPU_ARM, DeviceKind.NPU)),
        (["gpu", "gpu_nvidia"], _bits(DeviceKind.GPU_NVIDIA, DeviceKind.GPU_OTHER)),
        ([], 0),
    ],
)
def test_kinds_mask_for_groups_and_exact_kinds(names: list[str], expected: int) -> None:
    assert kinds_mask(names) == expected


def test_accelerator_group_excludes_cpus_and_covers_gpus() -> None:
    acc = kinds_mask(["accelerator"])
    assert acc & kinds_mask(["cpu"]) == 0
    assert acc & kinds_mask(["gpu"]) == kinds_mask(["gpu"])
    assert set(KIND_GROUPS) == {"cpu", "gpu", "accelerator"}


def test_kinds_mask_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="tpu"):
        kinds_mask(["tpu"])


# --- memory and precision ------------------------------------------------------------


def test_memory_needed_is_params_plus_activations_when_larger() -> None:
    c = TaskContract(
        Semantics(gflops=1, param_bytes=3e9, activation_bytes=1e9),
        Requirements(min_memory_bytes=2e9),
    )
    assert c.memory_needed() == 4e9


def test_memory_needed_is_the_requirement_when_larger() -> None:
    c = TaskContract(
        Semantics(gflops=1, param_bytes=3e9, activation_bytes=1e9),
        Requirements(min_memory_bytes=8e9),
    )
    assert c.memory_needed() == 8e9
    assert TaskContract(Semantics(gflops=1)).memory_needed() == 0.0


def test_precision_comes_from_semantics_by_default() -> None:
    c = TaskContract(Semantics(gflops=1, precision="fp16"))
    assert c.precision() is Precision.FP16
    assert TaskContract(Semantics(gflops=1)).precision() is Precision.FP32


def test_requirements_precision_overrides_semantics() -> None:
    c = TaskContract(Semantics(gflops=1, precision="fp32"), Requirements(precision="int8"))
    assert c.precision() is Precision.INT8
    parsed = TaskContract.from_dict(
        _doc(**{"semantics.precision": "fp16", "requirements.precision": "bf16"})
    )
    assert parsed.precision() is Precision.BF16


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"semantics": {"gflops": 1}, "priority": 10**6 + 1}, "contract.priority: must be within"),
        ({"semantics": {"gflops": 1}, "priority": -(10**400)}, "contract.priority: must be within"),
        ({"semantics": {"gflops": 10**400}}, "semantics.gflops: must be a number in [0, 1e+15)"),
        ({"semantics": {"gflops": 1e15}}, "semantics.gflops: must be a number in [0, 1e+15)"),
        ({"semantics": {"gflops": 1, "param_bytes": 2e300}}, "semantics.param_bytes"),
        (
            {"semantics": {"gflops": 1}, "requirements": {"config_id": 2**31}},
            "requirements.config_id: expected an integer 0..2147483647",
        ),
        (
            {"semantics": {"gflops": 1}, "requirements": {"deadline_s": 1e10}},
            "requirements.deadline_s: must be a number in [0, 1e+09)",
        ),
        (
            {"semantics": {"gflops": 1}, "requirements": {"min_memory_bytes": 10**30}},
            "requirements.min_memory_bytes",
        ),
    ],
)
def test_numbers_beyond_sane_bounds_are_refused_naming_the_field(
    doc: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ContractError) as err:
        TaskContract.from_dict(doc)
    assert needle in str(err.value)


def test_numbers_at_the_bounds_are_accepted() -> None:
    c = TaskContract.from_dict(
        {
            "semantics": {"gflops": 9.99e14, "param_bytes": 10**14},
            "requirements": {"config_id": 2**31 - 1, "max_latency_s": 9e8},
            "priority": -(10**6),
        }
    )
    assert c.priority == -(10**6) and c.requirements.config_id == 2**31 - 1


@pytest.mark.parametrize("key", ["tenant", "task_class"])
@pytest.mark.parametrize("bad", ["x" * 65, "line\nbreak", "nul\x00"])
def test_tenant_and_class_names_are_bounded_and_printable(key: str, bad: str) -> None:
    with pytest.raises(ContractError, match=f"contract.{key}: expected a printable name"):
        TaskContract.from_dict({"semantics": {"gflops": 1.0}, key: bad})
    ok = TaskContract.from_dict({"semantics": {"gflops": 1.0}, key: "x" * 64})
    assert getattr(ok, key) == "x" * 64
