"""``edge-agent init / run / repair``: the daemon's config file, the daemon, its database.

``register(cli)`` adds these and the clients of the local agent (``cli_agent_views``: submit,
tasks, status, explain, peers, pools, over HTTP by ``cli_agent_http``) to a ``CommandLine``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from edge_agent import cli_agent_views as views
from edge_agent.cli_agent_http import agent_config, client_options, config_option
from edge_agent.clikit import CommandLine
from edge_agent.errors import InvalidInput


def _init_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", type=Path, metavar="FILE", help="where to write the config")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    key = parser.add_mutually_exclusive_group()
    key.add_argument("--fleet-key", metavar="KEY", help="join the mesh of the fleet with KEY")
    key.add_argument(
        "--new-fleet-key", action="store_true", help="make a new fleet key (a new mesh)"
    )


def _init(args: argparse.Namespace) -> int:
    """Write a commented config file."""
    from edge_agent.agent.config import AgentConfig, default_config_path, render_default

    path: Path = args.path or default_config_path()
    if path.exists() and not args.force:
        raise InvalidInput(f"{path} exists; pass --force to overwrite it")
    config, key = AgentConfig(), args.fleet_key
    if args.new_fleet_key:
        from edge_agent.mesh import FleetKey

        key = FleetKey.generate()
    if key is not None:
        config = config.replace(mesh_fleet_key=key.strip())  # ConfigError when too short
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_default(config)
    if key is None:
        path.write_text(text, encoding="utf-8")
    else:  # holds a secret: readable by its owner only, from the first byte
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    print(f"wrote {path}")
    if key is not None:
        from edge_agent.mesh import FleetKey

        print(
            f"mesh on, fleet key fingerprint {FleetKey(key).fingerprint}; give the other "
            "agents the same [mesh] fleet_key (never the fingerprint)"
        )
    return 0


def _run_options(parser: argparse.ArgumentParser) -> None:
    config_option(parser)
    parser.add_argument("--host", metavar="ADDR", help="listen address")
    parser.add_argument("--port", type=int, metavar="N", help="listen port (0: any free port)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="database directory")
    parser.add_argument("--profile", metavar="NAME", help="emulate the board of profile NAME")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="first salvage a damaged database, as `edge-agent repair` does",
    )


def _run(args: argparse.Namespace) -> int:
    """Run the agent daemon until SIGTERM / SIGINT."""
    import logging

    from edge_agent.agent import daemon

    logging.getLogger("edge_agent").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    config = agent_config(args).replace(
        host=args.host, port=args.port, data_dir=args.data_dir, profile=args.profile
    )
    if args.repair:
        _salvage(config.db_path)
    return daemon.run(config)


def _repair_options(parser: argparse.ArgumentParser) -> None:
    config_option(parser)
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="database directory")


def _salvage(path: Path) -> None:
    from edge_agent.storage.agent_schema import MIGRATIONS
    from edge_agent.storage.salvage import repair

    print(repair(path, MIGRATIONS).summary())


def _repair(args: argparse.Namespace) -> int:
    """Salvage a damaged agent database (the agent must be stopped); keep the damaged file."""
    _salvage(agent_config(args).replace(data_dir=args.data_dir).db_path)
    return 0


def register(cli: CommandLine) -> None:
    """Add the agent's commands to ``cli``."""
    cli.command("init", "write a commented agent config file", _init_options)(_init)
    cli.command("run", "run the agent daemon (HTTP API, scheduler, executor)", _run_options)(_run)
    cli.command(
        "repair", "salvage a damaged agent database (keeps the damaged file)", _repair_options
    )(_repair)
    cli.command("submit", "submit a model to the local agent", views.submit_options)(views.submit)
    cli.command("tasks", "list the local agent's tasks", views.tasks_options)(views.tasks)
    cli.command("status", "show the local agent: devices, queue, recent tasks", client_options)(
        views.status
    )
    cli.command("explain", "why a task went where it went", views.explain_options)(views.explain)
    cli.command("peers", "list the local agent's mesh peers", client_options)(views.peers)
    cli.command("pools", "show the local agent's resource pools", client_options)(views.pools)


def main(argv: list[str] | None = None) -> int:
    """Run ``edge-agent`` (this module is registered by edge_agent.cli; kept for ``-m``)."""
    from edge_agent.cli import main as edge_agent_main

    return edge_agent_main(argv)


if __name__ == "__main__":
    sys.exit(main())
