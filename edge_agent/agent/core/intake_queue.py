"""Single submissions that arrive together are stored together: one write, one transaction.

Every ``POST /v1/tasks`` handler that reaches ``submit`` in the same event-loop iteration
joins one group; the group is handed to ``Agent.submit`` as one list (one store op, one
commit, one scheduler wake-up), and each handler resumes with its own row once that commit
returned, as durable as before. If the group fails (an Idempotency-Key reused with another
body: the store op rolled back), its tasks are submitted again one by one, so each caller gets
its own answer and one bad request cannot refuse its neighbours; any other failure is every
caller's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from edge_agent.agent.core.intake import NewTask
from edge_agent.errors import InvalidInput

_log = logging.getLogger(__name__)

Stored = tuple[dict[str, Any], bool]
Submit = Callable[[list[NewTask]], Awaitable[list[Stored]]]
#: Told a submission's outcome once its group's commit returned: (row, created), or the error.
Done = Callable[[Stored | None, Exception | None], None]


class SubmitCoalescer:
    """Groups concurrent single submissions into one ``submit`` call per loop iteration."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit
        self._pending: list[tuple[NewTask, Done]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.groups = 0  # groups submitted (for tests and figures)

    async def submit(self, task: NewTask) -> Stored:
        """Store ``task`` with whatever else arrived in this iteration; return (row, created)."""
        return await self.enqueue(task)

    def enqueue(self, task: NewTask) -> asyncio.Future[Stored]:
        """``submit`` without a coroutine: the future resolves to (row, created) once the
        group's commit returned (or fails as ``submit`` raises)."""
        future: asyncio.Future[Stored] = asyncio.get_running_loop().create_future()
        self.then(task, partial(_answer, future))
        return future

    def then(self, task: NewTask, done: Done) -> None:
        """``enqueue`` without a future: ``done`` is called from the loop (it must not
        raise) once the group's commit returned, or with the error the group failed with.
        A caller that answers from there saves a future and a loop callback per task."""
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append((task, done))

    def _flush(self) -> None:
        group, self._pending = self._pending, []
        if group:
            job = asyncio.get_running_loop().create_task(self._store(group))
            self._tasks.add(job)
            job.add_done_callback(self._tasks.discard)

    async def _store(self, group: list[tuple[NewTask, Done]]) -> None:
        self.groups += 1
        try:
            results = await self._submit([task for task, _ in group])
        except Exception as err:
            if len(group) == 1 or not isinstance(err, InvalidInput):  # not one bad request
                for _, done in group:
                    done(None, err)
                return
            _log.debug("a group of %s submissions failed (%s); one by one", len(group), err)
            await asyncio.gather(*(self._store([one]) for one in group))
            return
        # told from the loop's next turn, as futures' callbacks would be: the scheduler,
        # woken by this group, takes it to the kernel first, then the 202s are written
        asyncio.get_running_loop().call_soon(_tell, group, results)

    async def drain(self) -> None:
        """Wait for the groups in flight (before the store closes)."""
        while self._pending or self._tasks:
            self._flush()
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _tell(group: list[tuple[NewTask, Done]], results: list[Stored]) -> None:
    """Tell each caller of a stored group its (row, created)."""
    for (_, done), stored in zip(group, results, strict=True):
        done(stored, None)


def _answer(future: asyncio.Future[Stored], value: Stored | None, err: Exception | None) -> None:
    """Resolve a caller's future unless it gave up (its request was cancelled)."""
    if future.done():
        return
    if err is not None:
        future.set_exception(err)
    elif value is not None:
        future.set_result(value)
