"""One SuperNode key per agent: a new key is registered and the one it replaces is revoked.

Before, the hub registered every key an agent reported and never removed any, so the copy of
an old private key on a stolen (or retired) box could still join runs after the agent's id was
re-enrolled on a new box with a new key.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cloud_hub.learning.localfed import gated_superlink
from cloud_hub.learning.node_keys import NodeKeys
from cloud_hub.learning.pki import make_node_key
from cloud_hub.learning.superlink import FederationError
from edge_agent.errors import InvalidInput


def _key(tmp: Path, name: str) -> str:
    return make_node_key(tmp / name, name).public.read_text()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_new_key_unregisters_the_old_node_on_a_real_superlink(tmp_path: Path) -> None:
    first, second, third = (_key(tmp_path, n) for n in ("k1", "k2", "k3"))
    async with gated_superlink(tmp_path) as (link, _):
        keys = NodeKeys(tmp_path / "node-keys")
        one = await asyncio.to_thread(keys.register, link, "box1", first)
        again = await asyncio.to_thread(keys.register, link, "box1", first)
        assert again == one and one.node_id is not None  # the same key: nothing new
        two = await asyncio.to_thread(keys.register, link, "box1", second)
        assert two.node_id not in (None, one.node_id) and two.revoke == ()
        status = {int(n["node-id"]): n["status"] for n in await asyncio.to_thread(link.supernodes)}
        assert status[one.node_id] == "unregistered" and status[two.node_id] == "registered"

        # A restarted hub reads what it registered and still revokes the replaced key.
        restarted = NodeKeys(tmp_path / "node-keys")
        assert restarted.registered("box1") == two
        three = await asyncio.to_thread(restarted.register, link, "box1", third)
        status = {int(n["node-id"]): n["status"] for n in await asyncio.to_thread(link.supernodes)}
        assert status[two.node_id] == "unregistered" and status[three.node_id] == "registered"
        other = await asyncio.to_thread(restarted.register, link, "box2", first)
        assert other.node_id is None or other.node_id != one.node_id  # another agent, its own


class _FlakyLink:
    """Gives node ids in order; the first ``fail`` unregister calls fail like a busy SuperLink."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.next_id = 100
        self.unregistered: list[int] = []

    def register_supernode(self, public_key: Path) -> int | None:
        self.next_id += 1
        return self.next_id

    def unregister_supernode(self, node_id: int) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise FederationError("`flwr supernode unregister` gave no answer in 30 s")
        self.unregistered.append(node_id)


def test_an_unregister_that_failed_is_retried_on_the_agents_next_report(tmp_path: Path) -> None:
    link = _FlakyLink(fail=1)
    keys = NodeKeys(tmp_path)
    keys.register(link, "box1", "ecdsa-sha2-nistp384 AAAA one")
    now = keys.register(link, "box1", "ecdsa-sha2-nistp384 AAAA two")
    assert now.revoke == (101,) and link.unregistered == []  # kept, not forgotten
    assert NodeKeys(tmp_path).registered("box1") == now  # and on disk
    later = keys.register(link, "box1", "ecdsa-sha2-nistp384 AAAA two")  # the next poll
    assert later.revoke == () and link.unregistered == [101]


@pytest.mark.parametrize(
    ("agent_id", "key", "needle"),
    [
        ("box1", "ssh-rsa AAAA", "one OpenSSH ecdsa public key line"),
        ("box1", "ecdsa-sha2-nistp384 A\necdsa-sha2-nistp384 B", "one OpenSSH ecdsa"),
        ("../etc/x", "ecdsa-sha2-nistp384 AAAA", "agent id"),
        (".hidden", "ecdsa-sha2-nistp384 AAAA", "agent id"),
    ],
)
def test_a_bad_key_or_agent_id_is_refused_before_the_superlink_is_asked(
    tmp_path: Path, agent_id: str, key: str, needle: str
) -> None:
    link = _FlakyLink(fail=0)
    with pytest.raises(InvalidInput, match=needle):
        NodeKeys(tmp_path / "keys").register(link, agent_id, key)
    assert link.next_id == 100 and list((tmp_path / "keys").iterdir()) == []
