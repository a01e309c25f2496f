"""Bursty arrivals: a two-state Markov-modulated Poisson process (on/off), seeded.

The process alternates ON and OFF phases with exponential dwell times (means ``on_s`` and
``off_s``); within a phase arrivals are Poisson at ``peak`` x the mean rate (ON) or at the
rate that brings the long-run mean back to ``rate`` (OFF). With ``peak`` = 1 it is a plain
Poisson process. The long-run mean is ``rate`` exactly: ``p*peak + (1-p)*low = 1`` with
``p = on_s / (on_s + off_s)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OnOff:
    """Burst shape: ON-phase rate = ``peak`` x mean; mean phase lengths in seconds."""

    peak: float = 1.6
    on_s: float = 0.2
    off_s: float = 0.2

    def low(self) -> float:
        """Return the OFF-phase rate as a multiple of the mean rate."""
        p = self.on_s / (self.on_s + self.off_s)
        return (1.0 - p * self.peak) / (1.0 - p)

    def check(self) -> None:
        """Raise ValueError when the shape cannot average to the mean rate."""
        if not (self.on_s > 0 and self.off_s > 0 and self.peak >= 1.0 and self.low() >= 0.0):
            raise ValueError("OnOff: need on_s, off_s > 0 and 1 <= peak <= (on_s + off_s) / on_s")


def onoff_times(
    rate: float, n: int, shape: OnOff, rng: np.random.Generator, *, exact_mean: bool = False
) -> np.ndarray:
    """Return ``n`` increasing arrival times of an on/off process with mean ``rate``/s.

    A short run holds few phases, so its realised rate strays from ``rate`` by several
    percent; ``exact_mean`` stretches the time axis (bursts keep their shape) so that the
    ``n`` arrivals span exactly ``n / rate`` seconds: the offered load is then the one asked.
    """
    if not rate > 0 or n < 0:
        raise ValueError("onoff_times: rate must be > 0 and n >= 0")
    shape.check()
    out = np.empty(n)
    k, t, on = 0, 0.0, bool(rng.random() < shape.on_s / (shape.on_s + shape.off_s))
    while k < n:
        end = t + rng.exponential(shape.on_s if on else shape.off_s)
        lam = rate * (shape.peak if on else shape.low())
        while lam > 0 and k < n:
            t += rng.exponential(1.0 / lam)  # memoryless: restart the gap at a phase change
            if t >= end:
                break
            out[k] = t
            k += 1
        t, on = end, not on
    if exact_mean and n:
        out *= (n / rate) / out[-1]
    return out
