"""A fleet of member processes on a fresh ``netns.Lan`` for one test, and the helpers tests
use to watch it (``wait_for``, ``ledger_rows``). Test infrastructure (needs root).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.netns import Lan
from edge_agent.mesh.netns_processes import start_spoofer


def ledger_rows(path: Path, key: str) -> list[tuple[str, int, str, str]]:
    """Return a mesh ledger's (role, attempt, target, state) rows for ``key``, by attempt."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT role, attempt, target, state FROM mesh_ledger WHERE key = ? ORDER BY attempt",
            (key,),
        ).fetchall()
    return [(str(r), int(a), str(t), str(s)) for r, a, t, s in rows]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Return ``check()``'s first truthy value, polling; AssertionError naming ``what`` if none."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class Member(Protocol):
    """A member process: ``NodeProcess`` or ``AgentProcess``."""

    def wait_ready(self, timeout_s: float = ...) -> None: ...

    def stop(self) -> None: ...


M = TypeVar("M", bound=Member)
#: Starts a member: (namespace, workdir, agent id, profile, address, key file, settings).
Start = Callable[[str, Path, str, str, str, Path, dict[str, object]], M]


class Fleet(Generic[M]):
    """Members on hosts 0..n-1 of ``lan`` holding the fleet key, and on host n a spoofer that
    shows the fleet's fingerprint without its key (its ledger: ``spoof_ledger``)."""

    def __init__(
        self,
        lan: Lan,
        work: Path,
        start: Start[M],
        hosts: Sequence[tuple[str, str]],
        key_text: str,
        settings: dict[str, object],
    ) -> None:
        self.lan, self.work = lan, work
        key_file = work / "fleet.key"
        key_file.write_text(key_text, encoding="utf-8")
        self.members: dict[str, M] = {}
        self.spoof_ledger = work / "npu-spoof.db"
        n, fingerprint = len(hosts), FleetKey(key_text).fingerprint
        self.spoofer = start_spoofer(lan.ns(n), lan.address(n), fingerprint, self.spoof_ledger)
        try:
            for i, (agent_id, profile) in enumerate(hosts):
                self.members[agent_id] = start(
                    lan.ns(i), work, agent_id, profile, lan.address(i), key_file, settings
                )
            for member in self.members.values():
                member.wait_ready()
        except BaseException:
            self.close()
            raise

    def host(self, agent_id: str) -> int:
        """Return the host number (for ``lan.link``) of member ``agent_id``."""
        return list(self.members).index(agent_id)

    def close(self) -> None:
        """Stop every member and the spoofer."""
        for member in self.members.values():
            member.stop()
        if self.spoofer.poll() is None:
            self.spoofer.kill()
        self.spoofer.wait(5)


@contextlib.contextmanager
def start_fleet(
    start: Start[M],
    hosts: Sequence[tuple[str, str]],
    key_text: str,
    settings: dict[str, object],
) -> Iterator[Fleet[M]]:
    """Yield a ``Fleet`` on a fresh LAN of ``len(hosts) + 1`` hosts; remove it all after.

    Raises NetnsUnavailable (before starting anything) where namespaces cannot be made.
    """
    lan = Lan(hosts=len(hosts) + 1)
    work = Path(tempfile.mkdtemp(prefix="hmnetns-"))  # short: Unix socket paths are limited
    try:
        fleet = Fleet(lan, work, start, hosts, key_text, settings)
        try:
            yield fleet
        finally:
            fleet.close()
    finally:
        lan.close()
        shutil.rmtree(work, ignore_errors=True)
