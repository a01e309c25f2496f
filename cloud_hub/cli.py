"""The ``cloud-hub`` console command: policy documents and the what-if simulator.

Subcommands are registered on ``cli`` exactly as ``edge-agent``'s are (see edge_agent.clikit).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cloud_hub import demo
from cloud_hub.hub import cli as hub_cli
from cloud_hub.hub import learning_cli
from cloud_hub.simulator import cli as simulate_cli
from edge_agent import __version__
from edge_agent.clikit import CommandLine, columns, parse_blend, policy_line, positive_int
from edge_agent.errors import InvalidInput, PolicyError
from edge_agent.placement import OBJECTIVE_NAMES, TEMPLATES, Policy

cli = CommandLine("cloud-hub", "hetmesh cloud hub", __version__)
cli.group("policy", "show, validate and list scheduling policies")
hub_cli.register(cli)  # run, policy set, policy history
learning_cli.register(cli)  # learning runs, learning run RUN, learning models


def _show_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``policy show``."""
    parser.add_argument("template", nargs="?", metavar="NAME", help="a policy template")
    parser.add_argument(
        "--blend", metavar="SPEC", help="a blend of templates: latency-first=0.7,energy-first=0.3"
    )
    parser.add_argument("--name", help="name the policy (default: the template's or blend's)")
    parser.add_argument("--version", type=positive_int, default=1, metavar="V", help="version")


@cli.command("policy show", "print a template or a blend as a JSON policy document", _show_options)
def _show(args: argparse.Namespace) -> int:
    """Print the policy document of NAME or --blend (exactly one); 0 on success."""
    if (args.template is None) == (args.blend is None):
        raise InvalidInput("policy show: give a template NAME or --blend SPEC (one of them)")
    if args.blend is not None:
        policy = Policy.blend(parse_blend(args.blend))
    else:
        policy = Policy.template(args.template)
    doc = {**policy.to_dict(), "version": args.version}
    if args.name is not None:
        doc["name"] = args.name
    print(json.dumps(Policy.from_dict(doc).to_dict(), indent=2))  # from_dict validates the name
    return 0


def _validate_options(parser: argparse.ArgumentParser) -> None:
    """Add the argument of ``policy validate``."""
    parser.add_argument("file", type=Path, metavar="FILE", help="a JSON policy document")


@cli.command("policy validate", "check a JSON policy document", _validate_options)
def _validate(args: argparse.Namespace) -> int:
    """Print "ok: name@version: weights" for a valid document; PolicyError naming the field."""
    path: Path = args.file
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"policy file not found: {path}") from None
    except OSError as err:
        raise InvalidInput(f"cannot read policy file {path}: {err}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PolicyError(f"{path}: not valid JSON: {err}") from None
    try:
        policy = Policy.from_dict(doc)
    except PolicyError as err:
        raise PolicyError(f"{path}: {err}") from None
    print(f"ok: {policy_line(policy)}")
    return 0


@cli.command("policy templates", "list the policy templates and their weights")
def _templates(args: argparse.Namespace) -> int:
    """Print one row per template with its normalized weight per objective; 0 on success."""
    rows = [("TEMPLATE", *(name.upper() for name in OBJECTIVE_NAMES))]
    for name in TEMPLATES:
        weights = Policy.template(name).weights
        rows.append((name, *(f"{weights[o]:.3g}" if weights[o] else "-" for o in OBJECTIVE_NAMES)))
    print("\n".join(columns(rows, right=range(1, len(OBJECTIVE_NAMES) + 1))))
    return 0


cli.command(
    "demo",
    "a hub and emulated agents on loopback: mixed workload, placements, dashboard",
    demo.configure,
)(demo.run)
cli.command(
    "simulate",
    "what-if simulation: a fleet and a workload under hetmesh policies and baselines",
    simulate_cli.configure,
)(simulate_cli.run)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cloud-hub`` command line and return its exit status."""
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
