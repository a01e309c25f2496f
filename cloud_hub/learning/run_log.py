"""Who took part in a training run, read from Flower's own record of it: the run's log.

The strategy logs each round's replies (``[ROUND r/N]``, then ``aggregate_train: Received n
results and m failures`` and the same for ``aggregate_evaluate``); the hub streams that log to
``SuperLink.run_log(run_id)`` while it waits for the run. A run's node count is the most
nodes that replied with a result in one round, not the SuperNode keys registered when the run
was submitted (agents register while rounds are wanted, and a registered node may never
connect or may time out).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROUND = re.compile(r"\[ROUND (\d+)/\d+\]")
_REPLIES = re.compile(r"aggregate_(train|evaluate): Received (\d+) results and (\d+) failures")


class RoundReplies(TypedDict):
    """One round's replies: results (and failures) to its train and evaluate messages."""

    round: int
    train: int
    train_failures: int
    evaluate: int
    evaluate_failures: int


def round_replies(text: str) -> list[RoundReplies]:
    """Each round's replies, in round order, from a run's ServerApp log."""
    rounds: dict[int, RoundReplies] = {}
    current: RoundReplies | None = None
    for line in _ANSI.sub("", text).splitlines():
        if m := _ROUND.search(line):
            r = int(m.group(1))
            current = rounds.setdefault(
                r, RoundReplies(round=r, train=0, train_failures=0, evaluate=0, evaluate_failures=0)
            )
        elif (m := _REPLIES.search(line)) and current is not None:
            kind = m.group(1)
            current[kind] = int(m.group(2))  # type: ignore[literal-required]
            current[f"{kind}_failures"] = int(m.group(3))  # type: ignore[literal-required]
    return [rounds[r] for r in sorted(rounds)]


def read_round_replies(path: Path) -> list[RoundReplies]:
    """round_replies of a run log file; [] when there is none (the run never started)."""
    try:
        return round_replies(path.read_text(errors="replace"))
    except FileNotFoundError:
        return []


def nodes_taking_part(rounds: list[RoundReplies]) -> int:
    """The most nodes that replied with a result to one round's messages."""
    return max((max(r["train"], r["evaluate"]) for r in rounds), default=0)
