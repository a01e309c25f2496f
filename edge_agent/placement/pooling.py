"""Cold estimates from what a device has shown on other models (the ``DevicePooling`` mixin).

Every correction is measured / the uncorrected model (the roofline, or the roofline times
a published prior's factor: ``priors``), so a learned factor says how far the roofline is
off for that model on that device. Much of that error is the device's own (its runtime,
real clocks, memory system: a CPU whose roofline is 10x optimistic for one network is so
for most), the rest is the model's. A class named after a model (``TaskContract.model``)
never measured on a device, whose estimate there is still the bare roofline, starts
instead from the geometric mean of the factors learned on that device for other classes
(or, while it has none, on identical hardware: the same profile and unit), labelled
``explore.POOLED``; its exploration optimism is then ``explore.POOLED_WITHIN``, not the
roofline's. Its own first measurement replaces it. A task running far past its estimate
(``running.OVERRUN_EVIDENCE``) lends its lower bound at once (``_overrun``).

Before anything is measured on a device, its profile's published figures are the evidence:
each class whose model the profile publishes starts at published / roofline (``priors``),
and the geometric mean of those factors on a device (else on identical hardware) starts
its classes that have no published figure, labelled ``calibrated_label(n)`` ("roofline
calibrated on n published models") with the pooled optimism. Only the agent's own profile
file and the contracts it has seen are used. Measured factors on the device replace it.

A device slower (or faster) than its published figures is so for most models (clocks,
thermals, a runtime version): once a model with a published figure is measured there, the
geometric mean of measured / published over its measured models (else its twins') scales
the published priors of its models not measured yet (labelled ``DRIFTED``). On
bench_sim_slo (latency-first / oracle, seed 1, 50% / 80%, with the slo-first-only gate of
``first_flights`` under every policy at the time), slo-published with its two hidden-slow
devices went from 1.020 / 1.016 to 1.000 / 0.999; edge-mixed (its RK3588 NPUs 1.5x slow),
seeds 1-3 at 80%, from 1.117 / 1.468 / 1.155 to 1.126 / 1.428 / 1.144.

Identical hardware runs one network alike (the model's error on that hardware is the
same; instances differ by their clocks and thermals): a class measured on a device lends
its factor to the same class's cold pairs (roofline, pooled, calibrated) on the device's
twins (while the pair has few measurements, as the re-pool), times the ratio of the two
devices' drifts where both are measured (a twin slower
than its datasheet stays so), labelled ``explore.TWIN`` (explored within ``TWIN_WITHIN``).
A published prior is not replaced: it is already the vendor's figure for that hardware,
scaled by the twins' drift once one is measured (``DRIFTED``). Its own first measurement
replaces the lent factor. On bench_sim_slo edge-mixed at 80 %, latency-first / oracle over
seeds 1-40 went from 0.9576 to 0.9456 (docs/simulator.md, "Identical devices lend ...").

This spares the fleet the worst cold mistakes: a slow CPU's roofline is an order of
magnitude optimistic for every model, and each model would otherwise find that out with
tasks of its own (each as slow as the roofline is wrong), or a fast accelerator's roofline
pessimistic for every model, which each model would otherwise explore on its own.
"""

from __future__ import annotations

import math

from edge_agent.placement import learning
from edge_agent.placement.decision import Decision
from edge_agent.placement.explore import CALIBRATED, POOLED, TWIN, Explorer
from edge_agent.placement.priors import ROOFLINE
from edge_agent.placement.workspace import Workspace
from edge_agent.resources.device import Device

_POOL_SAMPLES = 8  # a pair's first measurements re-pool its device; later ones barely move it
_PUBLISHED = "published"  # the prefix of a published prior's source label (``priors``)
#: appended to a published prior's label once scaled by its device's drift (``_redrift``)
DRIFTED = " x the device's measured / published on other models"


def calibrated_label(n_models: int) -> str:
    """Return the source label of a roofline calibrated on ``n_models`` published figures."""
    return f"{CALIBRATED} {n_models} published model{'s' if n_models != 1 else ''}"


def _poolable(source: str) -> bool:
    """Return whether a pair's estimate is a cold start that pooled evidence may replace."""
    return source in (ROOFLINE, POOLED) or source.startswith(CALIBRATED)


def _twinnable(source: str) -> bool:
    """Return whether a twin's measurement of the same class may replace a pair's estimate."""
    return source == TWIN or _poolable(source)


def _mean(logs: dict[int, float] | None) -> float | None:
    """Return the mean of a device's logs, or None when it has none."""
    return sum(logs.values()) / len(logs) if logs else None


def hardware_key(device: Device) -> tuple[str, str] | None:
    """Return what identical devices share (profile, unit), or None without a profile."""
    if device.profile is None:
        return None
    return device.profile, device.id.rsplit("/", 1)[-1]


class DevicePooling:
    """Pools each device's learned factors into cold estimates for its unmeasured classes."""

    _ws: Workspace
    _sources: list[tuple[str, ...] | None]
    _samples: dict[tuple[int, int], int]
    devices: tuple[Device, ...]
    exploration: Explorer

    def _init_pooling(self) -> None:
        # device -> {class: log of its learned factor}; twins: device -> identical devices
        self._learned_logs: dict[int, dict[int, float]] = {}
        # device -> {class: log of published / roofline}: its profile's figures (priors)
        self._published_logs: dict[int, dict[int, float]] = {}
        # device -> {class: log of measured / published}: how far its figures were off
        self._drift_logs: dict[int, dict[int, float]] = {}
        self._poolable: set[int] = set()  # classes that name a model (others stay 1 when cold)
        keys = [hardware_key(d) for d in self.devices]
        self._twins = [
            tuple(j for j, other in enumerate(keys) if k is not None and other == k and j != i)
            for i, k in enumerate(keys)
        ]

    def _pooled(self, d: int) -> tuple[float, str] | None:
        """Return (factor, label): ``d``'s measured factors pooled, else its published ones.

        Each is the geometric mean over ``d`` itself, else over its twins (identical hardware).
        """
        for pool, measured in ((self._learned_logs, True), (self._published_logs, False)):
            for group in ((d,), self._twins[d]):
                logs = [v for j in group for v in pool.get(j, {}).values()]
                if logs:
                    n = len({c for j in group for c in pool.get(j, {})})
                    label = POOLED if measured else calibrated_label(n)
                    return math.exp(sum(logs) / len(logs)), label
        return None

    def _learned(self, cls: int, d: int, n: int, factor: float) -> None:
        """A measurement of (cls, d) (its ``n``-th, now at ``factor``): re-pool the device's
        cold classes."""
        self._lend(cls, d, math.log(factor), repool=n <= _POOL_SAMPLES)

    def _lend(self, cls: int, d: int, log_factor: float, *, repool: bool) -> None:
        """Record (cls, d)'s measured factor (and its drift from a published figure); while
        the pair has few measurements, lend it to the device's twins and re-pool."""
        self._learned_logs.setdefault(d, {})[cls] = log_factor
        published = self._published_logs.get(d, {}).get(cls)
        if published is not None:
            self._drift_logs.setdefault(d, {})[cls] = log_factor - published
        if repool:
            if self._twins[d]:
                self._lend_twins(cls, d, log_factor)
            self._repool(d)
            self._redrift(d)

    def _lend_twins(self, cls: int, d: int, log_factor: float) -> None:
        """Start the cold (cls, j) of ``d``'s twins from (cls, d)'s measured factor (``TWIN``).

        Each is scaled by how much slower than its published figures twin ``j`` runs than
        ``d`` does, where both devices have measured that on models of their own.
        """
        sources = list(self._sources[cls] or (ROOFLINE,) * len(self.devices))
        drift_d = _mean(self._drift_logs.get(d))
        samples, corrections, labelled = self._samples, self._ws.corrections, False
        for j in self._twins[d]:
            if samples.get((cls, j), 0) or not _twinnable(sources[j]):
                continue  # measured, or a published prior (drifted with its twins: _redrift)
            drift_j = _mean(self._drift_logs.get(j))
            shift = 0.0 if drift_j is None or drift_d is None else drift_j - drift_d
            corrections[cls, j] = learning.clamp(math.exp(log_factor + shift))
            if sources[j] != TWIN:
                sources[j], labelled = TWIN, True
        if labelled:
            self._sources[cls] = tuple(sources)
            self.exploration.set_sources(cls, self._sources[cls] or ())

    def _overrun(self, decision: Decision, elapsed: float) -> None:
        """A task still running ``elapsed`` s, far past its charge: a lower bound, used now.

        Its class's factor on its devices rises to at least elapsed / uncorrected estimate,
        and, while the pair has few measurements, so does what it lends the device's pool.
        """
        cls = decision.task_class_index
        floor = learning.clamp(elapsed / max(decision.base_s, 1e-12))
        row = self._ws.corrections[cls]
        for d in decision.device_indices:
            if row[d] < floor:
                row[d] = floor
                if self._samples.get((cls, d), 0) <= _POOL_SAMPLES:
                    self._lend(cls, d, math.log(floor), repool=True)

    def _repool(self, d: int) -> None:
        """Re-start the cold classes of ``d`` and of its twins from their pooled factors."""
        for j in (d, *self._twins[d]):
            pooled = self._pooled(j)
            if pooled is not None:
                for c in range(len(self._sources)):
                    self._pool_into(c, j, *pooled)

    def _drift(self, d: int) -> float | None:
        """Return the geometric mean of measured / published on ``d`` (else on its twins)."""
        for group in ((d,), self._twins[d]):
            logs = [v for j in group for v in self._drift_logs.get(j, {}).values()]
            if logs:
                return math.exp(sum(logs) / len(logs))
        return None

    def _redrift(self, d: int) -> None:
        """Scale the unmeasured published priors of ``d`` and its twins by their drift."""
        for j in (d, *self._twins[d]):
            drift = self._drift(j)
            if drift is None:
                continue
            for c, log_factor in self._published_logs.get(j, {}).items():
                if not self._samples.get((c, j), 0):
                    self._ws.corrections[c, j] = learning.clamp(math.exp(log_factor) * drift)
                    self._label_drifted(c, j)

    def _label_drifted(self, cls: int, d: int) -> None:
        sources = self._sources[cls]
        if sources is not None and not sources[d].endswith(DRIFTED):
            self._sources[cls] = (*sources[:d], f"{sources[d]}{DRIFTED}", *sources[d + 1 :])

    def _pool_class(self, cls: int) -> None:
        """Start a new model's class's cold pairs from their devices' pooled factors.

        Its published priors (``priors``) first join their devices' published evidence,
        which re-starts those devices' cold classes.
        """
        self._poolable.add(cls)
        sources = self._sources[cls] or ()
        for d, source in enumerate(sources):
            if source.startswith(_PUBLISHED):
                factor = float(self._ws.corrections[cls, d])
                self._published_logs.setdefault(d, {})[cls] = math.log(factor)
                self._repool(d)
        for d in range(len(self.devices)):
            pooled = self._pooled(d)
            if pooled is not None:
                self._pool_into(cls, d, *pooled)

    def _pool_into(self, cls: int, d: int, factor: float, label: str) -> None:
        if cls not in self._poolable:
            return
        sources = self._sources[cls] or (ROOFLINE,) * len(self.devices)
        if not _poolable(sources[d]) or self._samples.get((cls, d), 0):
            return  # a published prior, a twin's measurement, or measured: better evidence
        self._ws.corrections[cls, d] = learning.clamp(factor)
        if sources[d] != label:
            self._sources[cls] = (*sources[:d], label, *sources[d + 1 :])
            self.exploration.set_sources(cls, self._sources[cls] or ())
