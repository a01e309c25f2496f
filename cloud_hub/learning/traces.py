"""Per-site load series from real traces: Philly virtual clusters and Alibaba openb."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from cloud_hub.datasets import benchmarks_data
from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import series_from_intervals

FloatArray = NDArray[np.float64]


DATA_DIR = benchmarks_data()
MIN_BUCKETS = 200
KINDS = ("arrivals", "running")


@dataclass(frozen=True)
class Site:
    """One site's load series: GPU demand of running jobs, one value per bucket."""

    name: str
    t0: float
    bucket_s: float
    series: FloatArray


def philly_sites(
    directory: Path | None = None, bucket_s: float = 3600.0, kind: str = "arrivals"
) -> list[Site]:
    """One site per Philly virtual-cluster trace (GPUs arriving, or running from arrival)."""
    d = directory or DATA_DIR / "gavel"
    thr_path = d / "v100_isolated_throughputs.json"
    try:
        thr: dict[str, float] = json.loads(thr_path.read_text())
    except (OSError, ValueError) as err:
        raise InvalidInput(f"cannot read throughputs {thr_path}: {err}") from err
    sites = []
    for path in sorted((d / "traces").glob("*.trace")):
        starts, ends, gpus = [], [], []
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            cols = line.split("\t")
            try:
                job, steps, arrival, scale = cols[0], int(cols[4]), float(cols[5]), int(cols[6])
            except (IndexError, ValueError) as err:
                raise InvalidInput(f"{path}:{lineno}: malformed trace line: {err}") from err
            rate = thr.get(str((job, scale))) or thr.get(str((job, 1)))
            if not rate:
                continue  # job type Gavel never measured on a V100: no run time to derive
            starts.append(arrival)
            ends.append(arrival + steps / rate)
            gpus.append(float(scale))
        name = path.stem.removeprefix("msr_seed0_")
        site = _site(f"philly-{name}", starts, ends, gpus, bucket_s, kind)
        if site is not None:
            sites.append(site)
    return sites


def openb_sites(
    path: Path | None = None, bucket_s: float = 3600.0, kind: str = "arrivals"
) -> list[Site]:
    """Alibaba openb pods split by QoS class (LS, BE): GPUs arriving, or requested while up."""
    p = path or DATA_DIR / "openb" / "openb_pod_list_default.csv"
    by_qos: dict[str, tuple[list[float], list[float], list[float]]] = {}
    with p.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if not row.get("deletion_time") or row.get("qos") not in ("LS", "BE"):
                continue
            gpus = int(row["num_gpu"]) * int(row["gpu_milli"]) / 1000.0
            if gpus <= 0:
                continue
            s, e, w = by_qos.setdefault(row["qos"], ([], [], []))
            s.append(float(row["creation_time"]))
            e.append(float(row["deletion_time"]))
            w.append(gpus)
    sites = []
    for qos in sorted(by_qos):
        site = _site(f"openb-{qos}", *by_qos[qos], bucket_s, kind)
        if site is not None:
            sites.append(site)
    return sites


def all_sites(bucket_s: float = 3600.0, kind: str = "arrivals") -> list[Site]:
    """Every site the evaluation uses, from the copies under benchmarks/data."""
    return philly_sites(bucket_s=bucket_s, kind=kind) + openb_sites(bucket_s=bucket_s, kind=kind)


def _site(
    name: str,
    starts: list[float],
    ends: list[float],
    weights: list[float],
    bucket_s: float,
    kind: str,
) -> Site | None:
    """A Site from job intervals, or None if its span is under MIN_BUCKETS buckets."""
    if kind not in KINDS:
        raise InvalidInput(f"series kind must be one of {KINDS}, got {kind!r}")
    if not starts:
        return None
    t0 = math.floor(min(starts) / bucket_s) * bucket_s
    t1 = max(starts)  # stop at the last arrival: after it the series only drains
    if (t1 - t0) / bucket_s < MIN_BUCKETS:
        return None
    if kind == "running":
        series = series_from_intervals(
            np.asarray(starts), np.asarray(ends), np.asarray(weights), t0, t1, bucket_s
        )
    else:
        n = math.ceil((t1 - t0) / bucket_s)
        idx = np.minimum(((np.asarray(starts) - t0) // bucket_s).astype(np.int64), n - 1)
        series = np.bincount(idx, weights=np.asarray(weights), minlength=n).astype(np.float64)
    return Site(name, t0, bucket_s, series)
