"""Semantics of the models a simulated workload may name, each figure with its source.

GOPs count a multiply-accumulate as two operations (the kernel's unit). Parameters are in
millions. Figures are copied from public model zoos (see ``source``); nothing here is
read from outside the repository at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

HAILO = (
    "Hailo Model Zoo v2.17 (github hailo-ai/hailo_model_zoo @c83fc03, MIT), "
    "docs/public_models/HAILO8 tables, columns Params (M) and OPS (G)"
)
VITIS = (
    "Vitis AI 2.5 model zoo (github Xilinx/Vitis-AI, Apache-2.0), model name "
    "suffix (G ops per image)"
)
CNN_OPS = ("conv", "pool", "norm", "elementwise", "reshape")
VIT_OPS = ("gemm", "attention", "norm", "elementwise", "reshape")


@dataclass(frozen=True)
class ModelInfo:
    """One model: work, size, input, operator families, kind of task, and where they come from."""

    name: str
    gops: float
    params_m: float
    input_hwc: tuple[int, int, int]
    task_type: str  # classification | detection | transformer
    operators: tuple[str, ...]
    source: str
    aliases: tuple[str, ...] = ()  # profile latency keys that measure the same network

    def latency_keys(self) -> tuple[str, ...]:
        """Return the profile latency keys to look up, the model's own name first."""
        return (self.name, *self.aliases)

    def contract(
        self, precision: str, max_latency_s: float = 0.0, priority: int = 0, tenant: str = "default"
    ) -> TaskContract:
        """Return the contract of one inference of this model (any model format)."""
        bytes_per = 1.0 if precision in ("int8", "int4") else 2.0 if precision != "fp32" else 4.0
        h, w, c = self.input_hwc
        sem = Semantics(
            gflops=self.gops,
            param_bytes=self.params_m * 1e6 * bytes_per,
            activation_bytes=h * w * c * bytes_per,  # the input tensor; others not modelled
            input_bytes=float(h * w * c),  # one uint8 image
            precision=precision,
            operator_histogram=dict.fromkeys(self.operators, 1),
        )
        req = Requirements(model_format=None, max_latency_s=max_latency_s)
        return TaskContract(
            sem,
            req,
            task_class=f"{self.name}:{precision}",
            priority=priority,
            tenant=tenant,
            model=self.name,
        )


def _m(
    name: str,
    gops: float,
    params: float,
    side: int,
    kind: str,
    src: str,
    aliases: tuple[str, ...] = (),
    ops: tuple[str, ...] = CNN_OPS,
) -> ModelInfo:
    return ModelInfo(name, gops, params, (side, side, 3), kind, ops, src, aliases)


#: The model table (name -> semantics).
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        _m(
            "resnet50",
            8.19,
            25.53,
            224,
            "classification",
            f"GOPs: {VITIS} tf_mlperf_resnet50 8.19G; params: {HAILO} resnet_v1_50",
            ("resnet50_v1",),
        ),
        _m("resnet18", 3.64, 11.68, 224, "classification", f"{HAILO} resnet_v1_18"),
        _m("mobilenet_v1", 1.14, 4.22, 224, "classification", f"{HAILO} mobilenet_v1"),
        _m(
            "mobilenet_v2",
            0.602,
            3.49,
            224,
            "classification",
            f"GOPs: {VITIS} tf_mobilenetv2_1.0 602M; params: {HAILO} mobilenet_v2_1.0",
        ),
        _m(
            "squeezenet",
            0.78,
            1.24,
            224,
            "classification",
            f"{HAILO} squeezenet_v1.1",
            ("squeezenet_v1.1",),
        ),
        _m(
            "efficientnet_b0",
            0.36,
            5.3,
            224,
            "classification",
            f"GOPs: {VITIS} tf2_efficientnet-b0 0.36G; params: EfficientNet paper "
            "(Tan & Le 2019, table 2: 5.3M)",
        ),
        _m("ssd_mobilenet_v1", 2.5, 6.79, 300, "detection", f"{HAILO} ssd_mobilenet_v1"),
        _m("yolov8n", 8.74, 3.2, 640, "detection", f"{HAILO} yolov8n"),
        _m("yolo11n", 6.55, 2.6, 640, "detection", f"{HAILO} yolov11n"),
        _m("yolo11s", 21.6, 9.4, 640, "detection", f"{HAILO} yolov11s"),
        _m("vit_base", 35.188, 86.5, 224, "transformer", f"{HAILO} vit_base", ops=VIT_OPS),
    )
}


def model_info(name: str) -> ModelInfo:
    """Return the table entry for ``name``; KeyError lists the known models."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None
