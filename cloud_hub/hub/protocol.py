"""The hub's side of the protocol: agent ids, record kinds, batch size, new credentials.

Header names and signatures are shared with the agents (``edge_agent.protocol.hub_auth``,
docs/hub-protocol.md §2).
"""

from __future__ import annotations

import re
import secrets

#: Agent ids: 1-64 of letters, digits, ``.``, ``_``, ``-``.
AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: Kinds of outbox records the hub accepts.
RECORD_KINDS = ("task", "decision", "telemetry")
#: Most records in one sync batch.
MAX_BATCH = 1000


def new_key() -> str:
    """Return a fresh fleet credential: 32 random bytes, hex."""
    return secrets.token_hex(32)
