"""Instructions of ``place_one`` alone (no release), counted by valgrind (callgrind) only
inside the call: a figure for the call the benchmark times, beside
``tools/placement_instructions.py``'s rows (which include each decision's release).

    python tools/place_one_instructions.py [--calls N]
    PYTHONPATH=/tmp/old-site python tools/place_one_instructions.py   # another tree's install

Re-runs itself under ``valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=starmap_next``: each counted call runs inside a one-element
``itertools.starmap`` (collection is on only within its ``next``), the release outside it.
Rows, over bench_placement's 64-device fleet with 16 candidates (latency-first): ``mix``
(the benchmark's calls: ordinary, 1 in 64 the clamped-factor probe, ~2 % exploration
passes), ``ordinary`` (exploration disabled: ordinary calls and the probe), ``explore``
(every class's interval forced to 1 before each call, outside the count: each call is an
exploration pass), ``release_fresh`` (a release of a decision just made). Each row has the
``null`` row (the same wrapper around a function that does nothing) subtracted. The last
line is JSON. Needs valgrind; about a minute.
"""

from __future__ import annotations

import random
import sys
import time
from itertools import starmap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_placement import fleet, workload
from placement_instructions import run

from edge_agent.placement import Placer, Policy

ROWS = ("null", "mix", "ordinary", "explore", "release_fresh")


def _segments(calls: int) -> None:
    """Run each row's calls between ``time.sleep(0)`` markers (each dumped apart)."""
    placer = Placer(fleet(64), Policy.template("latency-first"))
    tasks = [placer.prepare(t) for t in workload(64)]
    sets = [tuple(random.Random(11).sample(placer.device_ids, 16)) for _ in range(16)]
    for i in range(300):  # warm: classes known, the first exploration passes done
        placer.release(placer.place_one(tasks[i % 64], candidates=sets[i % 16]))
    explorer = placer.exploration
    every = explorer._every  # per class (a view of the kernel's book)

    def place(task: Any, candidates: Any) -> Any:
        return placer.place_one(task, candidates=candidates)

    def null(task: Any, candidates: Any) -> None:
        return None

    for row in ROWS:
        time.sleep(0)
        explorer.enabled = row != "ordinary"
        for i in range(calls):
            args = [(tasks[i % 64], sets[i % 16])]
            if row == "null":
                next(starmap(null, args))
                continue
            if row == "explore":
                for c in range(len(every)):
                    every[c] = 1
            if row == "release_fresh":
                decision = place(*args[0])
                next(starmap(placer.release, [(decision,)]))
                continue
            placer.release(next(starmap(place, args)))
    explorer.enabled = True
    time.sleep(0)


def _less_null(raw: dict[str, float]) -> dict[str, float]:
    """Each row less the wrapper's cost (the ``null`` row, kept as itself)."""
    return {row: n - raw["null"] for row, n in raw.items() if row != "null"} | {"null": raw["null"]}


def main(argv: list[str] | None = None) -> int:
    """Count each row under callgrind and print instructions per call, then JSON."""
    toggle = ["--collect-atstart=no", "--toggle-collect=starmap_next"]
    return run(__doc__ or "", __file__, ROWS, _segments, argv, valgrind=toggle, adjust=_less_null)


if __name__ == "__main__":
    raise SystemExit(main())
