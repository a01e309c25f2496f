#!/usr/bin/env python3
"""Dev-only: regenerate ``firmware_profiles/*.json`` from the public data set.

Reads ``tools/profile_data/`` (devices.json and the latency CSVs beside it, each folder with
its ORIGIN.txt and license; ``--data`` for another copy) and writes one
profile per board. Nothing at run time imports this script or its ``profile_builder``
package beside it; the generated JSON files are the product and are committed.
Hand-written choices — match rules, estimates for figures the sources do not give, which
rows map to which device — are the commented data tables in ``tools/profile_builder/``
(one module per concern, listed in its ``__init__``), so every number in a profile can be
traced to a line there.

    python tools/build_profiles.py                # write firmware_profiles/*.json
    python tools/build_profiles.py --check        # exit 1 if the files are stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from profile_builder.build import build_all, render
from profile_builder.data import Data

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "tools" / "profile_data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "firmware_profiles")
    parser.add_argument("--check", action="store_true", help="fail if files are stale")
    args = parser.parse_args(argv)
    profiles = build_all(Data(args.data))
    stale = []
    for pid, doc in sorted(profiles.items()):
        path = args.out / f"{pid}.json"
        text = render(doc)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
            continue
        path.write_text(text, encoding="utf-8")
    if stale:
        print("stale profiles: " + ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{len(profiles)} profiles {'checked' if args.check else 'written'} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
