"""The kernel's build script compiles every C file of native/ and depends on every header."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

NATIVE = (Path(__file__).parents[1] / "native").resolve()


def kernel_extension(tmp_path: Path) -> Any:
    """Return the extension native/build_kernel.py describes (cffi writes its glue to tmp_path)."""
    spec = importlib.util.spec_from_file_location("build_kernel", NATIVE / "build_kernel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffibuilder.distutils_extension(tmpdir=str(tmp_path), verbose=False)


def test_every_c_file_of_native_is_compiled(tmp_path: Path) -> None:
    sources = {Path(s).resolve() for s in kernel_extension(tmp_path).sources}
    c_files = set(NATIVE.glob("*.c"))
    assert len(c_files) > 1
    assert c_files <= sources


def test_every_header_of_native_rebuilds_the_kernel(tmp_path: Path) -> None:
    # setuptools rebuilds on a change to a file in depends only: a header-only change must
    depends = {Path(s).resolve() for s in kernel_extension(tmp_path).depends}
    headers = set(NATIVE.glob("*.h"))
    assert {NATIVE / "hetmesh_kernel.h", NATIVE / "hetmesh_internal.h"} <= headers
    assert headers <= depends
