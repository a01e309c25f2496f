"""What a pulled load model is judged on: each device's recent telemetry, and the agent's own
personalised candidate (Ditto, ``edge_agent.predictor.personalise``) built from older telemetry.

Bounded: at most ``VALIDATE_BUCKETS`` buckets per device for the gate, and
``PERSONALISE_BUDGET`` buckets across all devices for personalising (its CPU time).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import FeatureSpec, device_series
from edge_agent.predictor.personalise import (
    Personalised,
    TooLittleData,
    personalise,
    split_for_gate,
)

#: A device's utilization series and the time its first bucket starts.
Series = tuple[np.ndarray[Any, Any], float]
#: Buckets of recent telemetry a candidate is validated on (per device), at most.
VALIDATE_BUCKETS = 240
#: Buckets of telemetry the personalised model is trained, chosen and gated on (per device), at
#: most, and across all devices together: bounds its CPU time (well under a second here).
PERSONALISE_BUCKETS = 720
PERSONALISE_BUDGET = 2880


def recent_series(
    db_path: Path,
    devices: Sequence[str],
    spec: FeatureSpec,
    now: float,
    buckets: int = VALIDATE_BUCKETS,
) -> list[tuple[np.ndarray[Any, Any], float]]:
    """Each device's recent utilization series (at most ``buckets`` buckets) (blocking)."""
    since = now - spec.bucket_s * buckets
    return device_series(str(db_path), spec.bucket_s, devices, since, now)


def personalise_buckets(n_devices: int) -> int:
    """Buckets per device the personalised model is built and gated on (the CPU bound)."""
    return max(VALIDATE_BUCKETS, min(PERSONALISE_BUCKETS, PERSONALISE_BUDGET // max(n_devices, 1)))


def _newest(series: Sequence[Series], spec: FeatureSpec, buckets: int) -> list[Series]:
    """Each series' newest ``buckets`` buckets (the gate's usual slice)."""
    out = []
    for values, t0 in series:
        skip = max(0, values.shape[0] - buckets)
        out.append((values[skip:], t0 + spec.bucket_s * skip))
    return out


def personal_candidate(
    data: bytes, series: Sequence[Series], spec: FeatureSpec
) -> tuple[Personalised | None, list[Series], str]:
    """The agent's own candidate from ``data``, the series to gate on, and why there is none.

    Blocking (call in a thread). With enough older telemetry: Ditto on the older part of each
    device's series (``split_for_gate``), the newest part for the gate. Otherwise no
    candidate, the usual newest VALIDATE_BUCKETS for the gate, and the reason.
    """
    older, gate = split_for_gate(series, spec)
    try:
        return personalise(data, older, spec), gate, ""
    except TooLittleData as err:
        note = f"too little data to personalise: {err}"
    except InvalidInput as err:
        note = f"not personalised: {err}"
    return None, _newest(series, spec, VALIDATE_BUCKETS), note
