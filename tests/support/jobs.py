"""A placed ``Job`` for the tests that queue work without the scheduler (preemption, overrun)."""

from __future__ import annotations

import math
from typing import Any

from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.waiting import Waiting
from edge_agent.placement import Decision


def placed_job(task_id: str, decision: Decision, **fields: Any) -> Job:
    """Return ``task_id`` placed by ``decision``: no command, no deadline."""
    return Job(Waiting(task_id, decision.task, None, 0.0, math.inf, "queued"), decision, **fields)
