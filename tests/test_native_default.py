"""The installed package uses the compiled kernel by default (the twin only when forced)."""

from __future__ import annotations

import pytest

from edge_agent.placement import Placer, default_backend, native_available


def test_the_compiled_kernel_is_installed() -> None:
    """pip install compiled native/ into edge_agent.placement._kernel."""
    assert native_available(), "the cffi kernel did not build or install: check gcc and cffi"


def test_native_is_the_default_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without HETMESH_PURE_PYTHON a Placer runs on the native kernel."""
    monkeypatch.delenv("HETMESH_PURE_PYTHON", raising=False)
    assert default_backend() == "native"
    assert Placer([]).backend == "native"


def test_the_environment_variable_forces_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    """HETMESH_PURE_PYTHON=1 selects the pure-Python twin."""
    monkeypatch.setenv("HETMESH_PURE_PYTHON", "1")
    assert Placer([]).backend == "python"
