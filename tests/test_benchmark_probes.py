"""The benchmarks that reach into the package by name still find what they time.

A benchmark that imports or probes a callable the package no longer has either crashes
(``bench_intake_batch.py`` imported ``http_errors.whole_numbers`` after session 7 moved
that walk into the parser) or, worse, times nothing for that step without saying so
(``bench_batch_steps.py``'s probes skip a missing callable, so that an older tree can be
measured too: every step must still find one of its callables here). Both run here at a
size of seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def test_bench_intake_batch_runs_and_prints_each_figure() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench_intake_batch.py"),
            "--tasks",
            "20",
            "--passes",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    for key in (
        "identical_intake_us_per_task",
        "identical_202_us_per_task",
        "distinct_intake_us_per_task",
        "distinct_202_us_per_task",
    ):
        assert figures[key] > 0, key


def test_bench_batch_steps_finds_a_callable_for_every_step_it_times() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_batch_steps
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert bench_batch_steps.steps_unprobed() == []
