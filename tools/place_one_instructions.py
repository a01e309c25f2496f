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

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import starmap
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_placement import fleet, workload

import edge_agent
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


def _total(dump: Path) -> int:
    match = re.search(r"^totals:\s+(\d+)", dump.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def main(argv: list[str] | None = None) -> int:
    """Count each row under callgrind and print instructions per call, then JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--segments", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.segments:
        _segments(args.calls)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        cmd = ["valgrind", "--tool=callgrind", "--dump-before=time_sleep"]
        cmd += ["--collect-atstart=no", "--toggle-collect=starmap_next"]
        cmd += [f"--callgrind-out-file={out}", sys.executable, __file__, "--segments"]
        subprocess.run([*cmd, f"--calls={args.calls}"], check=True, capture_output=True)
        # dump 1: start-up and warm-up (nothing counted); dumps 2..: one per row
        raw = {row: _total(Path(f"{out}.{k + 2}")) / args.calls for k, row in enumerate(ROWS)}
    per_call = {row: round(n - raw["null"]) for row, n in raw.items() if row != "null"}
    per_call["null"] = round(raw["null"])
    for row, n in per_call.items():
        print(f"{row:16s} {n:8d} instructions a call")
    where = str(Path(edge_agent.__file__).parent)  # which install was counted
    print(json.dumps({**per_call, "calls": args.calls, "edge_agent": where}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
