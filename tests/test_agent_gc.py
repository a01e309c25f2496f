"""``edge-agent run`` sets the collector up for batches before it serves.

Start-up objects (imports, module state) are frozen out of the collector's scans and young
objects are collected every ``GC_THRESHOLDS[0]`` allocations, not Python's 700: a batch of
1,000 tasks otherwise paused the agent in the collector on its way to the last ``placed_at``
(docs/performance.md, "Eighth round"). The daemon's ``run`` is called in a child process
(the settings are process-wide) with ``serve`` replaced by a probe of the collector's state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edge_agent.agent.daemon import GC_THRESHOLDS

PROBE = r"""
import gc, json, sys
from pathlib import Path
from edge_agent.agent import daemon
from edge_agent.agent.config import AgentConfig

before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
seen = {}

async def serve(config, stop=None):  # what the daemon finds when it starts serving
    seen.update(threshold=gc.get_threshold(), frozen=gc.get_freeze_count())

daemon.serve = serve
assert daemon.run(AgentConfig(data_dir=Path(sys.argv[1]))) == 0
print(json.dumps({"before": before, "serving": seen}))
"""


def test_the_daemon_freezes_start_up_objects_and_collects_young_ones_less_often(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == {"threshold": [700, 10, 10], "frozen": 0}  # Python's own
    assert got["serving"]["threshold"] == list(GC_THRESHOLDS)
    assert got["serving"]["frozen"] > 10_000  # the imports: aiohttp, numpy, sqlite_utils, ...
