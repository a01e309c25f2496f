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


class FileFieldError(InvalidInput):
    """An input file is malformed; names the file, the line (when there is one) and the field."""

    def __init__(self, path: str, field: str, problem: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: field {field!r}: {problem}")
        self.path = path
        self.field = field
        self.line = line
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
