"""The ``edge-agent`` console command: one function per subcommand, registered on ``cli``.

To add a subcommand, write ``def run(args) -> int`` (and, if it takes options, a function
adding them to its parser) and register it with ``@cli.command("name", "help", configure)``.
Errors hetmesh raises on purpose become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from edge_agent import __version__, cli_agent, cli_place
from edge_agent.clikit import CommandLine
from edge_agent.errors import InvalidInput
from edge_agent.resources.probe import Profile, emulate_profile, load_profiles, probe_machine

cli = CommandLine("edge-agent", "hetmesh edge agent", __version__)
cli_agent.register(cli)  # init, run, submit, tasks, status, explain, peers


def _profiles_dir_option(parser: argparse.ArgumentParser) -> None:
    """Add --profiles-dir."""
    parser.add_argument(
        "--profiles-dir",
        type=Path,
        metavar="DIR",
        help="read firmware profiles from DIR instead of the packaged ones",
    )


def _profiles_dir(args: argparse.Namespace) -> Path | None:
    """Return --profiles-dir (None: the packaged profiles); InvalidInput if not a directory."""
    directory: Path | None = args.profiles_dir
    if directory is not None and not directory.is_dir():
        raise InvalidInput(f"--profiles-dir {directory} is not a directory")
    return directory


def _load(args: argparse.Namespace) -> list[Profile]:
    """Return the profiles from --profiles-dir (or the packaged ones)."""
    return load_profiles(_profiles_dir(args))


def _probe_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``probe``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--profile", metavar="NAME", help="emulate the board of firmware profile NAME"
    )
    _profiles_dir_option(parser)


@cli.command(
    "probe", "show the compute devices of this machine (or of an emulated board)", _probe_options
)
def _probe(args: argparse.Namespace) -> int:
    """Print the probe report (table or JSON); 0 on success."""
    profiles = _load(args)
    if args.profile:
        report = emulate_profile(args.profile, profiles)
    else:
        report = probe_machine(profiles=profiles)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0


@cli.command("profiles", "list the available firmware profiles", _profiles_dir_option)
def _profiles(args: argparse.Namespace) -> int:
    """Print one line per profile: id, name, device kinds; 0 on success."""
    profiles = _load(args)
    if not profiles:
        print("no firmware profiles found", file=sys.stderr)
        return 0
    width = max(len(p.id) for p in profiles)
    for profile in profiles:
        kinds = sorted({d.kind.name.lower() for d in profile.devices(emulated=True)})
        print(f"{profile.id:<{width}}  {profile.name}  [{', '.join(kinds)}]")
    return 0


def _place_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``place``."""
    cli_place.configure(parser)
    _profiles_dir_option(parser)


@cli.command("place", cli_place.SUMMARY, _place_options)
def _place(args: argparse.Namespace) -> int:
    """Place the tasks and explain the decisions; 0 on success."""
    return cli_place.run(args, _profiles_dir(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``edge-agent`` command line and return its exit status."""
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
