"""Which SuperNode key each agent may train with: one registered key per agent, the old one revoked.

An agent reports its SuperNode public key in its signed learning poll; the hub registers it
with the SuperLink (``flwr supernode register``) before telling the agent to start its
SuperNode. When the same agent reports a *different* key (it made a new key pair, or the
operator re-enrolled a stolen box's id on a new box), the new key is registered first and the
node of the old key is then unregistered (``flwr supernode unregister <node id>``), so a copy
of the old private key (a stolen box) can no longer join a run.

What was registered is kept in ``<state_dir>/node-keys/<agent id>.json`` (the key and the
SuperLink's node id), so a restarted hub still knows which node to revoke. A key the SuperLink
already holds but this file does not (registered before node ids were kept) cannot be revoked
by id; that is logged.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cloud_hub.learning.superlink import FederationError
from edge_agent.errors import InvalidInput

log = logging.getLogger(__name__)

_AGENT_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")  # also the record's file name


class NodeRegistrar(Protocol):
    """The two SuperLink calls this needs (``SuperLink`` has them)."""

    def register_supernode(self, public_key: Path) -> int | None: ...

    def unregister_supernode(self, node_id: int) -> None: ...


@dataclass(frozen=True)
class Registered:
    """An agent's registered key, its node id (None: unknown) and old nodes not yet revoked."""

    public_key: str
    node_id: int | None
    revoke: tuple[int, ...] = ()


def check_public_key(public_key: str) -> str:
    """Return the key line stripped, or raise InvalidInput unless it is one OpenSSH ecdsa key."""
    key = public_key.strip()
    if not key.startswith("ecdsa-sha2-") or "\n" in key or len(key) > 1024:
        raise InvalidInput("supernode_public_key: expected one OpenSSH ecdsa public key line")
    return key


class NodeKeys:
    """Registers agents' SuperNode keys, one per agent, revoking the one it replaces."""

    def __init__(self, folder: Path) -> None:
        """Keep the records in ``folder`` (created)."""
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._locks: dict[str, threading.Lock] = {}  # one per agent: agents register at once
        self._locks_lock = threading.Lock()

    def registered(self, agent_id: str) -> Registered | None:
        """What is registered for ``agent_id`` (None: nothing, or an unreadable record)."""
        try:
            doc = json.loads((self.folder / f"{agent_id}.json").read_text(encoding="utf-8"))
            node_id = doc.get("node_id")
            return Registered(
                str(doc["public_key"]),
                None if node_id is None else int(node_id),
                tuple(int(n) for n in doc.get("revoke", ())),
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            log.warning("SuperNode key record of %s unreadable: %s", agent_id, err)
            return None

    def register(self, link: NodeRegistrar, agent_id: str, public_key: str) -> Registered:
        """Register ``public_key`` for ``agent_id`` (blocking CLI calls); revoke a replaced key."""
        key = check_public_key(public_key)
        if not _AGENT_ID.fullmatch(agent_id):
            raise InvalidInput(f"agent id {agent_id[:80]!r}: expected 1-128 of A-Z a-z 0-9 . _ -")
        with self._locks_lock:
            lock = self._locks.setdefault(agent_id, threading.Lock())
        with lock:
            before = self.registered(agent_id)
            if before is not None and before.public_key == key:
                return self._revoke(link, agent_id, before)  # retries what failed before
            path = self.folder / f"{agent_id}.pub"
            path.write_text(key + "\n", encoding="utf-8")
            try:
                node_id = link.register_supernode(path)
            except FederationError as err:  # kept by the SuperLink across a hub restart
                if "already" not in str(err).lower():
                    raise
                node_id = None
            old: tuple[int, ...] = ()
            if before is not None:
                old = before.revoke + (() if before.node_id is None else (before.node_id,))
                if before.node_id is None:
                    log.warning(
                        "agent %s has a new SuperNode key; the old key's node id is unknown, so "
                        "the SuperLink still accepts it (`flwr supernode unregister <id>`)",
                        agent_id,
                    )
            now = Registered(key, node_id, old)
            self._save(agent_id, now)
            log.info("registered SuperNode key of agent %s (node %s)", agent_id, node_id)
            return self._revoke(link, agent_id, now)

    def _revoke(self, link: NodeRegistrar, agent_id: str, entry: Registered) -> Registered:
        """Unregister the nodes of replaced keys; keep the ones that failed for the next call."""
        left: list[int] = []
        for node_id in entry.revoke:
            try:
                link.unregister_supernode(node_id)
            except FederationError as err:
                log.error("agent %s: SuperNode %s not unregistered yet: %s", agent_id, node_id, err)
                left.append(node_id)
            else:
                log.info("agent %s: old SuperNode key unregistered (node %s)", agent_id, node_id)
        if tuple(left) == entry.revoke:
            return entry
        now = Registered(entry.public_key, entry.node_id, tuple(left))
        self._save(agent_id, now)
        return now

    def _save(self, agent_id: str, entry: Registered) -> None:
        path = self.folder / f"{agent_id}.json"
        tmp = path.with_suffix(".tmp")
        doc = {"public_key": entry.public_key, "node_id": entry.node_id, "revoke": entry.revoke}
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        tmp.replace(path)
