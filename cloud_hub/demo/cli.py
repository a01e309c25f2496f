"""``cloud-hub demo``'s options and its main loop."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import tempfile
import time
import urllib.error
from pathlib import Path
from typing import Any

from cloud_hub.demo.fleet import HEARTBEAT_S, PROFILES, start_fleet
from cloud_hub.demo.learning_watch import LEARNING_EXTRA, LearningWatch
from cloud_hub.demo.processes import Child, DemoError, Stop, shielded, signals_stop, stop_all
from cloud_hub.demo.rounds import Tally, drain, submit_round
from cloud_hub.demo.showcases import (
    DEFERRABLE_COUNT,
    MESH_TIMEOUT_S,
    MoveWatch,
    show_sites,
    submit_deferrable,
    submit_mesh_work,
    wait_trusted,
)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``cloud-hub demo``."""
    parser.add_argument(
        "--agents",
        type=int,
        default=len(PROFILES),
        metavar="N",
        help=f"agents to start, 1..{len(PROFILES)} (one board profile each)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C); with --learning, not before "
        "the training run and every agent's verdict are in",
    )
    parser.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="S",
        help="submit a workload round to every agent each S seconds",
    )
    parser.add_argument(
        "--data-dir", type=Path, metavar="DIR", help="keep all data here (default: a temp dir)"
    )
    parser.add_argument(
        "--discover",
        action="store_true",
        help="the hub announces itself over mDNS on loopback and agents find it there "
        '([hub] url = "mdns") instead of being given its URL',
    )
    parser.add_argument(
        "--learning",
        action="store_true",
        help="train the load predictor: the hub runs a Flower SuperLink, the agents SuperNodes, "
        "one federated round on their own telemetry; agents validate and use the model "
        f"(needs Flower: {LEARNING_EXTRA})",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print every finished task (default: one summary line per workload round)",
    )
    parser.add_argument(
        "--learn-after",
        type=float,
        default=45.0,
        metavar="S",
        help="with --learning: collect S seconds of telemetry, then train (default 45)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C, SIGTERM or ``--duration``; 0 after a clean stop."""
    if not 1 <= args.agents <= len(PROFILES):
        raise DemoError(f"--agents: expected 1..{len(PROFILES)}, got {args.agents}")
    learning = bool(getattr(args, "learning", False))
    missing = [m for m in ("flwr", "cryptography") if importlib.util.find_spec(m) is None]
    if learning and missing:
        raise DemoError(
            f"--learning needs Flower ({', '.join(missing)} not installed); install the "
            f"learning extra: {LEARNING_EXTRA}"
        )
    children: list[Child] = []
    tally: Tally | None = None
    moves: MoveWatch | None = None
    watch: LearningWatch | None = None
    held: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        root = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        stack.enter_context(signals_stop())
        try:
            hub, agents = start_fleet(root, args.agents, children, args.discover, learning)
            tally = Tally(agents, verbose=bool(getattr(args, "verbose", False)))
            print(f"dashboard: {hub.url}/   (Ctrl-C to stop)", flush=True)
            dirty = show_sites(agents)
            wait_trusted(agents, MESH_TIMEOUT_S)
            submit_mesh_work(agents)
            held = submit_deferrable(dirty, DEFERRABLE_COUNT) if dirty else {}
            if dirty and len(agents) > 1:
                moves = MoveWatch(hub, agents, dirty, list(held))
            if learning:
                watch = LearningWatch(hub, agents, time.monotonic() + args.learn_after)
                print(f"learning: on; training starts after {args.learn_after:g} s of telemetry")
            else:
                hint = f"; {LEARNING_EXTRA}" if missing else ""
                print(f"learning: off (--learning trains the load predictor{hint})")
            _loop(args, agents, tally, [w for w in (watch, moves) if w is not None])
            drain(hub, agents, time.monotonic() + 5 * HEARTBEAT_S)
        except Stop:
            print("stopping", flush=True)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            raise DemoError(f"a demo process stopped answering: {err}; logs in {root}") from err
        finally:
            with shielded():
                for line in _closing(tally, held, moves, watch):
                    print(line)
                stop_all(children)
            print("stopped: " + ", ".join(f"{c.name} ({c.proc.returncode})" for c in children))
    return 0


def _loop(args: argparse.Namespace, agents: list[Child], tally: Tally, watches: list[Any]) -> None:
    """Submit a round every ``--every`` s until ``--duration`` (and the watches) are done."""
    end = time.monotonic() + (args.duration if args.duration is not None else 1e18)
    counter, next_round = itertools.count(1), 0.0
    while time.monotonic() < end or not all(w.done for w in watches):
        if time.monotonic() >= next_round:
            if next_round:  # the round before this one: what finished since its line
                tally.round_line()
            submit_round(agents, counter)
            next_round = time.monotonic() + args.every
        tally.collect()
        for w in watches:
            w.step()
        time.sleep(0.2)
    while any(a.pending for a in agents) and time.monotonic() < end + 10:
        tally.collect()
        time.sleep(0.1)
    tally.round_line()


def _closing(
    tally: Tally | None,
    held: dict[str, str],
    moves: MoveWatch | None,
    watch: LearningWatch | None,
) -> list[str]:
    """Return the closing summary: the workload, the carbon story, moves and learning."""
    lines = tally.summary() if tally is not None else []
    lines += [f"summary: carbon: {what}" for what in held.values()]
    lines += moves.summary() if moves is not None else []
    lines += watch.summary() if watch is not None else []
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run ``cloud-hub demo`` without the ``cloud-hub`` command line."""
    parser = argparse.ArgumentParser(prog="cloud-hub demo", description=__doc__)
    configure(parser)
    return run(parser.parse_args(argv))
