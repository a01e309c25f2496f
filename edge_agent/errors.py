"""The exceptions hetmesh raises; the class says what the caller does next."""

from __future__ import annotations


class HetmeshError(Exception):
    """Base of every error hetmesh raises on purpose."""


class InvalidInput(HetmeshError, ValueError):
    """The caller gave bad input; the message says what to fix. Do not retry as is."""


class ProfileError(InvalidInput):
    """A firmware profile file is malformed; names the file and the field."""

    def __init__(self, path: str, field: str, problem: str) -> None:
        super().__init__(f"{path}: field {field!r}: {problem}")
        self.path = path
        self.field = field
        self.problem = problem


class ContractError(InvalidInput):
    """A task contract or model is invalid; names the field."""


class PolicyError(InvalidInput):
    """A policy document is invalid; names the field."""


class KernelError(HetmeshError):
    """The placement kernel refused its input (a status code, never a crash)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"placement kernel status {status}: {message}")
        self.status = status


class ProbeError(HetmeshError):
    """Probing this machine failed in a way that is not simply 'device absent'."""
