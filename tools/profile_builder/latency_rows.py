"""Latency-row helpers shared by the importers: model and precision names, row objects."""

from __future__ import annotations

import re
from typing import Any


def split_variant(model: str) -> tuple[str, str | None]:
    """'resnet50 (mlperf tf)' -> ('resnet50', 'mlperf tf')."""
    m = re.match(r"^(.*?)\s*\((.*)\)\s*$", model)
    return (m.group(1), m.group(2)) if m else (model, None)


def normalize(name: str) -> str:
    """Lower-case snake model key (the loader applies the same rule to queries)."""
    return re.sub(r"[^a-z0-9.]+", "_", name.strip().lower()).strip("_")


def norm_precision(text: str, kind: str) -> tuple[str, str | None]:
    """Map a source's precision text to a vocab name plus the original detail."""
    low = text.lower()
    if low.startswith(("int8", "w8a8", "w8a16")):
        name = "int8"
    elif low.startswith("fp16"):
        name = "fp16"
    elif low.startswith("fp32"):
        name = "fp32"
    elif low == "float":
        name = "fp16" if kind == "npu" else "fp32"
        return name, "float model (the HTP computes float at fp16)"
    else:
        raise SystemExit(f"unmapped precision {text!r}")
    return name, None if low == name else text


def row(
    model: str,
    latency_ms: float,
    precision: str,
    batch: int,
    metric: str,
    status: str,
    source: str,
    **extra: Any,
) -> dict[str, Any]:
    """One latency row in schema order; empty optional values are dropped."""
    out: dict[str, Any] = {
        "model": normalize(model),
        "latency_ms": round(latency_ms, 4),
        "precision": precision,
        "batch": batch,
        "metric": metric,
        "status": status,
        "source": source,
    }
    out.update({k: v for k, v in extra.items() if v not in (None, "", False)})
    return out
