"""The packaged example models (package data ``edge_agent.models``): where they are, by name."""

from __future__ import annotations

from pathlib import Path

from edge_agent.package_data import package_data_dir

_PACKAGE = "edge_agent.models"


def models_dir() -> Path:
    """Return the folder of example models: the installed package data, else the checkout's."""
    return package_data_dir(_PACKAGE, "models")


def example_models() -> list[str]:
    """Return the sorted names (file stems) of the example ``*.onnx`` models."""
    return sorted(p.stem for p in models_dir().glob("*.onnx") if p.is_file())


def example_model(name: str) -> Path | None:
    """Return the file of example model ``name`` ("tiny_cnn_int8"), or None if there is none."""
    path = models_dir() / f"{name.removesuffix('.onnx')}.onnx"
    return path if "/" not in name and path.is_file() else None
