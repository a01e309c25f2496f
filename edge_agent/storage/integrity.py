"""Is the database file fit to open? A marker of its existence, and ``PRAGMA quick_check``.

Once a database has been opened, a marker file beside it (``agent.db.exists``) records that it
existed. A database missing or empty while its marker is there was lost (truncated, deleted),
not new: opening it would silently start an empty agent, so it is refused instead. A file
SQLite cannot read, or whose ``quick_check`` finds damage, is refused the same way. Each
refusal names the file and the two ways on: restore it from a backup, or salvage it
(``salvage.repair``: ``edge-agent repair`` / ``cloud-hub repair``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path

from edge_agent.errors import HetmeshError

#: Problems ``quick_check`` reports at most (the first few say enough).
CHECK_PROBLEMS = 5


class DatabaseDamaged(HetmeshError):
    """The database file is damaged or was lost; the service refuses to start on it."""


def marker_path(path: Path) -> Path:
    """Return the file beside ``path`` that says the database existed."""
    return path.with_name(path.name + ".exists")


def mark_existing(path: Path) -> None:
    """Record (once) that ``path`` exists and holds a database."""
    marker = marker_path(path)
    if marker.exists():
        return
    tmp = marker.with_name(marker.name + ".tmp")
    doc = {"database": path.name, "created_at": time.time()}
    tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    os.replace(tmp, marker)


def forget_existing(path: Path) -> None:
    """Remove the marker (the database is being replaced or deliberately started anew)."""
    with contextlib.suppress(FileNotFoundError):
        marker_path(path).unlink()


def refusal(path: Path, what: str, repair: str) -> DatabaseDamaged:
    """Return the error that refuses ``path`` because of ``what``, with the steps to take."""
    steps = f"restore {path} from a backup"
    if repair:
        steps += f", or run `{repair}` to salvage what is readable (the damaged file is kept)"
    return DatabaseDamaged(f"database {path} {what}; not starting on it: {steps}")


def problems(path: Path) -> list[str]:
    """Return what ``PRAGMA quick_check`` finds wrong in ``path`` (empty: fit to open)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None)
    except sqlite3.Error as err:
        return [str(err)]
    try:
        rows = conn.execute(f"PRAGMA quick_check({CHECK_PROBLEMS})").fetchall()
    except sqlite3.DatabaseError as err:  # not a database, or its header/schema is unreadable
        return [str(err)]
    finally:
        conn.close()
    return [" ".join(str(r[0]).split()) for r in rows if r[0] != "ok"]  # one line each


def check_at_open(path: Path, repair: str) -> None:
    """Raise DatabaseDamaged unless ``path`` is new, or exists and passes ``quick_check``."""
    size = path.stat().st_size if path.exists() else None
    marker = marker_path(path)
    if not size:
        if marker.exists():
            what = "is missing" if size is None else "is empty (0 bytes)"
            raise refusal(path, f"{what} but existed before ({marker} says so)", repair)
        return  # a new database
    found = problems(path)
    if found:
        raise refusal(path, f"is damaged (quick_check: {'; '.join(found)})", repair)
