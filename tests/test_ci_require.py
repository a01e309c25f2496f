"""CI fails instead of skipping: HETMESH_REQUIRE_ALL / HETMESH_REQUIRE_NETNS in tests/conftest.py.

Each case runs pytest in a subprocess on a scratch directory holding a copy of the suite's
conftest and a small test file, with and without the switches, and reads its outcomes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")
INNER = """
import pytest

def test_skips():
    pytest.skip("a real component is missing")

@pytest.mark.platform
@pytest.mark.skipif(True, reason="another kind of machine")
def test_platform_branch():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False

def test_lan(netns_fleet):
    netns_fleet(None, [("a", "10.9.0.2")], "key", {})
"""


def _outcomes(tmp_path: Path, **env: str) -> tuple[dict[str, int], str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    base = {k: v for k, v in os.environ.items() if not k.startswith("HETMESH_REQUIRE")}
    # no `ip` on PATH: the network-namespace fixture cannot make namespaces
    base["PATH"] = str(tmp_path)
    # the conftest imports its helpers from tests/support: importable, outside what is collected
    lib = tmp_path.parent / f"{tmp_path.name}-lib"
    (lib / "tests").mkdir(parents=True, exist_ok=True)
    if not (lib / "tests" / "support").exists():
        (lib / "tests" / "support").symlink_to(CONFTEST.parent / "support")
    base["PYTHONPATH"] = str(lib)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    tail = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", tail)}
    return counts | {"rc": proc.returncode}, proc.stdout


def test_without_the_switches_missing_components_skip(tmp_path: Path) -> None:
    got, _ = _outcomes(tmp_path)
    assert got == {"skipped": 3, "xfailed": 1, "rc": 0}


def test_require_all_turns_every_non_platform_skip_into_a_failure(tmp_path: Path) -> None:
    got, out = _outcomes(tmp_path, HETMESH_REQUIRE_ALL="1")
    # test_skips and test_lan fail; the platform branch still skips; xfail stays xfail
    assert got == {"failed": 2, "skipped": 1, "xfailed": 1, "rc": 1}
    assert "FAILED test_inner.py::test_skips" in out and "a real component is missing" in out
    assert "network namespaces unavailable" in out


def test_require_netns_fails_the_netns_fixture_alone(tmp_path: Path) -> None:
    got, out = _outcomes(tmp_path, HETMESH_REQUIRE_NETNS="1")
    assert got == {"failed": 1, "skipped": 2, "xfailed": 1, "rc": 1}
    assert "ERROR test_inner.py::test_lan" in out or "FAILED test_inner.py::test_lan" in out
