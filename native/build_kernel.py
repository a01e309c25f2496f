"""cffi out-of-line build of the placement kernel (wired into ``pip install`` by setup.py)."""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

CDEF = """
int hm_abi_version(void);
int hm_place_batch(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
                   const double *weights, const double *corrections, int32_t n_classes,
                   double *scratch, double *out, uint8_t *reasons, int32_t *bad_index);
typedef struct {
    double *devices;
    int32_t n_dev;
    const double *tasks;
    const double *weights;
    const double *corrections;
    int32_t n_classes;
    double *scratch;
    double *out;
    uint8_t *reasons;
    int32_t bad_index;
} hm_call;
int hm_place_bound(hm_call *call, int32_t n_task);
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "edge_agent.placement._kernel",
    '#include "hetmesh_kernel.h"',
    # setuptools wants paths relative to the project root, where pip runs the build
    sources=[os.path.relpath(HERE / "hetmesh_kernel.c")],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-std=c99", "-O3", "-ffp-contract=off", "-fno-fast-math"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
