"""Task ids: 32 hex characters, ordered by creation, and unique in their first eight.

An id is a UUID (version 8, RFC 9562's custom layout) whose first 32 bits are a sequence
number and whose other 90 free bits are random:

- **Ordered.** The sequence is the clock in 100 µs ticks, moved on by at least one per id,
  so ids made one after another sort one after another. SQLite keeps the tasks table's id
  index and the decisions table's ``task_id`` index as B-trees: a random id (UUID4, before)
  lands on a random leaf page, so a commit of a few dozen tasks rewrote a few dozen pages
  of each index into the WAL, and every one of them was fsynced and later checkpointed;
  ordered ids append to the last leaf. On the sustained intake benchmark this took the
  agent's CPU a task from 0.27 to 0.24 ms and its tasks/s up a fifth (docs/performance.md,
  "Task ids in creation order (session 13)").
- **Short prefixes still name one task.** The sequence is in the first eight characters,
  not behind a 48-bit millisecond clock as in UUIDv7 (whose first eight characters are
  the same for every id made in the same 65 s): ``hetmesh`` and the demo print eight
  characters, and ``GET /v1/tasks/{prefix}`` takes a unique prefix (``id_prefix``). The
  32 bits wrap after about 4.97 days; ids stay unique by their random bits, and a prefix
  that names two tasks five days apart is answered "ambiguous", as any prefix may be.
- **Not guessable.** 90 random bits (``os.urandom``), as many ids as a caller could ever
  try. An id says when its task was made to 100 µs, which ``submitted_at`` says anyway.
"""

from __future__ import annotations

import os
import threading
import time

#: The sequence's clock: ticks a second (100 µs each; 2**32 ticks is about 4.97 days).
TICKS_PER_S = 10_000
_MASK = 0xFFFFFFFF

_lock = threading.Lock()
_last = 0  # the last tick handed out, not wrapped


def new_ids(n: int) -> list[str]:
    """Return ``n`` new task ids in creation order (one ``os.urandom`` call for all)."""
    global _last
    with _lock:
        first = max(_last + 1, int(time.time() * TICKS_PER_S))
        _last = first + n - 1
    pool = bytearray(os.urandom(12 * n))  # a UUID's bytes 4-15, per id
    pool[2::12] = bytes((b & 0x0F) | 0x80 for b in pool[2::12])  # byte 6: version 8
    pool[4::12] = bytes((b & 0x3F) | 0x80 for b in pool[4::12])  # byte 8: RFC 9562 variant
    text = pool.hex()
    return [f"{(first + i) & _MASK:08x}{text[24 * i : 24 * (i + 1)]}" for i in range(n)]
