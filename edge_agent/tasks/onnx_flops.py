"""Operation counts of ONNX nodes and byte sizes of tensors, from inferred shapes.

Conventions, so that numbers from different models compare:

* One multiply-accumulate (MAC) counts as 2 operations; bias adds are not counted.
* Conv-like ops: MACs = output elements x (input channels per group x kernel size), read from
  the inferred output shape and the weight shape, so strides, pads, dilations and groups are
  all accounted for. ConvTranspose: input elements x (output channels per group x kernel).
* Gemm / MatMul (batched, and their quantized forms): MACs = output elements x K.
* LSTM / GRU / RNN: MACs = steps x batch x (elements of W + elements of R).
* Attention (fused): MACs = L x (elements of Q + elements of the output) for the two products
  Q.K^T and P.V, plus the QKV projection for com.microsoft ``Attention``.
* Pools: one operation per window element per output (kernel ops), or one per input element
  for global pools and reductions (no kernel_shape).
* Elementwise, normalization, softmax and any other computing op: one per output element.
* Data movement (reshape family), control flow and custom ops: 0; the bodies of If / Loop /
  Scan are counted by the caller once each (trip counts are unknown).
* An unknown dimension (a symbolic batch) counts as 1; a node whose needed shapes could not be
  inferred counts 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import onnx

#: Tensor dims as inferred; None for an unknown (symbolic) dimension.
Dims = tuple[int | None, ...]
Shapes = Mapping[str, Dims]

_SUB_BYTE_BITS: dict[str, int] = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}


def numel(dims: Dims) -> int:
    """Return the element count of ``dims``, counting an unknown dimension as 1."""
    return math.prod(1 if d is None else d for d in dims)


def value_bytes(dtype: int, dims: Dims) -> int:
    """Return the bytes of a tensor of ``dtype`` and ``dims`` (sub-byte types packed)."""
    if dtype in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING):
        return 0
    name = onnx.TensorProto.DataType.Name(dtype)
    bits = _SUB_BYTE_BITS.get(name) or 8 * onnx.helper.tensor_dtype_to_np_dtype(dtype).itemsize
    return math.ceil(numel(dims) * bits / 8)


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """Return the bytes of a stored tensor (strings: their encoded length)."""
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    return value_bytes(tensor.data_type, tuple(tensor.dims))


def _dim(dims: Dims, index: int) -> int:
    value = dims[index]
    return 1 if value is None else value


def _shape(
    node: onnx.NodeProto, shapes: Shapes, index: int, *, output: bool = False
) -> Dims | None:
    names = node.output if output else node.input
    if index >= len(names) or not names[index]:
        return None
    return shapes.get(names[index])


def _ints(node: onnx.NodeProto, name: str) -> list[int]:
    for attr in node.attribute:
        if attr.name == name:
            return list(attr.ints) if attr.ints else [attr.i]
    return []


def _conv(weight_index: int) -> Callable[[onnx.NodeProto, Shapes], int]:
    def count(node: onnx.NodeProto, shapes: Shapes) -> int:
        out, w = _shape(node, shapes, 0, output=True), _shape(node, shapes, weight_index)
        if out is None or w is None or len(w) < 2:
            return 0
        return 2 * numel(out) * numel(w[1:])

    return count


def _conv_transpose(node: onnx.NodeProto, shapes: Shapes) -> int:
    x, w = _shape(node, shapes, 0), _shape(node, shapes, 1)
    if x is None or w is None or len(w) < 2:
        return 0
    return 2 * numel(x) * numel(w[1:])


def _matmul(node: onnx.NodeProto, shapes: Shapes) -> int:
    out, a = _shape(node, shapes, 0, output=True), _shape(node, shapes, 0)
    if out is None or not a:
        return 0
    transposed = (_ints(node, "transA") or [0])[0] and len(a) >= 2
    return 2 * numel(out) * _dim(a, -2 if transposed else -1)


def _einsum_letters(term: str, dims: Dims, sizes: dict[str, int]) -> None:
    left, _, right = term.partition("...")
    for letter, size in zip(left, dims, strict=False):
        sizes[letter] = 1 if size is None else size
    for letter, size in zip(reversed(right), reversed(dims), strict=False):
        sizes[letter] = 1 if size is None else size


def _einsum(node: onnx.NodeProto, shapes: Shapes) -> int:
    attr = next((a for a in node.attribute if a.name == "equation"), None)
    out = _shape(node, shapes, 0, output=True)
    if attr is None or out is None:
        return 0
    equation = attr.s.decode().replace(" ", "")
    terms, _, result = equation.partition("->")
    sizes: dict[str, int] = {}
    for index, term in enumerate(terms.split(",")):
        dims = _shape(node, shapes, index)
        if dims is None:
            return 0
        _einsum_letters(term, dims, sizes)
    if "->" not in equation:
        letters = terms.replace(",", "").replace(".", "")
        result = "".join(c for c in sorted(set(letters)) if letters.count(c) == 1)
    contracted = set(sizes) - set(result)
    return 2 * numel(out) * math.prod(sizes[c] for c in contracted)


def _recurrent(node: onnx.NodeProto, shapes: Shapes) -> int:
    x, w, r = (_shape(node, shapes, i) for i in range(3))
    if x is None or w is None or r is None or not x:
        return 0
    return 2 * numel(x[:-1]) * (numel(w) + numel(r))


def _attention(node: onnx.NodeProto, shapes: Shapes) -> int:
    q, k, out = (
        _shape(node, shapes, 0),
        _shape(node, shapes, 1),
        _shape(node, shapes, 0, output=True),
    )
    if q is None or k is None or out is None or len(k) < 3:
        return 0
    kv_len = _dim(k, -2 if len(k) == 4 else 1)
    return 2 * kv_len * (numel(q) + numel(out))


def _ms_attention(node: onnx.NodeProto, shapes: Shapes) -> int:
    x, w = _shape(node, shapes, 0), _shape(node, shapes, 1)
    if x is None or w is None or len(x) != 3 or len(w) != 2:
        return 0
    tokens, hidden = numel(x[:2]), _dim(w, 1) // 3
    return 2 * (numel(x) * _dim(w, 1) + 2 * tokens * _dim(x, 1) * hidden)


def _pool(node: onnx.NodeProto, shapes: Shapes) -> int:
    kernel = _ints(node, "kernel_shape")
    out, x = _shape(node, shapes, 0, output=True), _shape(node, shapes, 0)
    if kernel:
        return 0 if out is None else numel(out) * math.prod(kernel)
    return 0 if x is None else numel(x)


def _per_output(node: onnx.NodeProto, shapes: Shapes) -> int:
    out = _shape(node, shapes, 0, output=True)
    return 0 if out is None else numel(out)


def _nothing(node: onnx.NodeProto, shapes: Shapes) -> int:
    return 0


#: Counting rule per op key (``op_type``, or ``domain:op_type`` outside the default domain).
_BY_OP: dict[str, Callable[[onnx.NodeProto, Shapes], int]] = {
    "Conv": _conv(1),
    "ConvInteger": _conv(1),
    "DeformConv": _conv(1),
    "QLinearConv": _conv(3),
    "com.microsoft:QLinearConv": _conv(3),
    "ConvTranspose": _conv_transpose,
    "Gemm": _matmul,
    "MatMul": _matmul,
    "MatMulInteger": _matmul,
    "QLinearMatMul": _matmul,
    "com.microsoft:QGemm": _matmul,
    "com.microsoft:DynamicQuantizeMatMul": _matmul,
    "com.microsoft:MatMulIntegerToFloat": _matmul,
    "Einsum": _einsum,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNN": _recurrent,
    "com.microsoft:DynamicQuantizeLSTM": _recurrent,
    "Attention": _attention,
    "com.microsoft:MultiHeadAttention": _attention,
    "com.microsoft:Attention": _ms_attention,
    "com.microsoft:QAttention": _ms_attention,
}

#: Counting rule per operator family, for ops without their own rule.
_BY_FAMILY: dict[str, Callable[[onnx.NodeProto, Shapes], int]] = {
    "pool": _pool,
    "reshape": _nothing,
    "control_flow": _nothing,
    "custom": _nothing,
}


def node_flops(node: onnx.NodeProto, key: str, family: str, shapes: Shapes) -> int:
    """Return the operations one run of ``node`` performs (module docstring conventions)."""
    rule = _BY_OP.get(key) or _BY_FAMILY.get(family, _per_output)
    return rule(node, shapes)
