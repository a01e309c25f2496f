"""Build the example ONNX models shipped with hetmesh: small, synthetic, deterministic.

The weights are random (numpy, fixed seed), not trained: the models exist to exercise
semantics extraction, placement and execution, not to predict anything. Usage, from the
repository root::

    python tools/make_example_models.py            # writes models/*.onnx and models/README.md

IR version 7 and opset 13 are chosen so that any onnxruntime since 1.8 (and most vendor
converters) loads them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 7
OPSET = 13
SEED = 20250601
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODELS = REPO / "models"

_Builder = Callable[[np.random.Generator], onnx.ModelProto]


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    weights: np.ndarray = rng.standard_normal(shape, dtype=np.float32) * np.sqrt(2.0 / fan_in)
    return weights.astype(np.float32)


def _bias(rng: np.random.Generator, size: int) -> np.ndarray:
    bias: np.ndarray = rng.standard_normal(size, dtype=np.float32) * 0.01
    return bias.astype(np.float32)


def _model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="hetmesh-make-examples",
        doc_string=doc,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _cnn_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "conv1.w": _he(rng, (8, 3, 3, 3), 27),
        "conv1.b": _bias(rng, 8),
        "conv2.w": _he(rng, (16, 8, 3, 3), 72),
        "conv2.b": _bias(rng, 16),
        "fc.w": _he(rng, (10, 16), 16),
        "fc.b": _bias(rng, 10),
    }


def _cnn_io() -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
    return (
        helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64]),
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10]),
    )


def tiny_cnn_fp32(rng: np.random.Generator) -> onnx.ModelProto:
    """Return Conv-Relu-MaxPool-Conv-Relu-GlobalAveragePool-Flatten-Gemm on 1x3x64x64."""
    weights = _cnn_weights(rng)
    nodes = [
        helper.make_node(
            "Conv", ["image", "conv1.w", "conv1.b"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node(
            "Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    inits = [numpy_helper.from_array(w, name) for name, w in weights.items()]
    graph = helper.make_graph(nodes, "tiny_cnn_fp32", [_cnn_io()[0]], [_cnn_io()[1]], inits)
    return _model(graph, "Synthetic tiny CNN, fp32, random weights (not trained).")


def _session(model: str | bytes) -> Any:
    """Return an onnxruntime CPU session (imported here: only building needs it)."""
    import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type hints

    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def _activation_ranges(model: onnx.ModelProto, names: list[str], image: np.ndarray) -> list[float]:
    """Return the largest value each named tensor takes on ``image`` (fp32 calibration)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    values = _session(probe.SerializeToString()).run(names, {"image": image})
    return [float(np.max(v)) for v in values]


def tiny_cnn_int8(rng: np.random.Generator) -> onnx.ModelProto:
    """Return the tiny CNN in QDQ form: int8 weights, uint8 activations, calibrated scales."""
    weights = _cnn_weights(rng)
    calibration = rng.random((8, 3, 64, 64), dtype=np.float32)
    ranges = _activation_ranges(
        tiny_cnn_fp32(np.random.default_rng(SEED)), ["r1", "r2", "g"], calibration[:1]
    )
    act_scale = {
        "image": 1.0 / 255,
        "r1": ranges[0] / 255,
        "r2": ranges[1] / 255,
        "g": ranges[2] / 255,
    }
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def qdq(name: str, scale_of: str) -> str:
        inits.extend(
            [
                numpy_helper.from_array(np.array(act_scale[scale_of], np.float32), f"{name}.s"),
                numpy_helper.from_array(np.array(0, np.uint8), f"{name}.zp"),
            ]
        )
        nodes.append(
            helper.make_node("QuantizeLinear", [name, f"{name}.s", f"{name}.zp"], [f"{name}.q"])
        )
        nodes.append(
            helper.make_node(
                "DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.zp"], [f"{name}.dq"]
            )
        )
        return f"{name}.dq"

    def weight(name: str, w: np.ndarray, bias: np.ndarray, in_scale: float) -> list[str]:
        w_scale = float(np.abs(w).max()) / 127
        b_scale = in_scale * w_scale
        inits.extend(
            [
                numpy_helper.from_array(np.round(w / w_scale).astype(np.int8), f"{name}.wq"),
                numpy_helper.from_array(np.array(w_scale, np.float32), f"{name}.ws"),
                numpy_helper.from_array(np.array(0, np.int8), f"{name}.wzp"),
                numpy_helper.from_array(np.round(bias / b_scale).astype(np.int32), f"{name}.bq"),
                numpy_helper.from_array(np.array(b_scale, np.float32), f"{name}.bs"),
                numpy_helper.from_array(np.array(0, np.int32), f"{name}.bzp"),
            ]
        )
        for part, scale, zp in (("w", "ws", "wzp"), ("b", "bs", "bzp")):
            nodes.append(
                helper.make_node(
                    "DequantizeLinear",
                    [f"{name}.{part}q", f"{name}.{scale}", f"{name}.{zp}"],
                    [f"{name}.{part}"],
                )
            )
        return [f"{name}.w", f"{name}.b"]

    x = qdq("image", "image")
    w1 = weight("conv1", weights["conv1.w"], weights["conv1.b"], act_scale["image"])
    nodes += [
        helper.make_node("Conv", [x, *w1], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
    ]
    x = qdq("r1", "r1")
    nodes.append(helper.make_node("MaxPool", [x], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    x = qdq("p1", "r1")
    w2 = weight("conv2", weights["conv2.w"], weights["conv2.b"], act_scale["r1"])
    nodes += [
        helper.make_node("Conv", [x, *w2], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
    ]
    x = qdq("r2", "r2")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["g"]))
    x = qdq("g", "g")
    w3 = weight("fc", weights["fc.w"], weights["fc.b"], act_scale["g"])
    nodes += [
        helper.make_node("Flatten", [x], ["f"], axis=1),
        helper.make_node("Gemm", ["f", *w3], ["logits"], transB=1),
    ]
    graph = helper.make_graph(nodes, "tiny_cnn_int8", [_cnn_io()[0]], [_cnn_io()[1]], inits)
    return _model(graph, "Synthetic tiny CNN, int8 QDQ, random weights (not trained).")


def mlp_fp32(rng: np.random.Generator) -> onnx.ModelProto:
    """Return Gemm-Relu-Gemm, 64 -> 128 -> 10, with a symbolic batch dimension."""
    inits = [
        numpy_helper.from_array(_he(rng, (64, 128), 64), "fc1.w"),
        numpy_helper.from_array(_bias(rng, 128), "fc1.b"),
        numpy_helper.from_array(_he(rng, (128, 10), 128), "fc2.w"),
        numpy_helper.from_array(_bias(rng, 10), "fc2.b"),
    ]
    nodes = [
        helper.make_node("Gemm", ["features", "fc1.w", "fc1.b"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "fc2.w", "fc2.b"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp_fp32",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    return _model(graph, "Synthetic MLP, fp32, random weights (not trained).")


def tiny_attention_fp32(rng: np.random.Generator) -> onnx.ModelProto:
    """Return a single-head self-attention block on 16 tokens of width 32."""
    width = 32
    inits = [numpy_helper.from_array(_he(rng, (width, width), width), f"{p}.w") for p in "qkvo"]
    inits.append(numpy_helper.from_array(np.array(width**-0.5, np.float32), "scale"))
    nodes = [
        *(helper.make_node("MatMul", ["tokens", f"{p}.w"], [p]) for p in "qkv"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["context"]),
        helper.make_node("MatMul", ["context", "o.w"], ["hidden"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_attention_fp32",
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, 16, width])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 16, width])],
        inits,
    )
    return _model(graph, "Synthetic self-attention block, fp32, random weights (not trained).")


#: File name -> (builder, one-line description for the README).
EXAMPLES: dict[str, tuple[_Builder, str]] = {
    "tiny_cnn_fp32.onnx": (
        tiny_cnn_fp32,
        "Conv-Relu-MaxPool-Conv-Relu-GlobalAvgPool-Gemm, input 1x3x64x64, 10 outputs",
    ),
    "tiny_cnn_int8.onnx": (
        tiny_cnn_int8,
        "the same CNN and weights, quantized to QDQ form: "
        "int8 weights (per tensor), uint8 activations calibrated on fp32",
    ),
    "mlp_fp32.onnx": (mlp_fp32, "Gemm-Relu-Gemm, 64 -> 128 -> 10, symbolic batch"),
    "tiny_attention_fp32.onnx": (
        tiny_attention_fp32,
        "single-head self-attention: Q/K/V "
        "MatMuls, MatMul-Mul-Softmax-MatMul, output projection; "
        "16 tokens x 32",
    ),
}


def _readme(out: Path) -> str:
    sys.path.insert(0, str(REPO))
    from edge_agent.tasks.onnx_semantics import semantics_from_onnx

    rows = []
    for name in EXAMPLES:
        sem = semantics_from_onnx(out / name)
        hist = ", ".join(f"{k} {v}" for k, v in sem.operator_histogram.items())
        rows.append(
            f"| `{name}` | {sem.gflops * 1e9:,.0f} | {sem.param_bytes:,.0f} | "
            f"{sem.activation_bytes:,.0f} | {sem.input_bytes:,.0f} | {sem.precision} | {hist} |"
        )
    listing = "\n".join(f"- `{name}`: {desc}." for name, (_, desc) in EXAMPLES.items())
    return _README.format(
        listing=listing,
        rows="\n".join(rows),
        ir=IR_VERSION,
        opset=OPSET,
        seed=SEED,
        drift=_int8_drift(out),
    )


def _int8_drift(out: Path) -> str:
    """Return the largest |int8 - fp32| logit difference on a seeded random image."""
    image = np.random.default_rng(SEED + 1).random((1, 3, 64, 64), dtype=np.float32)
    logits = [
        _session(str(out / name)).run(None, {"image": image})[0]
        for name in ("tiny_cnn_fp32.onnx", "tiny_cnn_int8.onnx")
    ]
    return f"{float(np.abs(logits[0] - logits[1]).max()):.3f}"


_README = """# Example models

Small ONNX models that ship with hetmesh (package data `edge_agent.models`) for demos and
tests. They are **synthetic**: random weights from numpy with a fixed seed ({seed}), never
trained, so their outputs mean nothing. They exist to exercise semantics extraction,
placement and execution on real ONNX graphs.

{listing}

## How they are built

`python tools/make_example_models.py` (from the repository root) rebuilds every model with
`onnx.helper` and rewrites this file. The build is deterministic: the same onnx version
writes the same bytes. IR version {ir}, opset {opset}: onnxruntime 1.8 or newer loads
them, and `onnx.checker.check_model(full_check=True)` passes. Nothing is downloaded.

The int8 model quantizes the fp32 model's weights per tensor (symmetric int8) and its
activations to uint8 with scales calibrated by running the fp32 model on one seeded
random image; on another, its logits differ from the fp32 ones by at most {drift}.

## Semantics, as extracted

Generated by `edge_agent.tasks.onnx_semantics.semantics_from_onnx` (operations count a MAC
as 2; activation bytes are the peak of live tensors; a symbolic batch counts as 1):

| model | operations | param bytes | activation bytes | input bytes | precision | families |
| --- | ---: | ---: | ---: | ---: | --- | --- |
{rows}
"""


def main(argv: list[str] | None = None) -> int:
    """Write the example models (and README.md) into the output folder; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=MODELS, help="output folder (default: models/)")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite README.md")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (build, _) in EXAMPLES.items():
        model = build(np.random.default_rng(SEED))
        (args.out / name).write_bytes(model.SerializeToString())
        print(f"wrote {args.out / name} ({model.ByteSize():,} bytes)")
    if not args.no_readme:
        (args.out / "README.md").write_text(_readme(args.out))
        print(f"wrote {args.out / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
