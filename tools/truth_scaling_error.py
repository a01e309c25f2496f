"""Calibrate the simulator's GOPs-scaling rule (``truth.SCALED_SIGMA``) on published pairs.

For every firmware profile device and every model of ``cloud_hub/simulator/models.py``
with a published figure on it, predict that figure from the device's other figures with
``truth.scaled_s`` (the rule that times pairs without a figure) and print the spread of
log(predicted / published); ``sigma_robust`` is the sigma a scaled pair's own noise
is drawn with.
Run: ``PYTHONPATH=. python tools/truth_scaling_error.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from cloud_hub.simulator.fleet import parse_fleet
from cloud_hub.simulator.models import MODELS
from cloud_hub.simulator.truth import published_s, scaled_s

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    """Print one JSON line: the pairs used, the sigma and the median absolute log error."""
    profiles = sorted(p.stem for p in (ROOT / "firmware_profiles").glob("*.json"))
    fleet = parse_fleet({"boxes": [{"id": p, "profile": p} for p in profiles]})
    errors = []
    for sd in fleet.devices:
        for name, info in MODELS.items():
            if info.task_type == "training":
                continue
            pub = published_s(sd, name, "int8")
            if pub is None or not math.isfinite(pub[0]):
                continue
            pred = scaled_s(sd, name, "int8")
            if pred is not None:
                errors.append(math.log(pred[0] / pub[0]))
    err = np.asarray(errors)
    print(
        json.dumps(
            {
                "pairs_n": len(err),
                "sigma_log": round(float(np.std(err)), 3),
                "median_abs_log": round(float(np.median(np.abs(err))), 3),
                # the sigma of a normal with that median absolute value (robust to tails)
                "sigma_robust": round(float(np.median(np.abs(err))) / 0.6745, 3),
                "bias_log": round(float(np.mean(err)), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
