"""The packaged example models (package data ``edge_agent.models``): where they are, by name."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PACKAGE = "edge_agent.models"


def models_dir() -> Path:
    """Return the folder of example models: the installed package data, else the checkout's."""
    try:
        spec = importlib.util.find_spec(_PACKAGE)
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    return Path(__file__).resolve().parents[2] / "models"


def example_models() -> list[str]:
    """Return the sorted names (file stems) of the example ``*.onnx`` models."""
    return sorted(p.stem for p in models_dir().glob("*.onnx") if p.is_file())


def example_model(name: str) -> Path | None:
    """Return the file of example model ``name`` ("tiny_cnn_int8"), or None if there is none."""
    path = models_dir() / f"{name.removesuffix('.onnx')}.onnx"
    return path if "/" not in name and path.is_file() else None
