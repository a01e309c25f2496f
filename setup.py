"""Build hook: compiles the C placement kernel through cffi (metadata is in pyproject.toml)."""

from setuptools import setup

setup(cffi_modules=["native/build_kernel.py:ffibuilder"])
