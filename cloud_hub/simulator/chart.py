"""A hand-written SVG chart comparing policies: mean/p99 latency (log scale) and energy."""

from __future__ import annotations

import math
from html import escape
from typing import Any

_W, _ROW, _LEFT, _PANEL = 980, 22, 130, 400
_COLORS = {"mean": "#3b6ea5", "p99": "#a9c4e0", "energy": "#6a9f58"}


def _log_x(value: float, lo: float, hi: float) -> float:
    v = min(max(value, lo), hi)
    return _PANEL * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))


def render_svg(doc: dict[str, Any], title: str = "hetmesh what-if") -> str:
    """Return an SVG document with one row per policy: latency bars and an energy bar."""
    pols: dict[str, dict[str, Any]] = doc["policies"]
    names = list(pols)
    top_ms = max(pols[n]["latency_ms"]["p99"] for n in names)
    unit, per = ("h", 3.6e6) if top_ms > 3.6e6 else ("s", 1e3) if top_ms > 1e4 else ("ms", 1.0)
    lats = [pols[n]["latency_ms"][k] / per for n in names for k in ("mean", "p99")]
    lo = 10 ** math.floor(math.log10(max(min(lats), 1e-3)))
    hi = 10 ** math.ceil(math.log10(max(max(lats), lo * 10)))
    e_max = max(pols[n]["energy_j"] for n in names) or 1.0
    top = 60
    height = top + _ROW * 2 * len(names) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{_LEFT}" y="45">latency, {unit} (log scale): mean (dark), p99 (light)</text>',
        f'<text x="{_LEFT + _PANEL + 40}" y="45">task energy, J · SLO attainment</text>',
    ]
    decade = lo
    while decade <= hi:
        x = _LEFT + _log_x(decade, lo, hi)
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" y2="{height - 30}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{height - 15}" text-anchor="middle">{decade:g}</text>')
        decade *= 10
    for i, name in enumerate(names):
        m = pols[name]
        y = top + i * 2 * _ROW
        out.append(f'<text x="{_LEFT - 8}" y="{y + _ROW}" text-anchor="end">{escape(name)}</text>')
        for j, key in enumerate(("mean", "p99")):
            value = m["latency_ms"][key] / per
            w = _log_x(value, lo, hi)
            out.append(
                f'<rect x="{_LEFT}" y="{y + j * _ROW * 0.9:.1f}" width="{w:.1f}" '
                f'height="{_ROW * 0.85:.1f}" fill="{_COLORS[key]}"/>'
            )
            out.append(
                f'<text x="{_LEFT + w + 4:.1f}" y="{y + j * _ROW * 0.9 + 14:.1f}">'
                f"{value:.3g}</text>"
            )
        ex = _LEFT + _PANEL + 40
        ew = (_W - ex - 120) * m["energy_j"] / e_max
        out.append(
            f'<rect x="{ex}" y="{y + 4}" width="{ew:.1f}" height="{_ROW * 1.2:.1f}" '
            f'fill="{_COLORS["energy"]}"/>'
        )
        out.append(
            f'<text x="{ex + ew + 4:.1f}" y="{y + _ROW}">{m["energy_j"]:.3g} J · '
            f"{100 * m['slo_attainment']:.1f}%</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
