"""``cloud-hub simulate``: run a what-if simulation from a fleet and a workload file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from cloud_hub.simulator.baselines import BASELINES
from cloud_hub.simulator.carbon_run import compare
from cloud_hub.simulator.chart import render_svg
from cloud_hub.simulator.fleet import load_fleet
from cloud_hub.simulator.runner import run as run_simulation
from cloud_hub.simulator.workload import load_workload
from edge_agent.clikit import columns
from edge_agent.errors import InvalidInput
from edge_agent.placement import TEMPLATES, Policy


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` options to ``parser``."""
    parser.add_argument("--fleet", required=True, type=Path, help="fleet file (JSON)")
    parser.add_argument(
        "--workload",
        required=True,
        type=Path,
        help="trace (.jsonl / .csv) or generator spec (.json)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help=f"hetmesh policy: a template ({', '.join(TEMPLATES)}) or a policy "
        "JSON file; repeatable (default latency-first)",
    )
    parser.add_argument(
        "--baselines", default="all", help=f"comma list of {', '.join(BASELINES)}, or all / none"
    )
    parser.add_argument("--load", type=float, help="override the generator's load fraction")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--noise",
        type=float,
        default=0.1,
        help="lognormal sigma of the service-time noise (default 0.1)",
    )
    parser.add_argument(
        "--admission",
        action="store_true",
        help="give hetmesh contracts the SLO as a hard max latency",
    )
    parser.add_argument("--json", action="store_true", help="print the full JSON document")
    parser.add_argument("--chart", type=Path, metavar="OUT.svg", help="write an SVG chart")
    parser.add_argument(
        "--progress",
        action="store_true",
        help="show progress on stderr even when it is not a terminal (always on a terminal)",
    )


def _policy(spec: str) -> Policy:
    if spec in TEMPLATES:
        return Policy.template(spec)
    path = Path(spec)
    if not path.is_file():
        raise InvalidInput(
            f"--policy {spec!r}: neither a template ({', '.join(TEMPLATES)}) nor a policy file"
        )
    try:
        return Policy.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as err:
        raise InvalidInput(f"{spec}:{err.lineno}: not valid JSON: {err.msg}") from None


def _baselines(spec: str) -> list[str]:
    if spec == "all":
        return list(BASELINES)
    if spec == "none":
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise InvalidInput(
            f"--baselines: unknown {', '.join(unknown)}; known: {', '.join(BASELINES)}"
        )
    return names


def progress_printer(
    stream: TextIO, *, force: bool = False, width: int = 30
) -> Callable[[str, int, int], None] | None:
    """Return a progress bar writer for ``stream``: on a TTY, or anywhere when ``force``.

    On a terminal the bar redraws in place; elsewhere (``--progress`` into a file) it
    writes one line per policy at each tenth of the tasks.
    """
    tty = stream.isatty()
    if not (tty or force):
        return None
    last: dict[str, int] = {}

    def show(name: str, done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        bar = f"{name:>24} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"
        if tty:
            stream.write("\r" + bar + ("\n" if done >= total else ""))
        else:
            tenth = 10 * done // max(total, 1)
            if last.get(name) == tenth:
                return
            last[name] = tenth
            stream.write(bar + "\n")
        stream.flush()

    return show


def table(doc: dict[str, Any]) -> str:
    """Return the policies' headline metrics (and carbon figures, when run) as aligned columns."""
    rows = [("policy", "mean ms", "p50 ms", "p99 ms", "SLO", "energy J", "rejected", "overhead %")]
    for name, m in doc["policies"].items():
        lat = m["latency_ms"]
        rows.append(
            (
                name,
                f"{lat['mean']:.2f}",
                f"{lat['p50']:.2f}",
                f"{lat['p99']:.2f}",
                f"{100 * m['slo_attainment']:.1f}%",
                f"{m['energy_j']:.1f}",
                str(m["rejected"]),
                f"{m['overhead_pct']:.3f}",
            )
        )
    lines = columns(rows, right=range(1, 8))
    gt = doc["ground_truth"]
    lines.append(
        f"({gt['label']}; {100 * gt['published_share']:.0f}% of feasible "
        "(model, device) pairs timed from published figures)"
    )
    if doc.get("carbon"):
        lines += ["", *carbon_table(doc["carbon"])]
    return "\n".join(lines)


def carbon_table(carbon: dict[str, Any]) -> list[str]:
    """Return, per policy, CO2 run at once vs with peak shifting, misses and per-site grams."""
    sites = sorted({s for c in carbon.values() for s in c["shifted"]["co2_g_by_site"]})
    head = ["policy", "CO2 g now", "CO2 g shifted", "saved (deferrable)", "deferred", "missed"]
    rows = [tuple(head + [f"{s} g" for s in sites])]
    for name, c in carbon.items():
        now, shifted = c["at_once"], c["shifted"]
        rows.append(
            (
                name,
                f"{now['co2_g']:.2f}",
                f"{shifted['co2_g']:.2f}",
                f"{100 * c['carbon_saving_deferrable']:.1f}%",
                f"{shifted['deferred']}/{shifted['deferrable']}",
                str(c["deadline_misses"]),
                *(f"{shifted['co2_g_by_site'].get(s, 0.0):.2f}" for s in sites),
            )
        )
    return columns(rows, right=range(1, len(rows[0])))


def run(args: argparse.Namespace) -> int:
    """Run the simulation ``args`` describe; 0 on success, InvalidInput for bad input."""
    fleet = load_fleet(args.fleet)
    workload = load_workload(args.workload)
    if args.load is not None:
        if not workload.mix or not 0 < args.load <= 10:
            raise InvalidInput("--load: needs a generator workload and a value in (0, 10]")
        workload = dataclasses.replace(workload, load=args.load)
    policies = [_policy(p) for p in (args.policy or ["latency-first"])]
    if not 0 <= args.noise <= 2:
        raise InvalidInput("--noise: expected a sigma in [0, 2]")
    doc = run_simulation(
        fleet,
        workload,
        policies,
        seed=args.seed,
        sigma=args.noise,
        baselines=_baselines(args.baselines),
        admission=args.admission,
        progress=progress_printer(sys.stderr, force=args.progress),
    )
    if fleet.sites or any(r.get("deferrable") for r in workload.rows or workload.mix):
        doc["carbon"] = {p.name: compare(fleet, workload, p, seed=args.seed) for p in policies}
    if args.chart is not None:
        args.chart.write_text(render_svg(doc, f"{fleet.name}: {workload.path}"), encoding="utf-8")
    print(json.dumps(doc, indent=2) if args.json else table(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``simulate`` standalone (``python -m cloud_hub.simulator.cli``)."""
    parser = argparse.ArgumentParser(prog="cloud-hub simulate", description=__doc__)
    configure(parser)
    try:
        return run(parser.parse_args(argv))
    except InvalidInput as err:
        print(f"cloud-hub simulate: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
