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

A feedback's share of this grows at most linearly with a device's twins (session 11; it
grew with their square: 1.5-3 ms a feedback on average among 64 identical CPUs): the means
are cached per device and per group of twins (``device_logs``, summed as before, so bit for
bit the same factors), a re-pool or re-drift passes over ``d`` and the twins marked since
the group's last one (those whose pooled factor or drift moved, or whose factor was
imported), not the whole group, and a class's twins that can no longer take a lent factor
are dropped from its lending list (``_lendable``). docs/performance.md, "Pooling's cost on
identical devices". A pass that relabels many pairs of a class (a new class on every
device, a re-pool over many twins) tells the explorer once (``_relabel``; session 12: it was
once a pair, each over the fleet; docs/performance.md, "A class's sources told to the
explorer once").

This spares the fleet the worst cold mistakes: a slow CPU's roofline is an order of
magnitude optimistic for every model, and each model would otherwise find that out with
tasks of its own (each as slow as the roofline is wrong), or a fast accelerator's roofline
pessimistic for every model, which each model would otherwise explore on its own.
"""

from __future__ import annotations

import math

from edge_agent.placement import learning
from edge_agent.placement.decision import Decision
from edge_agent.placement.device_logs import DeviceLogs
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
    _correction_cells: memoryview[float]  # corrections[cls, d] at cls * n + d (Placer._bind)
    devices: tuple[Device, ...]
    exploration: Explorer

    def _init_pooling(self) -> None:
        keys = [hardware_key(d) for d in self.devices]
        alike: dict[tuple[str, str], list[int]] = {}
        for d, key in enumerate(keys):
            if key is not None:
                alike.setdefault(key, []).append(d)
        # each device's group: itself and its twins (identical devices), ascending
        groups = {k: tuple(members) for k, members in alike.items()}  # one tuple per group
        self._group = [(d,) if k is None else groups[k] for d, k in enumerate(keys)]
        # the logs of each (class, device)'s learned factor, of its profile's published /
        # roofline (priors), and of measured / published (how far its figures were off)
        self._learned_logs = DeviceLogs(self._group)
        self._published_logs = DeviceLogs(self._group)
        self._drift_logs = DeviceLogs(self._group)
        self._poolable: set[int] = set()  # classes that name a model (others stay 1 when cold)
        # per group (its first device): the devices whose cold pairs may not hold their
        # pooled factor now (``_repool``), and whose unmeasured published pairs may not hold
        # their drifted prior (``_redrift``); a re-pool passes over these, not the group
        self._unpooled: dict[int, set[int]] = {}
        self._undrifted: dict[int, set[int]] = {}
        # per (class, group's first device): the members whose pair may still take a lent
        # factor (``_lend_twins`` drops those measured or on better evidence: for good)
        self._lendable: dict[tuple[int, int], tuple[int, ...]] = {}

    def _mark_pooling(self, pending: dict[int, set[int]], d: int, devices: tuple[int, ...]) -> None:
        """Mark ``devices`` (``d``'s group) for the group's next re-pool or re-drift."""
        marked = pending.get(self._group[d][0])
        if marked is None:
            pending[self._group[d][0]] = set(devices)
        else:
            marked.update(devices)

    def _imported_factor(self, d: int) -> None:
        """A factor of ``d``'s was set from outside: its next re-pool and re-drift pass it."""
        self._mark_pooling(self._unpooled, d, (d,))
        self._mark_pooling(self._undrifted, d, (d,))

    def _pooled(self, d: int) -> tuple[float, str] | None:
        """Return (factor, label): ``d``'s measured factors pooled, else its published ones.

        Each is the geometric mean over ``d`` itself, else over its twins (identical hardware).
        """
        learned = self._learned_logs.mean(d)
        if learned is not None:
            return math.exp(learned[0]), POOLED
        published = self._published_logs.mean(d)
        if published is not None:
            return math.exp(published[0]), calibrated_label(published[1])
        return None

    def _learned(self, cls: int, d: int, n: int, factor: float) -> None:
        """A measurement of (cls, d) (its ``n``-th, now at ``factor``): re-pool the device's
        cold classes."""
        self._lend(cls, d, math.log(factor), repool=n <= _POOL_SAMPLES)

    def _lend(self, cls: int, d: int, log_factor: float, *, repool: bool) -> None:
        """Record (cls, d)'s measured factor (and its drift from a published figure); while
        the pair has few measurements, lend it to the device's twins and re-pool."""
        self._mark_pooling(self._unpooled, d, self._learned_logs.set(d, cls, log_factor))
        published = self._published_logs.get(d, cls)
        if published is not None:
            self._set_drift(d, cls, log_factor - published)
        if repool:
            if len(self._group[d]) > 1:  # it has twins
                self._lend_twins(cls, d, log_factor)
            self._repool(d)
            self._redrift(d)

    def _lend_twins(self, cls: int, d: int, log_factor: float) -> None:
        """Start the cold (cls, j) of ``d``'s twins from (cls, d)'s measured factor (``TWIN``).

        Each is scaled by how much slower than its published figures twin ``j`` runs than
        ``d`` does, where both devices have measured that on models of their own.
        """
        sources = self._sources[cls] or (ROOFLINE,) * len(self.devices)
        own_drift = self._drift_logs.own_mean
        drift_d = own_drift(d)
        lent = learning.clamp(math.exp(log_factor))  # unscaled: a drift is not known on both
        samples, cells, row = self._samples, self._correction_cells, cls * len(self.devices)
        relabelled, kept, key = [], [], (cls, self._group[d][0])
        for j in self._lendable.get(key, self._group[d]):
            source = sources[j]
            if samples.get((cls, j), 0) or not _twinnable(source):
                continue  # measured, or a published prior (drifted with its twins: _redrift)
            kept.append(j)
            if j == d:
                continue  # (an overrun's lower bound on an unmeasured pair)
            drift_j = None if drift_d is None else own_drift(j)
            if drift_j is None or drift_d is None:
                cells[row + j] = lent
            else:
                cells[row + j] = learning.clamp(math.exp(log_factor + (drift_j - drift_d)))
            if source != TWIN:
                relabelled.append(j)
        self._lendable[key] = tuple(kept)
        self._relabel(cls, dict.fromkeys(relabelled, TWIN))

    def _relabel(self, cls: int, labels: dict[int, str]) -> None:
        """Set the estimate sources of ``cls``'s pairs (device -> label), then tell the
        explorer once (``Explorer.set_sources``): one pass over the fleet for the lot.

        Told once, not after each pair: the same rows as telling it pair by pair, since a
        pair relabelled here only moves to an optimism no greater than its old label's
        (roofline 8 -> pooled / calibrated 4, or twin 1.5), and the explorer keeps the least.
        """
        if not labels:
            return
        marks = list(self._sources[cls] or (ROOFLINE,) * len(self.devices))
        for d, label in labels.items():
            marks[d] = label
        self._sources[cls] = relabelled = tuple(marks)
        self.exploration.set_sources(cls, relabelled)

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
        """Re-start the cold classes of ``d`` and of its twins from their pooled factors.

        Only ``d`` and the twins marked since the group's last re-pool (``_unpooled``) are
        passed: the others' pooled factor has not moved, and their cold pairs hold it.
        """
        labels: dict[int, dict[int, str]] = {}  # per class: its pairs relabelled
        for j in self._marked(self._unpooled, d):
            pooled = self._pooled(j)
            if pooled is not None:
                for c in range(len(self._sources)):
                    if self._pool_into(c, j, *pooled):
                        labels.setdefault(c, {})[j] = pooled[1]
        for c, relabelled in labels.items():
            self._relabel(c, relabelled)

    def _marked(self, pending: dict[int, set[int]], d: int) -> tuple[int, ...]:
        """Return ``d``, then the other devices marked in its group, ascending; unmark them.

        In the order a pass over ``d`` and all its twins would take them.
        """
        marked = pending.pop(self._group[d][0], None)
        if marked:
            marked.discard(d)
        return (d, *sorted(marked)) if marked else (d,)

    def _set_drift(self, d: int, cls: int, log_drift: float) -> None:
        """Record (cls, d)'s measured / published (in log); mark the devices it re-drifts."""
        changed = self._drift_logs.set(d, cls, log_drift)
        if len(changed) > 1:  # its twins with no drift of their own: those it re-drifts
            published = self._published_logs.logs
            changed = tuple(j for j in changed if j == d or j in published)
        self._mark_pooling(self._undrifted, d, changed)

    def _drift(self, d: int) -> float | None:
        """Return the geometric mean of measured / published on ``d`` (else on its twins)."""
        drift = self._drift_logs.mean(d)
        return None if drift is None else math.exp(drift[0])

    def _redrift(self, d: int) -> None:
        """Scale the unmeasured published priors of ``d`` and its twins by their drift.

        Only ``d`` and the twins marked since the group's last re-drift (``_undrifted``).
        """
        for j in self._marked(self._undrifted, d):
            drift = self._drift(j)
            if drift is None:
                continue
            for c, log_factor in self._published_logs.logs.get(j, {}).items():
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
                changed = self._published_logs.set(d, cls, math.log(factor))
                if self._learned_logs.mean(d) is None:  # its group pools published figures
                    self._mark_pooling(self._unpooled, d, changed)
                # its new prior is drifted at the group's next re-drift
                self._mark_pooling(self._undrifted, d, (d,))
                self._repool(d)
        labels: dict[int, str] = {}
        for d in range(len(self.devices)):
            pooled = self._pooled(d)
            if pooled is not None and self._pool_into(cls, d, *pooled):
                labels[d] = pooled[1]
        self._relabel(cls, labels)

    def _pool_into(self, cls: int, d: int, factor: float, label: str) -> bool:
        """Start (cls, d) from its device's pooled ``factor`` when its estimate is a cold
        start; return True when its source is then to read ``label`` (the caller relabels
        the pairs of one pass at once: ``_relabel``)."""
        if cls not in self._poolable:
            return False
        sources = self._sources[cls]
        source = ROOFLINE if sources is None else sources[d]
        if not _poolable(source) or self._samples.get((cls, d), 0):
            return False  # a published prior, a twin's measurement, or measured: better evidence
        self._ws.corrections[cls, d] = learning.clamp(factor)
        return source != label
