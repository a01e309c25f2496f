"""hetmesh edge agent: discovers local compute, places tasks with a C kernel, runs them."""

__version__ = "0.1.0"
