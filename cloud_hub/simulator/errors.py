"""The simulator's input error: names the file, the line (when there is one) and the field."""

from __future__ import annotations

from edge_agent.errors import FileFieldError


class SimulationInputError(FileFieldError):
    """A fleet or workload file is malformed; the message says where and what to fix."""
