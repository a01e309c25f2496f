"""Instructions per placement call, counted by valgrind (callgrind): a figure that does not
move with the box's load or its two speeds (docs/performance.md, "place_one's ordinary
call"), for comparing two trees where wall-clock figures cannot.

    python tools/placement_instructions.py [--calls N]
    PYTHONPATH=/tmp/old-site python tools/placement_instructions.py   # another tree's install

Re-runs itself under ``valgrind --tool=callgrind --dump-before=time_sleep``: each segment
(``N`` calls of one kind, between ``time.sleep(0)`` markers) is dumped apart, and the
segment's total over ``N`` is its instructions a call. Rows: ``place_one`` + ``release``
over bench_placement's 64-device fleet (latency-first, every device and 16 candidates),
``release`` alone (subtract it), and the simulator's decision (``update_live_many`` of
queue and health, then ``place_one`` + ``release``) over 17 devices, and an exploration pass
(``explore_64_candidates16``: 16 candidates, every class's interval forced to 1 before each
call, so each call is one; subtract ``explore_forcing`` and ``release_64``: the decisions
differ from the bench's, the pass's cost is what counts). The last line is JSON.
Needs valgrind (``apt-get install valgrind``); about a minute.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_placement import fleet, workload

import edge_agent
from edge_agent.placement import Placer, Policy

ROWS = (
    "place_one_64",
    "place_one_64_candidates16",
    "release_64",
    "sim_decision_17",
    "explore_64_candidates16",
    "explore_forcing",
)


def _force(every: Any) -> None:
    """Make every class's exploration interval 1: its next decision is an exploration pass."""
    for c in range(len(every)):
        every[c] = 1


def _segments(calls: int) -> None:
    """Run each row's calls between markers (under callgrind, each is dumped apart)."""
    p64 = Placer(fleet(64), Policy.template("latency-first"))
    tasks = [p64.prepare(t) for t in workload(64)]
    sets = [tuple(random.Random(11).sample(p64.device_ids, 16)) for _ in range(16)]
    p17 = Placer(fleet(17), Policy.template("latency-first"))
    tasks17 = [p17.prepare(t) for t in workload(64)]
    queues = [[((i + k) % 7) * 1e-3 for k in range(17)] for i in range(7)]
    health = [0.0] * 17
    for i in range(300):  # warm: classes known, the first exploration passes done
        p64.release(p64.place_one(tasks[i % 64], candidates=sets[i % 16]))
        p64.release(p64.place_one(tasks[i % 64]))
        p17.release(p17.place_one(tasks17[i % 64]))
    kept = p64.place_one(tasks[5])
    p64.release(kept)
    time.sleep(0)
    for i in range(calls):
        p64.release(p64.place_one(tasks[i % 64]))
    time.sleep(0)
    for i in range(calls):
        p64.release(p64.place_one(tasks[i % 64], candidates=sets[i % 16]))
    time.sleep(0)
    for _ in range(calls):
        p64.release(kept)  # a no-op release: the cost of the call itself
    time.sleep(0)
    for i in range(calls):
        p17.update_live_many(queued_s=queues[i % 7], health=health)
        p17.release(p17.place_one(tasks17[i % 64]))
    time.sleep(0)
    every = p64.exploration._every  # per class (a list, or a view of the kernel's book)
    for i in range(calls):
        _force(every)
        p64.release(p64.place_one(tasks[i % 64], candidates=sets[i % 16]))
    time.sleep(0)
    for _ in range(calls):
        _force(every)  # what forcing costs (subtract it)
    time.sleep(0)


def _totals(dump: Path) -> int:
    match = re.search(r"^totals:\s+(\d+)", dump.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def run(
    doc: str,
    script: str,
    rows: Sequence[str],
    segments: Callable[[int], None],
    argv: list[str] | None,
    *,
    valgrind: Sequence[str] = (),
    adjust: Callable[[dict[str, float]], dict[str, float]] = dict,
) -> int:
    """A counting tool's main: with ``--segments`` run ``segments(calls)`` (as valgrind runs
    ``script``), else run ``script`` under callgrind (with ``valgrind`` options) and print
    each row's instructions a call (``adjust``-ed: ``placement_instructions`` keeps them as
    counted), then JSON."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--segments", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.segments:
        segments(args.calls)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg"
        cmd = ["valgrind", "--tool=callgrind", "--dump-before=time_sleep", *valgrind]
        cmd += [f"--callgrind-out-file={out}", sys.executable, script, "--segments"]
        subprocess.run([*cmd, f"--calls={args.calls}"], check=True, capture_output=True)
        # dump 1: start-up and warm-up; dumps 2..: one per row, in ``rows`` order
        raw = {row: _totals(Path(f"{out}.{k + 2}")) / args.calls for k, row in enumerate(rows)}
    per_call = {row: round(n) for row, n in adjust(raw).items()}
    for row, n in per_call.items():
        print(f"{row:28s} {n:8d} instructions a call")
    where = str(Path(edge_agent.__file__).parent)  # which install was counted
    print(json.dumps({**per_call, "calls": args.calls, "edge_agent": where}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Count each row under callgrind and print instructions per call, then JSON."""
    return run(__doc__ or "", __file__, ROWS, _segments, argv)


if __name__ == "__main__":
    raise SystemExit(main())
