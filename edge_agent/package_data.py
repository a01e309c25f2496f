"""Where shipped data folders live: installed package data, else the source checkout."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]


def package_data_dir(package: str, checkout_folder: str) -> Path:
    """Return the folder of data package ``package`` (e.g. "edge_agent.models").

    pip installs the top-level folder ``checkout_folder`` as that package; in a source
    checkout (no install) the folder is used where it is.
    """
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    return _CHECKOUT / checkout_folder
