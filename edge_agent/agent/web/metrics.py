"""Prometheus metrics of one agent, in its own registry (served at ``/metrics``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edge_agent.agent.core.store import STATES
from edge_agent.agent.web.histograms import PlainHistogram
from edge_agent.resources.device import Device

_FAST = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)


class _DeviceCollector(Collector):
    """Device utilization (busy share since start) and info, read at scrape time."""

    def __init__(
        self,
        devices: Iterable[Device],
        busy_s: Callable[[str], float],
        running: Callable[[str], bool],
        uptime_s: Callable[[], float],
    ) -> None:
        self._devices = list(devices)
        self._busy_s, self._running, self._uptime_s = busy_s, running, uptime_s

    def collect(self) -> Iterable[Metric]:
        labels = ["device", "kind", "emulated", "execution_provider"]
        util = GaugeMetricFamily(
            "hetmesh_agent_device_utilization",
            "Share of time since start the device ran hetmesh tasks (0..1)",
            labels=labels,
        )
        running = GaugeMetricFamily(
            "hetmesh_agent_device_running", "Whether the device runs a task now", labels=labels
        )
        uptime = max(self._uptime_s(), 1e-9)
        for d in self._devices:
            values = [
                d.id,
                d.kind.name.lower(),
                str(d.emulated).lower(),
                d.capability.execution_provider,
            ]
            util.add_metric(values, min(1.0, self._busy_s(d.id) / uptime))
            running.add_metric(values, 1.0 if self._running(d.id) else 0.0)
        yield util
        yield running


class _MeshCollector(Collector):
    """The mesh's event counters and peers by state, read at scrape time."""

    def __init__(
        self, events: Callable[[], Mapping[str, int]], peers: Callable[[], Mapping[str, int]]
    ) -> None:
        self._events, self._peers = events, peers

    def collect(self) -> Iterable[Metric]:
        events = CounterMetricFamily(
            "hetmesh_mesh_events",
            "Mesh events since start (spoof_wrong_key, auth_rejected_*, trusted, ...)",
            labels=["event"],
        )
        for name, n in sorted(self._events().items()):
            events.add_metric([name], float(n))
        peers = GaugeMetricFamily("hetmesh_mesh_peers", "Trusted peers by state", labels=["state"])
        for state, n in sorted(self._peers().items()):
            peers.add_metric([state], float(n))
        yield events
        yield peers


class _PoolCollector(Collector):
    """Each resource pool's quota, use (own, borrowed, lent) and waiting tasks (pools.py)."""

    def __init__(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        labels = ["pool", "resource"]
        families = {
            key: GaugeMetricFamily(f"hetmesh_agent_pool_{key}", doc, labels=labels)
            for key, doc in (
                ("quota", "A tenant pool's quota (absent: unlimited)"),
                ("used", "What the pool's tenant holds on its own quota"),
                ("borrowed", "What the pool's tenant holds on other pools' idle quota"),
                ("lent", "What other tenants hold on this pool's idle quota"),
            )
        }
        waiting = GaugeMetricFamily(
            "hetmesh_agent_pool_waiting",
            "Tasks waiting because their pool is full",
            labels=["pool"],
        )
        for pool in self._snapshot():
            for key, family in families.items():
                for resource, value in pool[key].items():
                    if value is not None:
                        family.add_metric([pool["pool"], resource], value)
            waiting.add_metric([pool["pool"]], pool["waiting"])
        yield from families.values()
        yield waiting


class _TaskStates(Collector):
    """The tasks-by-state gauge, kept as plain counts and read at scrape time: ``move`` runs
    twice on every task's path, and a ``Gauge`` child's ``inc`` and ``dec`` take a lock each."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = dict.fromkeys(STATES, 0.0)

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("hetmesh_agent_tasks", "Tasks by state", labels=["state"])
        for state, n in list(self.counts.items()):  # a copy: a scrape may run in a thread
            family.add_metric([state], n)
        yield family


def _reader(status: Callable[[], dict[str, Any]], key: str) -> Callable[[], float]:
    return lambda: float(status()[key])


class AgentMetrics:
    """The agent's instruments; ``move`` keeps the tasks-by-state gauge in step."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.placement_seconds = PlainHistogram(
            "hetmesh_agent_placement_seconds",
            "Submit to placed-and-persisted, per task",
            buckets=_FAST,
            registry=r,
        )
        self.kernel_seconds = PlainHistogram(
            "hetmesh_agent_kernel_call_seconds",
            "One placement kernel call (a batch)",
            buckets=_FAST,
            registry=r,
        )
        self.service_seconds = PlainHistogram(
            "hetmesh_agent_task_service_seconds",
            "Measured service time of finished tasks",
            ["emulated"],
            buckets=_FAST,
            registry=r,
        )
        self.queue_depth = Gauge(
            "hetmesh_agent_queue_depth", "Tasks waiting for placement", registry=r
        )
        self.backlog = Gauge(
            "hetmesh_agent_device_backlog",
            "Placed tasks queued or running on devices",
            registry=r,
        )
        self._tasks = _TaskStates()  # the tasks-by-state gauge
        r.register(self._tasks)
        self.decisions = Counter(
            "hetmesh_agent_decisions",
            "Placement decisions by policy",
            ["policy", "placed"],
            registry=r,
        )
        self.over_estimate = Counter(
            "hetmesh_agent_over_estimate", "Tasks that ran far over their estimate", registry=r
        )
        self.preemptions = Counter(
            "hetmesh_agent_preemptions",
            "Queued tasks taken off a device for a higher-priority task's deadline",
            registry=r,
        )
        self.preemptions_skipped = Counter(
            "hetmesh_agent_preemptions_skipped",
            "Late urgent tasks not tried for preemption: the pass's tries were spent",
            registry=r,
        )
        # each label's child, looked up once: ``labels`` is a locked dict lookup per call
        self._service = {
            emulated: self.service_seconds.labels(str(emulated).lower())
            for emulated in (False, True)
        }
        self._decided: dict[tuple[str, bool], Counter] = {}  # (policy, placed) -> its child

    def watch(
        self,
        depth: Callable[[], int],
        backlog: Callable[[], int],
        devices: Iterable[Device],
        busy_s: Callable[[str], float],
        running: Callable[[str], bool],
        uptime_s: Callable[[], float],
    ) -> None:
        """Read live figures from the scheduler and executor at scrape time."""
        self.queue_depth.set_function(lambda: float(depth()))
        self.backlog.set_function(lambda: float(backlog()))
        self.registry.register(_DeviceCollector(devices, busy_s, running, uptime_s))

    def watch_pools(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        """Read the resource pools (``Pools.snapshot``) at scrape time."""
        self.registry.register(_PoolCollector(snapshot))

    def watch_hub(self, status: Callable[[], dict[str, Any]]) -> None:
        """Read the hub link's figures at scrape time (only agents with a hub have them)."""
        figures = (
            ("connected", "Whether the last exchange with the hub succeeded (0/1)"),
            ("pending", "Outbox records the hub has not acknowledged"),
            ("dropped", "Outbox records dropped unsent (outbox full) since the database began"),
        )
        for key, doc in figures:
            gauge = Gauge(f"hetmesh_agent_hub_{key}", doc, registry=self.registry)
            gauge.set_function(_reader(status, key))

    def watch_mesh(
        self, events: Callable[[], Mapping[str, int]], peers: Callable[[], Mapping[str, int]]
    ) -> None:
        """Export the mesh's counters and peer states (only agents in a mesh have them)."""
        self.registry.register(_MeshCollector(events, peers))

    def load_counts(self, counts: dict[str, int]) -> None:
        """Set the tasks-by-state gauge from the store's counts."""
        self._tasks.counts.update((state, float(n)) for state, n in counts.items())

    def move(self, old: str | None, new: str, count: int = 1) -> None:
        """Count ``count`` tasks leaving ``old`` (None: new tasks) for ``new``."""
        counts = self._tasks.counts
        if old is not None:
            counts[old] = counts.get(old, 0.0) - count
        counts[new] = counts.get(new, 0.0) + count

    def tasks_in(self, state: str) -> float:
        """Return the tasks-by-state gauge's value for ``state`` (what ``/metrics`` shows)."""
        return self._tasks.counts.get(state, 0.0)

    def served(self, latency_s: float, emulated: bool) -> None:
        """Observe a finished task's measured service time."""
        self._service[emulated].observe(latency_s)

    def decided(self, policy: str, placed: bool, count: int = 1) -> None:
        """Count ``count`` decisions (each policy's child looked up once, as ``_service``)."""
        child = self._decided.get((policy, placed))
        if child is None:
            child = self._decided[policy, placed] = self.decisions.labels(
                policy, str(placed).lower()
            )
        child.inc(count)

    def render(self) -> bytes:
        """Return the text exposition of every metric."""
        return generate_latest(self.registry)
