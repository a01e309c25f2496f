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
    task_type: str  # classification | detection | transformer | training
    operators: tuple[str, ...]
    source: str
    aliases: tuple[str, ...] = ()  # profile latency keys that measure the same network

    def latency_keys(self) -> tuple[str, ...]:
        """Return the profile latency keys to look up, the model's own name first."""
        return (self.name, *self.aliases)

    def contract(
        self,
        precision: str,
        max_latency_s: float = 0.0,
        priority: int = 0,
        tenant: str = "default",
        work: float = 1.0,
    ) -> TaskContract:
        """Return the contract of ``work`` units (inferences, training steps) of this model."""
        bytes_per = 1.0 if precision in ("int8", "int4") else 2.0 if precision != "fp32" else 4.0
        h, w, c = self.input_hwc
        sem = Semantics(
            gflops=self.gops * work,
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


#: Gavel's job families: (GOPs of one training step per sample, params M, source). A
#: training step is taken as 3x the forward pass (forward + backward), 2 ops per MAC.
#: These are rough priors for the kernel's roofline (order of magnitude), never ground
#: truth: the simulator times Gavel jobs from Gavel's measured throughputs only.
_PRIOR = "rough prior for the kernel, not a measurement: "
TRAINING: dict[str, tuple[float, float, str]] = {
    "ResNet-18": (3.3, 11.2, _PRIOR + "ResNet-18 on CIFAR-10, 0.56 GMAC forward per image"),
    "ResNet-50": (24.6, 25.5, _PRIOR + "ResNet-50 on ImageNet 224x224, 8.19 GOPs forward"),
    "Transformer": (10.0, 65.0, _PRIOR + "Transformer-base, 2 x 65M ops/token, ~26 tokens"),
    "LM": (1.5, 13.0, _PRIOR + "2-layer LSTM word LM, 35-token BPTT, 33k-word softmax"),
    "Recommendation": (0.15, 24.0, _PRIOR + "autoencoder over ML-20M's ~20k items"),
    "A3C": (0.1, 1.0, _PRIOR + "A3C Atari conv net, one rollout step"),
    "CycleGAN": (700.0, 28.3, _PRIOR + "CycleGAN 256x256: 2 generators + 2 critics, fwd+bwd"),
}
TRAINING_OPS = ("conv", "gemm", "recurrent", "norm", "elementwise", "reshape", "pool")


def training_job(name: str) -> ModelInfo:
    """Return the catalogue entry of a Gavel job type ("ResNet-18 (batch size 32)")."""
    family, _, rest = name.partition(" (batch size ")
    if family not in TRAINING or (rest and not rest.rstrip(")").isdigit()):
        raise KeyError(name)
    batch = int(rest.rstrip(")")) if rest else 1
    gops, params, src = TRAINING[family]
    return ModelInfo(
        name, gops * batch, params, (1, 1, 1), "training", TRAINING_OPS, f"{src}; batch {batch}"
    )


_BATCHES = {
    "ResNet-18": (16, 32, 64, 128, 256),
    "ResNet-50": (16, 32, 64, 128),
    "Transformer": (16, 32, 64, 128, 256),
    "LM": (5, 10, 20, 40, 80),
    "Recommendation": (512, 1024, 2048, 4096, 8192),
}
for _name in [f"{f} (batch size {b})" for f, bs in _BATCHES.items() for b in bs] + [
    "A3C",
    "CycleGAN",
]:
    MODELS[_name] = training_job(_name)
