"""cffi out-of-line build of the placement kernel (wired into ``pip install`` by setup.py)."""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

HEADER = HERE / "hetmesh_kernel.h"  # the public contract, the one cffi reads

# the kernel's files, one concern each (hetmesh_internal.h lists what each holds)
SOURCES = [
    HERE / "hetmesh_input_checks.c",
    HERE / "hetmesh_place.c",
    HERE / "hetmesh_bound_call.c",
    HERE / "hetmesh_live.c",
]
HEADERS = [HEADER, HERE / "hetmesh_internal.h"]


def api_declarations(header: Path = HEADER) -> str:
    """Return the header's public declarations (between cffi:begin and cffi:end)."""
    text = header.read_text()
    start = text.index("/* cffi:begin")
    start = text.index("*/", start) + 2
    return text[start : text.index("/* cffi:end */")]


CDEF = api_declarations()

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "edge_agent.placement._kernel",
    '#include "hetmesh_kernel.h"',
    # setuptools wants paths relative to the project root, where pip runs the build
    sources=[os.path.relpath(source) for source in SOURCES],
    include_dirs=[os.path.relpath(HERE)],
    # a header-only change (a cost-model constant, the ABI version, an internal declaration)
    # must rebuild as well: setuptools otherwise reuses an object in build/ older than it
    depends=[os.path.relpath(header) for header in HEADERS],
    extra_compile_args=["-std=c99", "-O3", "-ffp-contract=off", "-fno-fast-math"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
