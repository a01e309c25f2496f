"""What the ``edge-agent`` and ``cloud-hub`` console commands share: subcommands, errors, tables.

A command line is a ``CommandLine``; each subcommand is a function ``run(args) -> int``
registered with ``@cli.command("name", "help", configure)``, where ``configure`` adds its
options. A name with a space ("policy show") registers under a group made with
``cli.group``. Errors hetmesh raises on purpose become one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from edge_agent.errors import HetmeshError, InvalidInput

if TYPE_CHECKING:
    from edge_agent.placement.policy import Policy

Configure = Callable[[argparse.ArgumentParser], None]
Handler = Callable[[argparse.Namespace], int]

#: Exit status for bad input or a failed command.
EXIT_ERROR = 2

_COMMAND = "_clikit_command"  # namespace attribute: the Command the parsed words chose
_PARSER = "_clikit_parser"  # namespace attribute: the deepest parser, for its usage line


@dataclass(frozen=True)
class Command:
    """A subcommand: its help line, how it adds its options, and what it runs."""

    summary: str
    configure: Configure
    run: Handler


def no_options(parser: argparse.ArgumentParser) -> None:
    """Add nothing: the subcommand takes no options."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


class CommandLine:
    """A console command made of registered subcommands (and groups of them)."""

    def __init__(self, prog: str, description: str, version: str) -> None:
        self.prog = prog
        self.description = description
        self.version = version
        self.commands: dict[str, Command] = {}
        self.groups: dict[str, str] = {}

    def group(self, name: str, summary: str) -> None:
        """Declare the subcommand group ``name`` ("policy"), whose members are "name sub"."""
        self.groups[name] = summary

    def command(
        self, name: str, summary: str, configure: Configure = no_options
    ) -> Callable[[Handler], Handler]:
        """Register the decorated function as subcommand ``name`` ("probe", "policy show")."""
        group, _, _ = name.rpartition(" ")
        if group and group not in self.groups:
            raise ValueError(f"subcommand {name!r}: declare group {group!r} first")

        def register(run: Handler) -> Handler:
            self.commands[name] = Command(summary, configure, run)
            return run

        return register

    def build_parser(self) -> argparse.ArgumentParser:
        """Return the argument parser with every registered subcommand."""
        parser = _Parser(prog=self.prog, description=self.description)
        parser.add_argument("--version", action="version", version=f"%(prog)s {self.version}")
        parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
        parser.set_defaults(**{_PARSER: parser})
        subparsers: dict[str, Any] = {"": self._subparsers(parser)}
        for name, summary in self.groups.items():
            group = subparsers[""].add_parser(name, help=summary, description=summary)
            group.set_defaults(**{_PARSER: group})
            subparsers[name] = self._subparsers(group)
        for name, cmd in self.commands.items():
            group, _, word = name.rpartition(" ")
            sub = subparsers[group].add_parser(word, help=cmd.summary, description=cmd.summary)
            sub.set_defaults(**{_COMMAND: cmd})
            cmd.configure(sub)
        return parser

    @staticmethod
    def _subparsers(parser: argparse.ArgumentParser) -> Any:
        return parser.add_subparsers(metavar="COMMAND", parser_class=_Parser)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Parse ``argv`` (default: sys.argv), run the chosen subcommand, return its status."""
        try:
            args = self.build_parser().parse_args(argv)
        except SystemExit as exit_:  # --help, --version, or a usage error already printed
            return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        cmd: Command | None = getattr(args, _COMMAND, None)
        if cmd is None:  # no subcommand, or a group without its member
            getattr(args, _PARSER).print_usage(sys.stderr)
            return EXIT_ERROR
        try:
            return cmd.run(args)
        except HetmeshError as err:
            print(f"{self.prog}: error: {err}", file=sys.stderr)
            return EXIT_ERROR
        except BrokenPipeError:  # stdout closed early (`| head`): stop quietly, as Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1


def parse_blend(text: str) -> dict[str, float]:
    """Parse "latency-first=0.5,energy-first=0.5" into {template: fraction}; InvalidInput if bad."""
    parts: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not name:
            raise InvalidInput(f"--blend: expected TEMPLATE=FRACTION, got {item.strip()!r}")
        if name in parts:
            raise InvalidInput(f"--blend: template {name!r} given twice")
        try:
            fraction = float(value)
        except ValueError:
            raise InvalidInput(
                f"--blend: fraction for {name!r} is not a number: {value!r}"
            ) from None
        if not math.isfinite(fraction) or fraction < 0:
            raise InvalidInput(f"--blend: fraction for {name!r} must be a number >= 0")
        parts[name] = fraction
    return parts


def positive_int(text: str) -> int:
    """Parse an integer >= 1 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def policy_line(policy: Policy) -> str:
    """Return "name@version: objective weight, ..." with the non-zero weights, largest first."""
    weights = sorted(((w, o) for o, w in policy.weights.items() if w > 0), reverse=True)
    return f"{policy.name}@{policy.version}: " + ", ".join(f"{o} {w:.3g}" for w, o in weights)


def columns(rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """Return ``rows`` as lines of columns padded to their widest cell; ``right``: aligned right."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def running_service_url(state_path: Path, host: str, fallback: str) -> str:
    """Return the URL of the service whose state file records its bound port, else fallback."""
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        return f"http://{host}:{int(state['port'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return fallback


#: Seconds a command waits for the agent's or the hub's answer.
HTTP_TIMEOUT_S = 30.0


def call_service(
    base: str,
    req: urllib.request.Request,
    *,
    service: str,
    unreachable: type[HetmeshError],
    start_with: str,
    notes: Mapping[int, str] | None = None,
) -> Any:
    """Send ``req`` to a running agent or hub; return its JSON answer.

    An error answer becomes InvalidInput carrying the service's message (and the caller's
    ``notes`` for that status); no answer at all becomes ``unreachable`` saying how to start
    one (``start_with``).
    """
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read()).get("error", err.reason)
        except ValueError:
            message = err.reason
        note = (notes or {}).get(err.code)
        message = f"{message} ({note})" if note else message
        raise InvalidInput(f"{service} answered {err.code}: {message}") from None
    except (urllib.error.URLError, OSError) as err:
        raise unreachable(f"no {service} at {base} ({err}); start one: {start_with}") from None
