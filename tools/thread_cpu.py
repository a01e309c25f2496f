"""CPU by thread of a benchmark's child processes, from /proc, while the benchmark runs.

``tools/thread_cpu.py -- python benchmarks/bench_agent_burst.py --modes sustained`` runs
the command and samples ``/proc/PID/task/TID/stat`` of every descendant every
``--every-s`` seconds. For each descendant it prints the CPU seconds of each thread over
its busy window: the longest run of samples in which the process used more than ``--busy``
of a core (so imports, start-up and the idle tail are left out). The main thread
(``tid == pid``) runs the event loop in the agent; other threads are listed by tid. Linux
only; Python threads carry no OS name, so threads are told apart by tid and CPU. The last
line is JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_agent_harness import stat_cpu_s  # a benchmark's helper (benchmarks/ is no package)

Sample = dict[int, dict[int, float]]  # pid -> tid -> CPU seconds


def children(pid: int) -> list[int]:
    """Return every descendant of ``pid`` (from /proc/*/task/*/children)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def sample(pids: list[int]) -> Sample:
    out: Sample = {}
    for pid in pids:
        threads: dict[int, float] = {}
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                threads[int(task.name)] = stat_cpu_s(task / "stat")
            except OSError:
                continue
        if threads:
            out[pid] = threads
    return out


def busy_window(series: list[tuple[float, Sample]], pid: int, busy: float) -> dict[str, float]:
    """Return each thread's CPU seconds over the longest busy stretch of ``pid``."""
    points = [(t, s[pid]) for t, s in series if pid in s]
    busy_at = [
        i
        for i in range(1, len(points))
        if sum(points[i][1].values()) - sum(points[i - 1][1].values())
        > busy * (points[i][0] - points[i - 1][0])
    ]
    if not busy_at:
        return {}
    runs: list[list[int]] = []  # the busy stretches; the longest is the load
    for i in busy_at:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    longest = max(runs, key=len)
    (t0, first), (t1, last) = points[longest[0] - 1], points[longest[-1]]
    cpu = {str(tid): round(last[tid] - first.get(tid, 0.0), 3) for tid in last}
    return {"window_s": round(t1 - t0, 2), **{k: v for k, v in cpu.items() if v > 0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--every-s", type=float, default=0.2)
    parser.add_argument("--busy", type=float, default=0.5, help="share of a core")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    proc = subprocess.Popen(command)
    series: list[tuple[float, Sample]] = []
    cmdlines: dict[int, str] = {}
    while proc.poll() is None:
        pids = children(proc.pid)
        for pid in pids:
            if pid not in cmdlines:
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                cmdlines[pid] = raw.replace(b"\0", b" ").decode(errors="replace")[:120]
        series.append((time.monotonic(), sample([proc.pid, *pids])))
        time.sleep(args.every_s)
    result = {}
    for pid in sorted({p for _, s in series for p in s}):
        window = busy_window(series, pid, args.busy)
        if window:
            name = "benchmark" if pid == proc.pid else cmdlines.get(pid, "?")
            result[str(pid)] = {"command": name, "main_tid": pid, **window}
            print(f"pid {pid} ({name}):", file=sys.stderr)
            for key, value in window.items():
                label = "main" if key == str(pid) else key
                print(f"  {label:>10}: {value}", file=sys.stderr)
    print(json.dumps(result))
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
