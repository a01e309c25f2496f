"""Where the repository's copies of public traces live (``benchmarks/data``).

They ship with the source checkout, not with the installed package: an installed package
(as in CI, which runs from the checkout) finds them under the current directory.
"""

from __future__ import annotations

from pathlib import Path


def benchmarks_data() -> Path:
    """Return ``benchmarks/data`` of the checkout beside the package, else of the cwd."""
    beside = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
    return beside if beside.is_dir() else Path.cwd() / "benchmarks" / "data"
