"""The fixed vocabularies of the device model: kinds, precisions, operator families, formats.

Each name maps to a bit (or an index) that the C kernel reads; this module is the one
place those numbers are defined. Profiles, contracts and probes use the names.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class DeviceKind(IntEnum):
    """What a device is; the value is its bit position in a kinds mask."""

    CPU_X86 = 0
    CPU_ARM = 1
    GPU_NVIDIA = 2
    GPU_OTHER = 3
    NPU = 4
    FPGA = 5
    DSP = 6


class Health(IntEnum):
    """Liveness of a device, as the kernel sees it."""

    ONLINE = 0
    SUSPECT = 1
    OFFLINE = 2


class Precision(IntEnum):
    """Numeric precision; the value is its bit position in a precision mask."""

    INT8 = 0
    FP16 = 1
    FP32 = 2
    INT4 = 3
    BF16 = 4


#: Peak-throughput slots in the capability vector, in this order.
PEAK_PRECISIONS: tuple[Precision, ...] = (Precision.INT8, Precision.FP16, Precision.FP32)


class OperatorFamily(IntEnum):
    """Families of operators a device can execute; the value is a bit position."""

    CONV = 0
    GEMM = 1  # Gemm, MatMul and their quantized forms
    ATTENTION = 2
    RECURRENT = 3
    POOL = 4
    NORM = 5
    ELEMENTWISE = 6
    RESHAPE = 7
    CONTROL_FLOW = 8
    CUSTOM = 9


class ModelFormat(IntEnum):
    """Model file formats a device's runtime accepts; the value is a bit position."""

    ONNX = 0
    TFLITE = 1
    RKNN = 2
    HEF = 3  # Hailo
    XMODEL = 4  # Vitis AI DPU
    TENSORRT = 5
    OPENVINO = 6
    QNN = 7
    OM = 8  # Ascend CANN offline model
    NCNN = 9
    EDGETPU = 10  # Coral-compiled TFLite
    COMMAND = 11  # an opaque command task


class Tier(IntEnum):
    """Scheduling tier label of a device."""

    HOT = 0
    WARM = 1
    COLD = 2


ALL_OPERATOR_FAMILIES = (1 << len(OperatorFamily)) - 1


def parse_name(enum: type[IntEnum], name: str, *, what: str) -> IntEnum:
    """Return the member of ``enum`` called ``name`` (case-insensitive, '-' as '_')."""
    key = name.strip().upper().replace("-", "_")
    try:
        return enum[key]
    except KeyError:
        allowed = ", ".join(m.name.lower() for m in enum)
        raise ValueError(f"unknown {what} {name!r}; expected one of: {allowed}") from None


def mask_of(enum: type[IntEnum], names: Iterable[str], *, what: str) -> int:
    """Return the bitmask of the named members of ``enum``."""
    mask = 0
    for name in names:
        mask |= 1 << int(parse_name(enum, name, what=what))
    return mask


def names_of(enum: type[IntEnum], mask: int) -> list[str]:
    """Return the lower-case names of the members whose bits are set in ``mask``."""
    return [m.name.lower() for m in enum if mask & (1 << int(m))]
