"""Ids like git's: a whole id, or a unique prefix of one (4+ characters), names one thing.

Used for every id a route or command takes: tasks (agent), model versions and learning runs
(hub). A whole id is never ambiguous, even where it prefixes another.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from edge_agent.http_errors import ApiError

#: The shortest id prefix taken (git's rule: short prefixes are ambiguous too often).
MIN_PREFIX = 4
#: Matches counted in an "ambiguous" answer before it says "more than".
MAX_SHOWN = 10


def ids_starting(given: str, ids: Iterable[str], limit: int = MAX_SHOWN + 1) -> list[str]:
    """The ids that start with ``given`` (sorted, at most ``limit``); the exact one alone."""
    found = sorted(i for i in ids if i.startswith(given))
    return [given] if given in found else found[:limit]


def resolve_id(given: str, matches: Sequence[str], what: str) -> str:
    """Return the whole id ``given`` names; ApiError 404 saying why when it names none.

    ``matches``: the ids that start with ``given`` (``ids_starting``, or a store's query with
    the same contract: the exact id alone when there is one, else up to MAX_SHOWN + 1).
    ``what`` names the kind in the answer: ``no task 'x'``, ``ambiguous: 3 tasks start with
    'abcd'; give more characters``.
    """
    if matches and matches[0] == given:
        return given
    if len(given) < MIN_PREFIX:
        raise ApiError(404, f"no {what} {given!r} (an id prefix needs {MIN_PREFIX}+ characters)")
    if not matches:
        raise ApiError(404, f"no {what} {given!r}")
    if len(matches) > 1:
        many = f"{len(matches)}" if len(matches) <= MAX_SHOWN else f"more than {MAX_SHOWN}"
        raise ApiError(404, f"ambiguous: {many} {what}s start with {given!r}; give more characters")
    return matches[0]
