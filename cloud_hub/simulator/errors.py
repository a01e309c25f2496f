"""The simulator's input error: names the file, the line (when there is one) and the field."""

from __future__ import annotations

from edge_agent.errors import InvalidInput


class SimulationInputError(InvalidInput):
    """A fleet or workload file is malformed; the message says where and what to fix."""

    def __init__(self, path: str, field: str, problem: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: field {field!r}: {problem}")
        self.path = path
        self.field = field
        self.line = line
        self.problem = problem
