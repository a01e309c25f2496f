"""Semantics extraction from ONNX models: exact operation counts, bytes, precision, families."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_agent.errors import ContractError
from edge_agent.tasks.contract import Requirements
from edge_agent.tasks.onnx_semantics import (
    OP_FAMILIES,
    contract_from_onnx,
    semantics_from_onnx,
)

MODELS = Path(__file__).parents[1] / "models"
F32 = TensorProto.FLOAT


def _info(name: str, dims: Sequence[int | str] | None, dtype: int = F32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def _array(shape: Sequence[int], dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    values: np.ndarray = np.random.default_rng(seed).standard_normal(shape) * 3
    return values.astype(dtype)


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[str | onnx.ValueInfoProto],
    inits: dict[str, np.ndarray] | None = None,
    *,
    opset: int = 13,
    ir_version: int = 7,
    domains: Sequence[tuple[str, int]] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "test",
        list(inputs),
        [_info(o, None, TensorProto.UNDEFINED) if isinstance(o, str) else o for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # types the outputs
    del model.graph.value_info[:]  # intermediate shapes are for the extractor to infer
    onnx.checker.check_model(model)
    return model


def _conv_model(x: Sequence[int], w: Sequence[int], **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    return _model([node], [_info("x", x)], ["y"], {"w": _array(w)})


def _gflops(model: onnx.ModelProto) -> float:
    return semantics_from_onnx(model).gflops


def test_single_conv_counts_two_ops_per_mac() -> None:
    sem = semantics_from_onnx(_conv_model([1, 3, 8, 8], [4, 3, 3, 3], pads=[1, 1, 1, 1]))
    assert sem.gflops == 2 * 4 * 8 * 8 * 3 * 3 * 3 / 1e9
    assert sem.param_bytes == 4 * 3 * 3 * 3 * 4
    assert sem.input_bytes == 3 * 8 * 8 * 4
    assert sem.activation_bytes == (3 + 4) * 8 * 8 * 4  # input and output live together
    assert sem.precision == "fp32"
    assert sem.operator_histogram == {"conv": 1}


@pytest.mark.parametrize(
    ("x", "w", "attrs", "outputs"),
    [
        # 4 -> 6 channels in 2 groups, stride 2: output 1x6x4x4, 2 in-channels per group
        ([1, 4, 9, 9], [6, 2, 3, 3], {"group": 2, "strides": [2, 2]}, 6 * 4 * 4),
        # dilation 2 makes the 3x3 kernel span 5x5: output 1x2x6x6
        ([1, 2, 10, 10], [2, 2, 3, 3], {"dilations": [2, 2]}, 2 * 6 * 6),
        # depthwise, stride 2, pad 1: output 1x8x4x4, one in-channel per group
        ([1, 8, 8, 8], [8, 1, 3, 3], {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}, 128),
    ],
)
def test_grouped_strided_dilated_conv(
    x: list[int], w: list[int], attrs: dict[str, Any], outputs: int
) -> None:
    macs = outputs * w[1] * w[2] * w[3]
    assert _gflops(_conv_model(x, w, **attrs)) == 2 * macs / 1e9


def test_conv_transpose_counts_per_input_element() -> None:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    model = _model([node], [_info("x", [1, 2, 4, 4])], ["y"], {"w": _array([2, 3, 3, 3])})
    assert _gflops(model) == 2 * (2 * 4 * 4) * (3 * 3 * 3) / 1e9


@pytest.mark.parametrize("trans_a", [0, 1])
def test_gemm_is_2mnk_without_bias(trans_a: int) -> None:
    m, k, n = 3, 5, 7
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=1)
    a = _info("a", [k, m] if trans_a else [m, k])
    model = _model([node], [a], ["y"], {"b": _array([n, k]), "c": _array([n])})
    sem = semantics_from_onnx(model)
    assert sem.gflops == 2 * m * n * k / 1e9
    assert sem.operator_histogram == {"gemm": 1}


def test_gemm_with_symbolic_batch_counts_batch_as_one() -> None:
    node = helper.make_node("Gemm", ["a", "b"], ["y"])
    model = _model([node], [_info("a", ["batch", 8])], ["y"], {"b": _array([8, 4])})
    sem = semantics_from_onnx(model)
    assert sem.gflops == 2 * 1 * 4 * 8 / 1e9
    assert sem.input_bytes == 8 * 4


@pytest.mark.parametrize(
    ("a", "b", "out_elements", "k"),
    [
        ([2, 4, 3, 5], [2, 4, 5, 6], 2 * 4 * 3 * 6, 5),
        ([2, 3, 5], [5, 6], 2 * 3 * 6, 5),  # broadcast weight
        ([5], [2, 5, 6], 2 * 6, 5),  # 1-D left operand
    ],
)
def test_batched_matmul(a: list[int], b: list[int], out_elements: int, k: int) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    model = _model([node], [_info("a", a), _info("b", b)], ["y"])
    assert _gflops(model) == 2 * out_elements * k / 1e9


def test_einsum_lstm_and_fused_attention() -> None:
    einsum = helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")
    model = _model([einsum], [_info("a", [2, 3, 4]), _info("b", [2, 4, 5])], ["y"])
    assert _gflops(model) == 2 * (2 * 3 * 5) * 4 / 1e9

    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=4)
    inits = {"w": _array([1, 16, 3]), "r": _array([1, 16, 4])}
    model = _model([lstm], [_info("x", [5, 2, 3])], ["y"], inits)
    assert semantics_from_onnx(model).operator_histogram == {"recurrent": 1}
    assert _gflops(model) == 2 * 5 * 2 * (16 * 3 + 16 * 4) / 1e9

    attention = helper.make_node("Attention", ["q", "k", "v"], ["y"])
    qkv = [_info("q", [1, 2, 6, 8]), _info("k", [1, 2, 10, 8]), _info("v", [1, 2, 10, 8])]
    model = _model([attention], qkv, ["y"], opset=23, ir_version=10)
    assert semantics_from_onnx(model).operator_histogram == {"attention": 1}
    assert _gflops(model) == 2 * (1 * 2 * 6 * 10 * 8) * 2 / 1e9  # Q.K^T and P.V


def _qlinear_conv_model() -> onnx.ModelProto:
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1]
    )
    inits: dict[str, np.ndarray] = {
        "xs": np.array(0.1, np.float32),
        "xz": np.array(128, np.uint8),
        "w": _array([4, 3, 3, 3], np.int8),
        "ws": np.array(0.05, np.float32),
        "wz": np.array(0, np.int8),
        "ys": np.array(0.2, np.float32),
        "yz": np.array(128, np.uint8),
    }
    return _model([node], [_info("x", [1, 3, 8, 8], TensorProto.UINT8)], ["y"], inits)


def _qdq_conv_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"]),
        helper.make_node("Conv", ["xd", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits: dict[str, np.ndarray] = {
        "s": np.array(0.1, np.float32),
        "z": np.array(0, np.uint8),
        "wq": _array([4, 3, 3, 3], np.int8),
        "ws": np.array(0.05, np.float32),
    }
    return _model(nodes, [_info("x", [1, 3, 8, 8])], ["y"], inits)


def test_qlinear_conv_is_int8_and_counted_as_conv() -> None:
    sem = semantics_from_onnx(_qlinear_conv_model())
    assert sem.precision == "int8"
    assert sem.gflops == 2 * 4 * 8 * 8 * 3 * 3 * 3 / 1e9
    assert sem.operator_histogram == {"conv": 1}
    assert sem.input_bytes == 3 * 8 * 8  # uint8 input


def test_qdq_model_is_int8() -> None:
    sem = semantics_from_onnx(_qdq_conv_model())
    assert sem.precision == "int8"
    assert sem.operator_histogram == {"conv": 1, "elementwise": 3}
    conv = 2 * 4 * 8 * 8 * 3 * 3 * 3
    quant = 2 * (3 * 8 * 8) + 4 * 3 * 3 * 3  # Q and DQ of x, DQ of the weight
    assert sem.gflops == (conv + quant) / 1e9


@pytest.mark.parametrize(
    ("dtype", "precision"),
    [(np.float16, "fp16"), (np.float32, "fp32"), (np.float64, "fp32"), (np.int8, "int8")],
)
def test_precision_follows_dominant_initializer_bytes(dtype: Any, precision: str) -> None:
    cast = helper.make_node("Cast", ["w"], ["wf"], to=F32)
    gemm = helper.make_node("Gemm", ["a", "wf", "c"], ["y"])
    inits = {"w": _array([16, 16], dtype), "c": _array([16], np.float32)}
    model = _model([cast, gemm], [_info("a", [2, 16])], ["y"], inits)
    assert semantics_from_onnx(model).precision == precision


def test_fp16_inputs_decide_when_there_are_no_weights() -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    f16 = TensorProto.FLOAT16
    model = _model([node], [_info("a", [2, 3], f16), _info("b", [3, 4], f16)], ["y"])
    assert semantics_from_onnx(model).precision == "fp16"


def test_param_bytes_are_initializer_bytes() -> None:
    inits = {
        "w": _array([8, 4], np.float32),
        "h": _array([8], np.float16),
        "q": _array([5, 7], np.int8),
        "shape": np.array([2, 16], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Reshape", ["y", "shape"], ["z"]),
        helper.make_node("Cast", ["h"], ["hc"], to=F32),
        helper.make_node("Cast", ["q"], ["qc"], to=F32),
    ]
    model = _model(nodes, [_info("x", [4, 8])], ["z", "hc", "qc"], inits)
    sem = semantics_from_onnx(model)
    assert sem.param_bytes == sum(a.nbytes for a in inits.values()) == 128 + 16 + 35 + 16
    assert sem.operator_histogram == {"elementwise": 2, "gemm": 1, "reshape": 1}


def test_activation_bytes_are_the_peak_of_live_tensors() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Sigmoid", ["x"], ["b"]),  # x dies here
        helper.make_node("Add", ["a", "b"], ["y"]),  # a, b die here; y is kept
    ]
    model = _model(nodes, [_info("x", [1000])], ["y"])
    assert semantics_from_onnx(model).activation_bytes == 3 * 4000


def test_histogram_families_and_attention_rule() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["then_out"])],
        "then",
        [],
        [_info("then_out", [2, 4])],
    )
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Div", ["s", "d"], ["sd"]),
        helper.make_node("Softmax", ["sd"], ["p"], axis=-1),  # fed by MatMul: attention
        helper.make_node("MatMul", ["p", "v"], ["a"]),
        helper.make_node("Softmax", ["q"], ["plain"]),  # fed by an input: elementwise
        helper.make_node("BatchNormalization", ["img", "g", "b", "m", "var"], ["bn"]),
        helper.make_node("MaxPool", ["bn"], ["mp"], kernel_shape=[2, 2]),
        helper.make_node("ReduceMean", ["mp"], ["rm"], keepdims=0),
        helper.make_node("If", ["cond"], ["branch"], then_branch=body, else_branch=body),
        helper.make_node("Shuffle", ["a"], ["odd"], domain="ai.hetmesh.test"),
    ]
    inputs = [
        _info("q", [2, 3]),
        _info("k", [3, 4]),
        _info("v", [4, 4]),
        _info("img", [1, 2, 4, 4]),
        _info("cond", [], TensorProto.BOOL),
    ]
    inits = {"d": np.array(2.0, np.float32)} | {n: _array([2]) for n in ("g", "b", "m", "var")}
    model = _model(
        nodes,
        inputs,
        ["plain", "rm", "branch", _info("odd", [2, 4])],
        inits,
        domains=[("ai.hetmesh.test", 1)],
    )
    sem = semantics_from_onnx(model)
    assert sem.operator_histogram == {
        "attention": 1,
        "control_flow": 1,
        "custom": 1,
        "elementwise": 2,
        "gemm": 2,
        "norm": 1,
        "pool": 2,
        "reshape": 2,  # the Identity in each branch of the If
    }


def test_every_standard_operator_has_a_family() -> None:
    standard = {s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}
    assert sorted(standard - set(OP_FAMILIES)) == []


def test_path_bytes_and_proto_give_the_same_semantics(tmp_path: Path) -> None:
    model = _conv_model([1, 3, 8, 8], [4, 3, 3, 3], pads=[1, 1, 1, 1])
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    expected = semantics_from_onnx(model)
    assert semantics_from_onnx(path) == expected
    assert semantics_from_onnx(str(path)) == expected
    assert semantics_from_onnx(model.SerializeToString()) == expected


@pytest.mark.parametrize("data", [b"", b"not a model at all", b"\x00\x01\x02garbage" * 10])
def test_invalid_bytes_raise_contract_error(data: bytes) -> None:
    with pytest.raises(ContractError, match=r"^not an ONNX model: <\d+ bytes>: "):
        semantics_from_onnx(data)


def test_invalid_files_raise_contract_error(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"model file not found: .*missing\.onnx"):
        semantics_from_onnx(tmp_path / "missing.onnx")
    text = tmp_path / "notes.onnx"
    text.write_text("these are not the weights you are looking for\n")
    with pytest.raises(ContractError, match=r"not an ONNX model: .*notes\.onnx"):
        semantics_from_onnx(text)


def test_model_failing_the_checker_raises_contract_error(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["undefined"], ["y"])
    graph = helper.make_graph([node], "broken", [_info("x", [2])], [_info("y", [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = tmp_path / "broken.onnx"
    onnx.save(model, path)
    with pytest.raises(ContractError, match=r"invalid ONNX model .*broken\.onnx: .*undefined"):
        semantics_from_onnx(path)
    with pytest.raises(ContractError, match="invalid ONNX model <ModelProto>"):
        semantics_from_onnx(model)


def test_contract_from_onnx_fills_class_model_and_requirements(tmp_path: Path) -> None:
    path = tmp_path / "detector.onnx"
    onnx.save(_qlinear_conv_model(), path)
    contract = contract_from_onnx(path, kinds=("npu",), device_count=2, max_latency_s=0.005)
    assert contract.task_class == "detector"
    assert contract.model == str(path)
    assert contract.semantics == semantics_from_onnx(path)
    assert contract.requirements == Requirements(
        kinds=("npu",), device_count=2, max_latency_s=0.005
    )
    assert contract.precision().name == "INT8"
    assert contract_from_onnx(path, task_class="yolo").task_class == "yolo"
    with pytest.raises(ContractError, match="unknown field"):
        contract_from_onnx(path, latency=1.0)
    with pytest.raises(ContractError, match="device kind"):
        contract_from_onnx(path, kinds=["toaster"])


EXAMPLES = {
    "tiny_cnn_fp32.onnx": ("image", "fp32"),
    "tiny_cnn_int8.onnx": ("image", "int8"),
    "mlp_fp32.onnx": ("features", "fp32"),
    "tiny_attention_fp32.onnx": ("tokens", "fp32"),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_models_run_in_onnxruntime(name: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    path = MODELS / name
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (feed,) = session.get_inputs()
    assert feed.name == EXAMPLES[name][0]
    shape = [1 if isinstance(d, str) else d for d in feed.shape]
    (out,) = session.run(None, {feed.name: np.zeros(shape, np.float32)})
    assert np.isfinite(out).all()
    assert semantics_from_onnx(path).precision == EXAMPLES[name][1]


def test_example_cnn_operations_match_hand_count() -> None:
    conv1 = 2 * (8 * 64 * 64) * (3 * 3 * 3)
    relu1, pool = 8 * 64 * 64, (8 * 32 * 32) * 4
    conv2 = 2 * (16 * 32 * 32) * (8 * 3 * 3)
    relu2 = gap = 16 * 32 * 32
    gemm = 2 * 10 * 16
    total = conv1 + relu1 + pool + conv2 + relu2 + gap + gemm
    assert semantics_from_onnx(MODELS / "tiny_cnn_fp32.onnx").gflops == total / 1e9
