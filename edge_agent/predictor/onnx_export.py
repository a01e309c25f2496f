"""Export a LoadModel to ONNX with onnx.helper; an IR and opset the installed onnxruntime loads.

``onnx`` (with protobuf and ml_dtypes, ~25 MB resident) is imported inside the functions that
read or write a model, so an idle agent that has validated no model does not carry it.
"""

from __future__ import annotations

import hashlib

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import FeatureSpec
from edge_agent.predictor.model import WEIGHT_NAMES, LoadModel

IR_VERSION = 10
OPSET = 21
INPUT_NAME = "features"
OUTPUT_NAME = "load_norm"


def to_onnx(
    model: LoadModel, name: str = "hetmesh-load-predictor", metadata: dict[str, str] | None = None
) -> bytes:
    """Serialized, checker-valid ONNX for the model: (n, F) float32 -> (n, 1) float32."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.asarray(w, dtype=np.float32), name=n)
        for n, w in zip(WEIGHT_NAMES, model.get_weights(), strict=True)
    ]
    nodes = [
        helper.make_node("MatMul", [INPUT_NAME, "w_lin"], ["lin_mm"]),
        helper.make_node("Add", ["lin_mm", "b_lin"], ["lin"]),
        helper.make_node("MatMul", [INPUT_NAME, "w1"], ["h_mm"]),
        helper.make_node("Add", ["h_mm", "b1"], ["h_pre"]),
        helper.make_node("Relu", ["h_pre"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["mlp"]),
        helper.make_node("Add", ["lin", "mlp"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["n", model.n_features])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["n", 1])],
        initializer=inits,
    )
    proto = helper.make_model(
        graph,
        producer_name="hetmesh",
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(proto, full_check=True)
    return bytes(proto.SerializeToString())


def from_onnx(data: bytes) -> LoadModel:
    """The LoadModel an exported file holds (its initializers, as float64); InvalidInput if not."""
    import onnx
    from onnx import numpy_helper

    try:
        proto = onnx.load_from_string(data)
    except Exception as err:  # onnx raises several unrelated types for bad bytes
        raise InvalidInput(f"not a valid ONNX model: {err}") from err
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    try:
        weights = [inits[n] for n in WEIGHT_NAMES]
    except KeyError as err:
        raise InvalidInput(f"model lacks initializer {err.args[0]!r}") from err
    if weights[2].ndim != 2:
        raise InvalidInput(f"model weight w1 has shape {weights[2].shape}, expected (F, hidden)")
    model = LoadModel(*weights[2].shape)
    model.set_weights(weights)  # shapes and finiteness checked
    return model


def read_metadata(data: bytes) -> dict[str, str]:
    """The metadata_props of a serialized model; a clear error if it is not ONNX."""
    import onnx

    try:
        proto = onnx.load_from_string(data)
        onnx.checker.check_model(proto)
    except Exception as err:  # onnx raises several unrelated types for bad bytes
        raise InvalidInput(f"not a valid ONNX model: {err}") from err
    return {p.key: p.value for p in proto.metadata_props}


def digest(data: bytes) -> str:
    """sha256 hex of a serialized model, its version identity."""
    return hashlib.sha256(data).hexdigest()


_SPEC_KEYS = ("window", "horizon", "bucket_s", "period_s", "floor")


def spec_metadata(spec: FeatureSpec) -> dict[str, str]:
    """The FeatureSpec as ONNX metadata, so a shipped model says how to feed it."""
    return {f"hetmesh.{k}": repr(getattr(spec, k)) for k in _SPEC_KEYS}


def spec_from_metadata(meta: dict[str, str]) -> FeatureSpec:
    """The FeatureSpec a shipped model was trained with; names a missing key."""
    try:
        raw = {k: float(meta[f"hetmesh.{k}"]) for k in _SPEC_KEYS}
    except KeyError as err:
        raise InvalidInput(f"model metadata lacks {err.args[0]!r}") from err
    except ValueError as err:
        raise InvalidInput(f"model metadata value is not a number: {err}") from err
    return FeatureSpec(
        window=int(raw["window"]),
        horizon=int(raw["horizon"]),
        bucket_s=raw["bucket_s"],
        period_s=raw["period_s"],
        floor=raw["floor"],
    )
