"""The hub's learning side (``Federation``) in a network namespace, driven over stdin/stdout.

Run as ``ip netns exec NS python tests/learning_hub_ns.py STATE_DIR HOST PORT``: it starts the
Federation as the hub does (SuperLink on the namespace's loopback, Fleet gateway on HOST:PORT)
and answers one JSON line per command line:

* ``info``: the SuperLink's pids, its listening sockets (``/proc``) and the gateway's counters
* ``run``: start one training run (``run_once``); answers once rounds are wanted
* ``report AGENT KEYFILE``: the agent's learning poll, as the hub's route passes it on
* ``wait``: the run's record once it has ended
* ``stop``: stop the SuperLink and the gateway, then exit
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.federation import Federation, LearningSettings, RunRecord

RUN_CONFIG: dict[str, str | int | float | bool] = {
    "num-rounds": 1,
    "min-nodes": 1,
    "start-timeout-s": 40.0,
    "round-timeout-s": 60.0,
    "evaluate-every": 1,
    "window": 16,
    "bucket-s": 60.0,
}


async def main(state_dir: Path, host: str, port: int) -> None:
    settings = LearningSettings(
        state_dir, host=host, port=port, run_config=RUN_CONFIG, superexec_poll_s=0.25, gather_s=2.0
    )
    fed = Federation(settings)
    await fed.start()
    assert fed.superlink is not None and fed.gateway is not None
    link, gateway = fed.superlink, fed.gateway
    run: asyncio.Task[RunRecord] | None = None
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def answer(doc: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()

    answer({"ready": True, "home": str(link.home), "superlink_port": link.cfg.port})
    while line := (await reader.readline()).decode().split():
        command, args = line[0], line[1:]
        if command == "info":
            listening = await asyncio.to_thread(link.process.listening)
            answer(
                {
                    "pids": link.process.pids(),
                    "listening": sorted(listening),
                    "refused": gateway.refused,
                    "forwarded": gateway.forwarded,
                }
            )
        elif command == "run":
            run = asyncio.create_task(fed.run_once())
            while not fed.wanted:
                await asyncio.sleep(0.01)
            answer({"wanted": True})
        elif command == "report":
            key = Path(args[1]).read_text().strip()
            answer(await fed.agent_report(args[0], {"supernode_public_key": key}))
        elif command == "wait":
            assert run is not None
            answer(asdict(await run))
        elif command == "stop":
            break
    await fed.stop()
    answer({"stopped": True})


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
