"""``edge-agent place``: place tasks on a fleet (emulated boards or this machine) and explain why.

A task is an ONNX model file, the name of a packaged example model ("tiny_cnn_int8"), or a
JSON task contract (``*.json``). ``--kinds``, ``--precision`` and ``--max-latency-ms`` are
requirements of the ONNX tasks; a JSON contract carries its own.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.clikit import columns, parse_blend, policy_line, positive_int
from edge_agent.errors import ContractError, InvalidInput
from edge_agent.placement import (
    Decision,
    Device,
    Placer,
    Policy,
    TaskContract,
    contract_from_onnx,
    devices_from_profiles,
)
from edge_agent.resources.probe import load_profiles, probe_machine
from edge_agent.resources.profiles import list_profiles
from edge_agent.tasks.models_dir import example_model, example_models

SUMMARY = "place tasks on a fleet and explain the decisions"


@dataclass(frozen=True)
class _Fleet:
    """The devices to place on, and a few words on where they come from."""

    devices: list[Device]
    label: str


def _positive_ms(text: str) -> float:
    """Parse a latency bound in ms (an argparse ``type``): a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of ms > 0, got {text!r}")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``place`` (all but --profiles-dir)."""
    parser.add_argument(
        "tasks",
        nargs="+",
        metavar="TASK",
        help="an ONNX model file, an example model name (tiny_cnn_int8), or a contract .json",
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME",
        help="add the emulated board of firmware profile NAME (repeatable; "
        "default: this machine's devices)",
    )
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--policy", metavar="NAME", help="policy template (default: balanced)")
    chosen.add_argument(
        "--blend", metavar="SPEC", help="blend of templates: latency-first=0.5,energy-first=0.5"
    )
    parser.add_argument(
        "--max-latency-ms", type=_positive_ms, metavar="MS", help="ONNX tasks: latency bound"
    )
    parser.add_argument("--precision", metavar="P", help="ONNX tasks: run at precision P")
    parser.add_argument(
        "--kinds", metavar="K,K", help="ONNX tasks: allowed device kinds (npu,gpu,cpu,...)"
    )
    parser.add_argument(
        "--count", type=positive_int, default=1, metavar="N", help="place each task N times"
    )
    parser.add_argument("--json", action="store_true", help="print fleet, policy, decisions")


def run(args: argparse.Namespace, profiles_dir: Path | None) -> int:
    """Place ``args.tasks`` on the fleet, print the table (or JSON); 0 on success."""
    policy = _policy(args)
    fleet = _fleet(args.profile, profiles_dir)
    tasks = [(label, contract) for text in args.tasks for label, contract in _tasks(text, args)]
    placer = Placer(fleet.devices, policy)
    labels = [label for label, _ in tasks]
    decisions = placer.place([contract for _, contract in tasks])
    if args.json:
        doc = {
            "fleet": [d.summary() for d in fleet.devices],
            "policy": policy.to_dict(),
            "decisions": [
                {"task": label, **d.to_dict()} for label, d in zip(labels, decisions, strict=True)
            ],
        }
        print(json.dumps(doc, indent=2))
    else:
        print(_report(fleet, policy, labels, decisions))
    return 0


def _policy(args: argparse.Namespace) -> Policy:
    """Return the policy of --policy or --blend (default: the balanced template)."""
    if args.blend is not None:
        return Policy.blend(parse_blend(args.blend))
    return Policy.template(args.policy or "balanced")


def _fleet(names: list[str], profiles_dir: Path | None) -> _Fleet:
    """Return the emulated boards ``names``, or this machine's devices when there are none."""
    if names:
        known = list_profiles(profiles_dir)
        for name in names:
            if name not in known:
                raise InvalidInput(f"unknown profile {name!r}; available: {', '.join(known)}")
        devices = devices_from_profiles(names, emulated=True, directory=profiles_dir)
        return _Fleet(devices, f"emulated boards {', '.join(names)}")
    report = probe_machine(profiles=load_profiles(profiles_dir))
    if not report.devices:
        raise InvalidInput("this machine has no schedulable devices; emulate one with --profile")
    where = f", profile {report.profile_id}" if report.profile_id else ""
    return _Fleet(list(report.devices), f"this machine ({report.mode}{where})")


def _tasks(text: str, args: argparse.Namespace) -> list[tuple[str, TaskContract]]:
    """Return ``args.count`` labelled copies of the task that ``text`` names."""
    path = Path(text)
    if text.endswith(".json"):
        contract = _contract_file(path)
    else:
        model = path if path.is_file() else example_model(text)
        if model is None:
            if "/" in text or text.endswith(".onnx"):
                raise InvalidInput(f"model file not found: {text}")
            raise InvalidInput(
                f"unknown task {text!r}: not a file nor an example model "
                f"({', '.join(example_models())})"
            )
        contract = contract_from_onnx(model, **_requirements(args))
    label = path.stem if text.endswith((".json", ".onnx")) or "/" in text else text
    if args.count == 1:
        return [(label, contract)]
    return [(f"{label} #{i}", contract) for i in range(1, args.count + 1)]


def _requirements(args: argparse.Namespace) -> dict[str, Any]:
    """Return the requirement fields that the options set for ONNX tasks."""
    fields: dict[str, Any] = {}
    if args.kinds is not None:
        fields["kinds"] = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.precision is not None:
        fields["precision"] = args.precision
    if args.max_latency_ms is not None:
        fields["max_latency_s"] = args.max_latency_ms / 1e3
    return fields


def _contract_file(path: Path) -> TaskContract:
    """Read a JSON task contract; ContractError naming the file (and field) when bad."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"contract file not found: {path}") from None
    except OSError as err:
        raise InvalidInput(f"cannot read contract file {path}: {err}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ContractError(f"{path}: not valid JSON: {err}") from None
    try:
        return TaskContract.from_dict(doc)
    except ContractError as err:
        raise ContractError(f"{path}: {err}") from None


def _report(fleet: _Fleet, policy: Policy, labels: list[str], decisions: list[Decision]) -> str:
    """Return the human report: header, one row per task, why-not list for the first task."""
    n = len(fleet.devices)
    lines = [
        f"fleet: {n} device{'s' if n != 1 else ''}, {fleet.label}",
        f"policy: {policy_line(policy)}",
        "",
    ]
    rows = [("TASK", "DEVICE", "EST MS", "ENERGY MJ", "RUNNER-UP", "WHY")]
    for label, d in zip(labels, decisions, strict=True):
        rows.append(
            (
                label,
                ",".join(d.device_ids) or "-",
                f"{d.latency_s * 1e3:.3f}" if d.placed else "-",
                f"{d.energy_j * 1e3:.3f}" if d.placed else "-",
                d.runner_up or "-",
                d.summary(),
            )
        )
    lines.extend(columns(rows, right={2, 3}))
    first = decisions[0]
    lines += ["", f"why not elsewhere ({labels[0]}):"]
    lines.extend(f"  {first.why_not(device_id)}" for device_id in first.device_order)
    return "\n".join(lines)
