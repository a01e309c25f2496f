"""An in-process Flower Grid: the real strategy and ClientApp, with direct calls for transport."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

log = logging.getLogger(__name__)

CLIENT_ERROR_CODE = 1


class LocalGrid(Grid):
    """Delivers each message to a ClientApp in this process; offline nodes never reply."""

    def __init__(
        self,
        app: ClientApp,
        node_configs: dict[int, dict[str, object]],
        run_config: dict[str, object] | None = None,
    ) -> None:
        """One node per entry of node_configs (node id -> its node config)."""
        self._app = app
        self._run = Run.create_empty(run_id=1)
        self._contexts = {
            nid: Context(
                run_id=1,
                node_id=nid,
                node_config=dict(cfg),  # type: ignore[arg-type]
                state=RecordDict(),
                run_config=dict(run_config or {}),  # type: ignore[arg-type]
            )
            for nid, cfg in node_configs.items()
        }
        self.offline: set[int] = set()
        self._replies: dict[str, Message] = {}
        self.delivered: list[int] = []
        # messages take their sender from the process-wide task identity, as in Flower's
        # own in-process server: this process acts as the ServerApp task of run 1
        TaskIdentity.task_id = 1
        TaskIdentity.run_id = self._run.run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID

    def set_run(self, run: Run) -> None:
        """Adopt the run this grid serves."""
        self._run = run

    @property
    def run(self) -> Run:
        """The run this grid serves."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """A message to one node (Flower's deprecated helper, kept for the interface)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """Every node that is connected, including those that will not answer in time."""
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Run each message's ClientApp handler now; offline nodes swallow theirs."""
        ids = []
        for msg in messages:
            msg_id = str(uuid4())
            msg.metadata.__dict__["_message_id"] = msg_id
            ids.append(msg_id)
            nid = msg.metadata.dst_node_id
            if nid in self.offline or nid not in self._contexts:
                continue
            self.delivered.append(nid)
            try:
                self._replies[msg_id] = self._app(msg, self._contexts[nid])
            except Exception as err:  # a ClientApp failure becomes an error reply, as in Flower
                log.warning("node %s failed: %s", nid, err)
                self._replies[msg_id] = Message(Error(CLIENT_ERROR_CODE, str(err)), reply_to=msg)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Replies that exist for these message ids (none from offline nodes)."""
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push, then collect what answered; an offline node counts as timed out at once."""
        return self.pull_messages(self.push_messages(messages))
