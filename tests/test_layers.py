"""Imports only point down a layer: the layer table below, checked on every import.

Every import in ``edge_agent`` and ``cloud_hub`` (inside functions and ``TYPE_CHECKING``
blocks too, relative ones and ``importlib.import_module("...")`` with a literal name) is read
from the source with ``ast`` and must go from a unit to a unit of a lower row of its own
stack or of the shared stack. docs/architecture.md shows the same table; change both
together, and place every new package or top-level module in it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edge_agent", "cloud_hub")
SHARED, AGENT, HUB = "shared", "agent", "hub"

#: Bottom row first: (stack, layer, units). A unit is a top-level module or a package with all
#: its submodules, or several joined by "+" (one unit: they may import each other). A unit
#: may import units of lower rows of its own stack or of the shared stack, nothing else: not
#: its neighbours in the row, nothing above, and the agent and hub stacks never each other.
LAYERS: tuple[tuple[str, str, str], ...] = (
    (SHARED, "base", "edge_agent edge_agent.errors edge_agent.package_data"),
    (SHARED, "inputs", "edge_agent.resources edge_agent.carbon_series"),
    (SHARED, "tasks", "edge_agent.tasks"),
    (
        SHARED,
        "rules and storage",
        "edge_agent.placement edge_agent.scheduling edge_agent.predictor edge_agent.storage",
    ),
    (
        SHARED,
        "service kit",
        "edge_agent.http_errors+edge_agent.http_express+edge_agent.http_limits+edge_agent.http_logging"
        "+edge_agent.http_page+edge_agent.id_prefix edge_agent.loops edge_agent.config_file"
        " edge_agent.clikit edge_agent.api_token",
    ),
    (SHARED, "mesh library", "edge_agent.mesh"),
    (SHARED, "agent-hub protocol", "edge_agent.protocol"),
    (AGENT, "agent daemon", "edge_agent.agent"),
    (
        AGENT,
        "agent commands",
        "edge_agent.cli+edge_agent.cli_agent+edge_agent.cli_agent_http+edge_agent.cli_agent_views"
        "+edge_agent.cli_place",
    ),
    (HUB, "hub base", "cloud_hub cloud_hub.datasets"),
    (HUB, "hub libraries", "cloud_hub.simulator cloud_hub.learning"),
    (HUB, "hub service", "cloud_hub.hub"),
    (HUB, "showcases", "cloud_hub.demo"),
    (HUB, "hub commands", "cloud_hub.cli"),
)


def _placement() -> dict[str, tuple[int, str, str]]:
    """Return {unit key: (row, stack, unit)} from ``LAYERS``."""
    placed: dict[str, tuple[int, str, str]] = {}
    for row, (stack, _, units) in enumerate(LAYERS):
        for unit in units.split():
            for key in unit.split("+"):
                assert key not in placed, f"{key} is placed twice in LAYERS"
                placed[key] = (row, stack, unit)
    return placed


PLACED = _placement()


def unit_key(module: str) -> str:
    """Return the table key of ``module``: its top-level module or package."""
    return ".".join(module.split(".")[:2])


def allowed(importer: str, target: str) -> bool:
    """Return whether module ``importer`` may import module ``target``."""
    row, stack, unit = PLACED[unit_key(importer)]
    to_row, to_stack, to_unit = PLACED[unit_key(target)]
    if unit == to_unit:
        return True
    return to_row < row and to_stack in (SHARED, stack)


def source_modules(root: Path = ROOT) -> dict[str, str]:
    """Return {module name: source} of every module of ``PACKAGES`` under ``root``."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path.read_text()
    return found


def imports(module: str, source: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """Yield (line, module imported) for every import of ``PACKAGES`` in ``source``."""
    is_package = f"{module}.__init__" in known or any(k.startswith(f"{module}.") for k in known)
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for name in names:
            if name.split(".")[0] in PACKAGES:
                yield node.lineno, name


def upward_imports(sources: Mapping[str, str]) -> list[str]:
    """Return one line per import that breaks ``LAYERS``, naming the module and the import."""
    known = set(sources)
    broken = []
    for module, source in sorted(sources.items()):
        for line, target in sorted(imports(module, source, known)):
            if not allowed(module, target):
                row, to_row = PLACED[unit_key(module)][0], PLACED[unit_key(target)][0]
                broken.append(
                    f"{module}:{line} imports {target}: {LAYERS[row][1]} "
                    f"({unit_key(module)}) may not import {LAYERS[to_row][1]} "
                    f"({unit_key(target)})"
                )
    return broken


def test_no_import_points_up_a_layer() -> None:
    broken = upward_imports(source_modules())
    assert not broken, "imports that point up a layer:\n" + "\n".join(broken)


def test_every_package_and_module_is_placed_in_the_table() -> None:
    keys = {unit_key(module) for module in source_modules()}
    unplaced = sorted(keys - set(PLACED))
    assert not unplaced, f"place these in tests/test_layers.py LAYERS: {unplaced}"
    stale = sorted(set(PLACED) - keys)
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


SYNTHETIC = {
    "edge_agent.placement.fake": (
        "from typing import TYPE_CHECKING\n"
        "from edge_agent.tasks.contract import TaskContract\n"  # down: fine
        "from edge_agent.placement import policy\n"  # its own unit: fine
        "if TYPE_CHECKING:\n"
        "    from edge_agent.agent.core.store import Store\n"
        "def late():\n"
        "    import edge_agent.mesh.node\n"
        "    from . import policy\n"  # relative, its own unit: fine
        "    from ..agent import service\n"
    ),
    "edge_agent.placement": "",
    "edge_agent.placement.policy": "",
    "edge_agent.tasks.contract": "",
    "edge_agent.agent.core.store": "",
    "edge_agent.agent.service": "",
    "edge_agent.mesh.node": "",
    "edge_agent.mesh.fake": (
        "import cloud_hub.hub.store\nfrom edge_agent.protocol import hub_auth\n"
    ),
    "edge_agent.protocol.hub_auth": "from edge_agent.mesh import node\n",
    "cloud_hub.hub.store": "",
    "cloud_hub.hub.fake": (
        "import importlib\n"
        "from edge_agent.storage.db import Database\n"  # shared, lower: fine
        "importlib.import_module('edge_agent.agent.core.store')\n"
    ),
    "edge_agent.storage.db": "",
}


def test_a_synthetic_upward_import_is_named_with_its_module_and_line() -> None:
    broken = upward_imports(SYNTHETIC)
    assert broken == [
        "cloud_hub.hub.fake:3 imports edge_agent.agent.core.store: hub service (cloud_hub.hub) "
        "may not import agent daemon (edge_agent.agent)",
        "edge_agent.mesh.fake:1 imports cloud_hub.hub.store: mesh library (edge_agent.mesh) "
        "may not import hub service (cloud_hub.hub)",
        "edge_agent.mesh.fake:2 imports edge_agent.protocol.hub_auth: mesh library "
        "(edge_agent.mesh) may not import agent-hub protocol (edge_agent.protocol)",
        "edge_agent.placement.fake:5 imports edge_agent.agent.core.store: rules and storage "
        "(edge_agent.placement) may not import agent daemon (edge_agent.agent)",
        "edge_agent.placement.fake:7 imports edge_agent.mesh.node: rules and storage "
        "(edge_agent.placement) may not import mesh library (edge_agent.mesh)",
        "edge_agent.placement.fake:9 imports edge_agent.agent.service: rules and storage "
        "(edge_agent.placement) may not import agent daemon (edge_agent.agent)",
    ]


@pytest.mark.parametrize(
    ("importer", "target", "ok"),
    [
        ("edge_agent.placement.pools", "edge_agent.resources.device", True),
        ("edge_agent.placement.pools", "edge_agent.storage.db", False),  # a neighbour
        ("edge_agent.http_limits", "edge_agent.http_errors", True),  # one unit
        ("edge_agent.cli_agent", "edge_agent.cli", True),  # one unit
        ("edge_agent.cli", "edge_agent.agent.daemon", True),
        ("edge_agent.agent.service", "edge_agent.cli", False),
        ("cloud_hub.hub.api", "edge_agent.protocol.hub_auth", True),
        ("cloud_hub.hub.api", "edge_agent.agent.service", False),
        ("cloud_hub.simulator.pools", "edge_agent.placement.pools", True),
        ("cloud_hub.simulator.pools", "cloud_hub.learning.registry", False),
        ("edge_agent.agent.service", "cloud_hub.hub.api", False),
        ("cloud_hub.cli", "cloud_hub.demo.cli", True),
    ],
)
def test_the_table_allows_down_and_own_stack_only(importer: str, target: str, ok: bool) -> None:
    assert allowed(importer, target) is ok
