"""``edge-agent repair`` / ``cloud-hub repair``: salvage what is readable from a damaged database.

What it does, in order:

1. A database that passes ``PRAGMA quick_check`` (and is not lost) is left alone.
2. The damaged files (``agent.db`` and its ``-wal`` / ``-shm``) are renamed to
   ``agent.db.damaged-<UTC time>`` (same suffixes): kept beside it, never changed.
3. A lost database (missing or 0 bytes while its marker says it existed) has nothing to
   salvage: the marker is removed and the service starts with an empty database.
4. Otherwise a scratch copy of the damaged files is opened (SQLite replays its WAL) and
   ``VACUUM INTO`` a new file is tried: when every page reads, that is an exact copy.
5. If not, the new file gets the damaged one's schema (the service's migrations when even
   that is unreadable) and every table is copied row by row in rowid order; where a read
   fails, it skips ahead to the next rowid that reads (probing 1, 2, 4, ... ahead, then
   narrowing down) and goes on. Rows on unreadable pages are lost; indexes are rebuilt.
6. The result must pass ``quick_check``; it replaces the database and the marker is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils

from edge_agent.storage.db import Migration, StoreError, migrate
from edge_agent.storage.integrity import forget_existing, mark_existing, marker_path, problems

_log = logging.getLogger(__name__)

_LOWEST_ROWID = -(2**63)
_HIGHEST_STEP = 2**62


@dataclass
class Repair:
    """What ``repair`` did: how, which files it kept, rows copied per table."""

    database: Path
    method: str  # "none" | "empty" | "vacuum" | "rows"
    found: list[str] = field(default_factory=list)  # quick_check's findings before
    kept: list[Path] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """Return the report printed to the operator."""
        if self.method == "none":
            return f"{self.database}: quick_check ok, nothing to repair"
        lines = [f"{self.database}: {'; '.join(self.found) or 'damaged'}"]
        lines += [f"  kept the damaged file as {p}" for p in self.kept]
        if self.method == "empty":
            lines.append("  nothing to salvage: the service starts with an empty database")
        else:
            how = "exact copy (VACUUM INTO)" if self.method == "vacuum" else "row by row"
            lines.append(f"  salvaged {how}, quick_check ok:")
            lines += [f"    {table}: {n} rows" for table, n in sorted(self.rows.items())]
        return "\n".join(lines)


def repair(path: Path, migrations: Sequence[Migration]) -> Repair:
    """Salvage ``path`` as the module says (blocking; the service must not be running)."""
    size = path.stat().st_size if path.exists() else None
    lost = not size and marker_path(path).exists()
    found = ["lost (missing or 0 bytes; it existed before)"] if lost else []
    if size:
        found = problems(path)
    if not found:
        return Repair(path, "none")
    kept = _move_aside(path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    if not size:
        forget_existing(path)
        return Repair(path, "empty", found, kept)
    scratch = Path(tempfile.mkdtemp(prefix=path.name + ".salvage-", dir=path.parent))
    try:
        src, out = scratch / "src.db", scratch / "out.db"
        for kept_file in kept:  # the copy is opened (and its WAL replayed), never the original
            shutil.copyfile(kept_file, str(src) + kept_file.name[len(kept[0].name) :])
        if _vacuum(src, out):
            result = Repair(path, "vacuum", found, kept, _counts(out))
        else:
            result = Repair(path, "rows", found, kept, _copy_rows(src, out, migrations))
        left = problems(out)
        if left:
            raise StoreError(f"salvage of {path} failed its own quick_check: {'; '.join(left)}")
        os.replace(out, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    mark_existing(path)
    return result


def _move_aside(path: Path, stamp: str) -> list[Path]:
    """Rename the database and its -wal/-shm to ``*.damaged-<stamp>*``; return the new paths."""
    kept = []
    for suffix in ("", "-wal", "-shm"):
        old = Path(f"{path}{suffix}")
        if old.exists():
            new = path.with_name(f"{path.name}.damaged-{stamp}{suffix}")
            os.replace(old, new)
            kept.append(new)
    return kept


def _vacuum(src: Path, out: Path) -> bool:
    """Copy ``src`` into ``out`` with VACUUM INTO; False (and no ``out``) when it cannot."""
    try:
        conn = sqlite3.connect(src, isolation_level=None)
        try:
            conn.execute("VACUUM INTO ?", (str(out),))
        finally:
            conn.close()
    except sqlite3.DatabaseError as err:
        _log.info("VACUUM INTO failed (%s); copying row by row", err)
    else:
        if not problems(out):
            return True
    with contextlib.suppress(FileNotFoundError):
        out.unlink()
    return False


def _counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
    finally:
        conn.close()


def _copy_rows(src_path: Path, out: Path, migrations: Sequence[Migration]) -> dict[str, int]:
    """Create ``out`` with ``src``'s schema and copy every readable row; rows per table."""
    src = sqlite3.connect(src_path, isolation_level=None)
    dst = sqlite3.connect(out, isolation_level=None)
    try:
        try:
            schema = src.execute(
                "SELECT type, name, sql FROM sqlite_master "
                "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            ).fetchall()
        except sqlite3.DatabaseError as err:
            _log.warning("schema unreadable (%s): using the service's own", err)
            schema = []
        if schema:
            for kind, _, sql in schema:
                if kind == "table":
                    dst.execute(sql)
        else:
            migrate(sqlite_utils.Database(dst), migrations)
        tables = [r[0] for r in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        dst.execute("BEGIN")
        rows = {t: _copy_table(src, dst, t) for t in tables if t != "sqlite_sequence"}
        dst.execute("COMMIT")
        for kind, name, sql in schema:
            if kind != "table":
                try:
                    dst.execute(sql)
                except sqlite3.DatabaseError as err:  # a unique index the salvaged rows break
                    _log.warning("%s %s not rebuilt: %s", kind, name, err)
        return rows
    finally:
        src.close()
        dst.close()


def _copy_table(src: sqlite3.Connection, dst: sqlite3.Connection, table: str) -> int:
    """Copy ``table``'s readable rows (rowid kept) from ``src`` to ``dst``; return how many."""
    try:
        info = src.execute(f'PRAGMA table_info("{table}")').fetchall()
    except sqlite3.DatabaseError:
        return 0
    cols = [str(r[1]) for r in info]
    if not cols:
        return 0
    aliased = sum(r[5] > 0 for r in info) == 1 and any(
        r[5] == 1 and str(r[2]).upper() == "INTEGER" for r in info
    )  # an INTEGER PRIMARY KEY is the rowid: copied as its column
    names = ", ".join(f'"{c}"' for c in cols)
    select = f'SELECT rowid, {names} FROM "{table}" WHERE rowid > ? ORDER BY rowid'
    into = names if aliased else f"rowid, {names}"
    marks = ", ".join("?" for _ in range(len(cols) + (0 if aliased else 1)))
    insert = f'INSERT OR IGNORE INTO "{table}" ({into}) VALUES ({marks})'
    after, copied = _LOWEST_ROWID, 0
    while True:
        try:
            for row in src.execute(select, (after,)):
                after = row[0]
                with contextlib.suppress(sqlite3.DatabaseError):  # a garbled value: lost
                    dst.execute(insert, row[1:] if aliased else row)
                    copied += 1
            return copied
        except sqlite3.DatabaseError:
            found = _next_readable(src, select, after)
            if found is None:
                return copied
            after = max(found - 1, after + 1)


def _next_readable(src: sqlite3.Connection, select: str, after: int) -> int | None:
    """Return the lowest rowid past ``after`` whose row reads (approximately), or None."""

    def first_from(start: int) -> tuple[bool, int | None]:  # (readable from there?, its rowid)
        try:
            row = src.execute(select + " LIMIT 1", (start - 1,)).fetchone()
        except sqlite3.DatabaseError:
            return False, None
        return True, None if row is None else int(row[0])

    step = 1
    while step < _HIGHEST_STEP:
        readable, found = first_from(after + step)
        if readable:
            break
        step *= 2
    else:
        return None
    low, high = after + step // 2, after + step  # unreadable from low, readable from high
    while high - low > 1:
        mid = (low + high) // 2
        readable, probe = first_from(mid)
        if readable:
            high, found = mid, probe
        else:
            low = mid
    return found
