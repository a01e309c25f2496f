"""The ``edge-agent`` console command: one function per subcommand, registered in COMMANDS.

To add a subcommand, write ``def run(args) -> int`` (and, if it takes options, a function
adding them to its parser) and register it with ``@command("name", "help", configure)``.
Errors hetmesh raises on purpose become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from edge_agent import __version__
from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.resources.probe import Profile, emulate_profile, load_profiles, probe_machine

Configure = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]

#: Exit status for bad input or a failed command.
EXIT_ERROR = 2


@dataclass(frozen=True)
class Command:
    """A subcommand: its help line, how it adds its options, and what it runs."""

    summary: str
    configure: Configure
    run: Handler


COMMANDS: dict[str, Command] = {}


def _no_options(parser: argparse.ArgumentParser) -> None:
    """Add nothing: the subcommand takes no options."""


def command(
    name: str, summary: str, configure: Configure = _no_options
) -> Callable[[Handler], Handler]:
    """Register the decorated function as subcommand ``name``."""

    def register(run: Handler) -> Handler:
        COMMANDS[name] = Command(summary, configure, run)
        return run

    return register


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _profiles_dir_option(parser: argparse.ArgumentParser) -> None:
    """Add --profiles-dir."""
    parser.add_argument(
        "--profiles-dir",
        type=Path,
        metavar="DIR",
        help="read firmware profiles from DIR instead of the packaged ones",
    )


def _load(args: argparse.Namespace) -> list[Profile]:
    """Return the profiles from --profiles-dir (or the packaged ones)."""
    directory: Path | None = args.profiles_dir
    if directory is not None and not directory.is_dir():
        raise InvalidInput(f"--profiles-dir {directory} is not a directory")
    return load_profiles(directory)


def _probe_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``probe``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--profile", metavar="NAME", help="emulate the board of firmware profile NAME"
    )
    _profiles_dir_option(parser)


@command(
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


@command("profiles", "list the available firmware profiles", _profiles_dir_option)
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


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every registered subcommand."""
    parser = _Parser(prog="edge-agent", description="hetmesh edge agent")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, cmd in COMMANDS.items():
        cmd.configure(sub.add_parser(name, help=cmd.summary, description=cmd.summary))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``edge-agent`` command line and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error already printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_usage(sys.stderr)
        return EXIT_ERROR
    try:
        return COMMANDS[args.command].run(args)
    except HetmeshError as err:
        print(f"edge-agent: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
