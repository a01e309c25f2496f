"""Task semantics extracted from an ONNX model: work, bytes, precision and operator mix.

What the numbers mean:

* ``gflops``: operations of one run (a MAC is 2), per ``onnx_flops``; unknown (symbolic)
  dimensions count as 1, so a model with a symbolic batch is measured at batch 1.
* ``param_bytes``: bytes of the initializers (and of ``Constant`` node tensors), by dtype size.
* ``activation_bytes``: the *peak live* estimate: graph nodes run in file order, a tensor lives
  from its producer to its last consumer, graph inputs from the start and graph outputs to the
  end; the largest total of live non-parameter tensors is reported.
* ``input_bytes``: bytes of the graph inputs that are not initializers.
* ``precision``: "int8" if the model has quantized ops (QLinear*, *Integer, QGemm, dynamic
  quantization, or a QuantizeLinear feeding a DequantizeLinear at 8 bits); otherwise the
  numeric class with the most initializer bytes (int8/uint8, fp16, bf16, fp32/fp64; index
  tensors ignored; graph inputs decide when there are no such initializers), fp32 on a tie.
* ``operator_histogram``: node counts per operator family (``OP_FAMILIES``), bodies of
  If / Loop / Scan included. A Softmax counts as *attention* when its input comes from a
  MatMul or Einsum through at most three elementwise ops (scale, mask, cast); the MatMuls stay
  *gemm*. Ops outside the default domain count as *custom*, except the com.microsoft
  quantization and attention ops listed in the table.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # no stubs

from edge_agent.errors import ContractError
from edge_agent.resources.vocab import OperatorFamily
from edge_agent.tasks.contract import Semantics, TaskContract
from edge_agent.tasks.onnx_flops import Dims, node_flops, tensor_bytes, value_bytes

_log = logging.getLogger(__name__)

#: What ``semantics_from_onnx`` accepts: a file path, serialized bytes, or a loaded model.
ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto

_MS = "com.microsoft:"

#: Operator families and their ops: ``op_type`` in the default domain, else ``domain:op_type``.
_FAMILY_TABLE = """
conv: Conv ConvInteger ConvTranspose DeformConv QLinearConv CausalConvWithState
    com.microsoft:QLinearConv
gemm: Gemm MatMul MatMulInteger QLinearMatMul Einsum DFT STFT
    com.microsoft:QGemm com.microsoft:DynamicQuantizeMatMul com.microsoft:MatMulIntegerToFloat
attention: Attention LinearAttention RotaryEmbedding
    com.microsoft:Attention com.microsoft:MultiHeadAttention com.microsoft:QAttention
recurrent: LSTM GRU RNN com.microsoft:DynamicQuantizeLSTM
pool: AveragePool GlobalAveragePool GlobalLpPool GlobalMaxPool LpPool MaxPool MaxRoiPool
    MaxUnpool RoiAlign ArgMax ArgMin TopK ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
    ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare
    com.microsoft:QLinearAveragePool com.microsoft:QLinearGlobalAveragePool
    com.microsoft:QLinearReduceMean
norm: BatchNormalization GroupNormalization InstanceNormalization LayerNormalization
    LpNormalization LRN MeanVarianceNormalization RMSNormalization
elementwise: Abs Acos Acosh Add And Asin Asinh Atan Atanh Bernoulli BitShift BitwiseAnd
    BitwiseNot BitwiseOr BitwiseXor BlackmanWindow Cast CastLike Ceil Celu Clip Cos Cosh
    CumProd CumSum DequantizeLinear Det Div Dropout DynamicQuantizeLinear Elu Equal Erf Exp
    EyeLike Floor Gelu Greater GreaterOrEqual HammingWindow HannWindow HardSigmoid HardSwish
    Hardmax IsInf IsNaN LeakyRelu Less LessOrEqual Log LogSoftmax Max Mean MelWeightMatrix Min
    Mish Mod Mul Multinomial Neg NegativeLogLikelihoodLoss Not Or PRelu Pow QuantizeLinear
    RandomNormal RandomNormalLike RandomUniform RandomUniformLike Reciprocal Relu Round Selu
    Shrink Sigmoid Sign Sin Sinh Softmax SoftmaxCrossEntropyLoss Softplus Softsign Sqrt Sub Sum
    SwiGLU Swish Tan Tanh ThresholdedRelu Where Xor
    com.microsoft:QuantizeLinear com.microsoft:DequantizeLinear com.microsoft:QLinearAdd
    com.microsoft:QLinearMul com.microsoft:QLinearSigmoid com.microsoft:QLinearLeakyRelu
    com.microsoft:QLinearSoftmax com.microsoft:QLinearWhere
reshape: AffineGrid BitCast CenterCropPad Col2Im Compress Concat ConcatFromSequence Constant
    ConstantOfShape DepthToSpace Expand Flatten Gather GatherElements GatherND GridSample
    Identity NonMaxSuppression NonZero OneHot Optional OptionalGetElement OptionalHasElement Pad
    Range Reshape Resize ReverseSequence Scatter ScatterElements ScatterND SequenceAt
    SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength Shape Size Slice
    SpaceToDepth Split SplitToSequence Squeeze TensorScatter Tile Transpose Trilu Unique
    Unsqueeze Upsample com.microsoft:QLinearConcat
control_flow: If Loop Scan SequenceMap
custom: ImageDecoder RegexFullMatch StringConcat StringNormalizer StringSplit TfIdfVectorizer
"""


def _parse_table(table: str) -> dict[str, OperatorFamily]:
    families: dict[str, OperatorFamily] = {}
    family = OperatorFamily.CUSTOM
    for line in table.strip().splitlines():
        head, colon, ops = line.strip().partition(": ")
        if colon:
            family = OperatorFamily[head.upper()]
        families.update((op, family) for op in (ops if colon else head).split())
    return families


#: Operator family of each op key (``op_key``); an op not listed is custom.
OP_FAMILIES: dict[str, OperatorFamily] = _parse_table(_FAMILY_TABLE)

#: Quantized compute ops besides the QLinear* and *Integer families.
_QUANT_OPS = frozenset(
    ["DynamicQuantizeLinear"]
    + [_MS + op for op in ("QGemm", "QAttention", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM")]
    + [_MS + "MatMulIntegerToFloat"]
)
_MATMULS = frozenset({"MatMul", "QLinearMatMul", "MatMulInteger", "Einsum"})
_INT8 = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.UINT8})
_NUMERIC_CLASS: dict[int, str] = {
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "int8",
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.DOUBLE: "fp32",
}


def op_key(node: onnx.NodeProto) -> str:
    """Return the table key of ``node``: its op type, prefixed by a non-default domain."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def op_family(node: onnx.NodeProto) -> OperatorFamily:
    """Return the operator family of ``node`` per ``OP_FAMILIES``; unknown ops are custom."""
    return OP_FAMILIES.get(op_key(node), OperatorFamily.CUSTOM)


def semantics_from_onnx(model: ModelSource) -> Semantics:
    """Return the semantics of an ONNX model; ContractError if it is not a valid model."""
    proto = _load(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, ValueError) as err:
        _log.warning("shape inference failed (%s); counting with declared shapes only", err)
        inferred = proto
    graph = inferred.graph
    shapes, dtypes = _value_types(graph)
    nodes = list(_walk(graph))
    producers = {out: node for node in nodes for out in node.output if out}
    histogram: dict[str, int] = {}
    flops = 0
    for node in nodes:
        family = op_family(node)
        if node.op_type == "Softmax" and _fed_by_matmul(node, producers):
            family = OperatorFamily.ATTENTION
        name = family.name.lower()
        histogram[name] = histogram.get(name, 0) + 1
        flops += node_flops(node, op_key(node), name, shapes)
    params = _params(graph)
    inputs = [i.name for i in graph.input if i.name not in params]
    return Semantics(
        gflops=flops / 1e9,
        param_bytes=float(sum(tensor_bytes(t) for t in params.values())),
        activation_bytes=float(_peak_live_bytes(graph, set(params), shapes, dtypes)),
        input_bytes=float(
            sum(value_bytes(dtypes.get(n, 0), shapes[n]) for n in inputs if n in shapes)
        ),
        precision=_precision(nodes, producers, dtypes, params, inputs),
        operator_histogram=dict(sorted(histogram.items())),
    )


def contract_from_onnx(
    model_path: str | os.PathLike[str], *, task_class: str | None = None, **requirement_fields: Any
) -> TaskContract:
    """Return a contract for a model file: its semantics, class (default: file stem), needs."""
    path = Path(model_path)
    requirements = {
        k: list(v) if isinstance(v, tuple) else v for k, v in requirement_fields.items()
    }
    return TaskContract.from_dict(
        {
            "semantics": asdict(semantics_from_onnx(path)),
            "requirements": requirements,
            "task_class": task_class or path.stem,
            "model": str(path),
        }
    )


def _load(model: ModelSource) -> onnx.ModelProto:
    path: Path | None = None
    if isinstance(model, onnx.ModelProto):
        proto, source = model, "<ModelProto>"
    else:
        try:
            if isinstance(model, bytes):
                source = f"<{len(model)} bytes>"
                proto = onnx.load_from_string(model)
            else:
                path = Path(model)
                source = str(path)
                if not path.is_file():
                    raise ContractError(f"model file not found: {path}")
                proto = onnx.load(path, load_external_data=False)
        except OSError as err:
            raise ContractError(f"cannot read model file {source}: {err}") from err
        except (DecodeError, ValueError, UnicodeDecodeError) as err:
            raise ContractError(f"not an ONNX model: {source}: {err}") from err
    if proto.ir_version == 0 or not proto.HasField("graph"):
        raise ContractError(f"not an ONNX model: {source}: no IR version or no graph")
    try:
        onnx.checker.check_model(str(path) if path is not None else proto)
    except onnx.checker.ValidationError as err:
        raise ContractError(f"invalid ONNX model {source}: {str(err).strip()}") from err
    return proto


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Yield the nodes of ``graph`` and, after each, those of its subgraphs."""
    for node in graph.node:
        yield node
        for sub in _subgraphs(node):
            yield from _walk(sub)


def _value_types(graph: onnx.GraphProto) -> tuple[dict[str, Dims], dict[str, int]]:
    shapes: dict[str, Dims] = {}
    dtypes: dict[str, int] = {}
    for g in [graph, *(sub for node in _walk(graph) for sub in _subgraphs(node))]:
        for info in [*g.input, *g.value_info, *g.output]:
            if not info.type.HasField("tensor_type"):
                continue
            tensor = info.type.tensor_type
            dtypes[info.name] = tensor.elem_type
            if tensor.HasField("shape"):
                shapes[info.name] = tuple(
                    d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim
                )
        for name, init in _params(g).items():
            shapes[name], dtypes[name] = tuple(init.dims), init.data_type
    return shapes, dtypes


def _params(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    params = {t.name: t for t in graph.initializer}
    params.update((s.values.name, s.values) for s in graph.sparse_initializer)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value" and node.output:
                    params[node.output[0]] = attr.t
    return params


def _peak_live_bytes(
    graph: onnx.GraphProto, params: set[str], shapes: Mapping[str, Dims], dtypes: dict[str, int]
) -> int:
    def size(name: str) -> int:
        return value_bytes(dtypes.get(name, 0), shapes[name]) if name in shapes else 0

    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        inner = (n for sub in _subgraphs(node) for n in _walk(sub))
        for name in [*node.input, *(name for n in inner for name in n.input)]:
            last_use[name] = index
    keep = {o.name for o in graph.output}
    live = {i.name: size(i.name) for i in graph.input if i.name not in params}
    total = peak = sum(live.values())
    for index, node in enumerate(graph.node):
        for name in node.output:
            if name and name not in params and name not in live:
                live[name] = size(name)
                total += live[name]
        peak = max(peak, total)
        for name in [*node.input, *node.output]:
            if name in live and name not in keep and last_use.get(name, -1) <= index:
                total -= live.pop(name)
    return peak


def _fed_by_matmul(softmax: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto]) -> bool:
    frontier, hops = list(softmax.input[:1]), 0
    while frontier and hops <= 3:
        nodes = [producers[name] for name in frontier if name in producers]
        if any(n.op_type in _MATMULS and n.domain in ("", "ai.onnx") for n in nodes):
            return True
        nodes = [n for n in nodes if op_family(n) is OperatorFamily.ELEMENTWISE]
        frontier, hops = [name for n in nodes for name in n.input], hops + 1
    return False


def _is_quantized(
    node: onnx.NodeProto, producers: Mapping[str, onnx.NodeProto], dtypes: Mapping[str, int]
) -> bool:
    key = op_key(node)
    if key in _QUANT_OPS or node.op_type.startswith("QLinear") or key.endswith("Integer"):
        return True
    if node.op_type != "DequantizeLinear" or not node.input:
        return False
    source = producers.get(node.input[0])
    return (
        source is not None
        and source.op_type == "QuantizeLinear"
        and dtypes.get(node.input[0], onnx.TensorProto.UINT8) in _INT8
    )


def _precision(
    nodes: list[onnx.NodeProto],
    producers: Mapping[str, onnx.NodeProto],
    dtypes: Mapping[str, int],
    params: Mapping[str, onnx.TensorProto],
    inputs: list[str],
) -> str:
    if any(_is_quantized(node, producers, dtypes) for node in nodes):
        return "int8"
    weights = Counter({cls: 0 for cls in _NUMERIC_CLASS.values()})
    for tensor in params.values():
        if tensor.data_type in _NUMERIC_CLASS:
            weights[_NUMERIC_CLASS[tensor.data_type]] += tensor_bytes(tensor)
    if not weights.total():
        weights.update(_NUMERIC_CLASS[dtypes[n]] for n in inputs if dtypes.get(n) in _NUMERIC_CLASS)
    return max(weights, key=lambda cls: (weights[cls], cls == "fp32"))
