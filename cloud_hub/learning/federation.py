"""The hub's side of federated learning: model registry, SuperLink, scheduled runs, agent reports.

One ``Federation`` per hub. The registry is always there (agents pull models from it). With a
learning port configured it also starts a TLS SuperLink with SuperNode authentication on
127.0.0.1 (its Control API is the hub's alone) and, on the learning host and port, the
``FleetGateway`` that lets agents' SuperNodes reach its Fleet API and nothing else. Every
``every_s`` it runs one training run: while a run is wanted, agents that ask (their signed
learning poll) are told to start their SuperNode; the hub registers their public keys first.
A run that cannot start (too few nodes by its ``start-timeout-s``) ends failed and is
recorded; a run past its deadline is stopped (``flwr stop``). Either way, agents are then told
to stop their SuperNodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cloud_hub.learning.fleet_gateway import FleetGateway
from cloud_hub.learning.node_keys import NodeKeys
from cloud_hub.learning.registry import ModelRegistry, ModelVersion
from cloud_hub.learning.run_log import RoundReplies, nodes_taking_part, read_round_replies
from cloud_hub.learning.superlink import LOOPBACK, FederationError, SuperLink, SuperLinkConfig
from edge_agent.errors import InvalidInput
from edge_agent.predictor.supernode import ConfigValue, free_loopback_port, parse_config_arg

log = logging.getLogger(__name__)

RUNS_FILE = "runs.json"
#: Runs the history keeps.
RUN_HISTORY = 50
#: Seconds after a run is wanted that the hub waits for nodes before submitting it.
GATHER_S = 5.0


#: Run config keys a hub's ``learning_run_config`` may set (declared in the Flower App).
TUNABLE = (
    "round-timeout-s",
    "local-epochs",
    "lr",
    "hidden",
    "holdout",
    "evaluate-every",
    "window",
    "horizon",
    "bucket-s",
    "period-s",
)
#: What a run uses for keys neither the hub nor its ``run_config`` sets.
RUN_DEFAULTS: dict[str, ConfigValue] = {
    "num-rounds": 3,
    "min-nodes": 2,
    "start-timeout-s": 60.0,
    "round-timeout-s": 120.0,
}


def parse_run_config(text: str) -> dict[str, ConfigValue]:
    """A hub's ``learning_run_config`` (``window=8 bucket-s=2.0``), checked against TUNABLE."""
    values = parse_config_arg(text)
    unknown = sorted(set(values) - set(TUNABLE))
    if unknown:
        raise InvalidInput(
            f"learning_run_config: unknown key(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(TUNABLE)}"
        )
    return values


@dataclass(frozen=True)
class LearningSettings:
    """Where agents reach the Fleet API (port 0: no federated learning) and how runs go.

    ``run_config`` is the Flower run config every run gets (``num-rounds``, ``min-nodes``,
    ``start-timeout-s``, ``round-timeout-s`` and any of TUNABLE; RUN_DEFAULTS fill the rest).
    """

    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    every_s: float = 3600.0
    run_config: dict[str, ConfigValue] = field(default_factory=dict)
    superexec_poll_s: float | None = None
    gather_s: float = GATHER_S  # agents see "rounds wanted" and start SuperNodes meanwhile

    @property
    def enabled(self) -> bool:
        """Whether the hub runs a SuperLink at all."""
        return self.port > 0

    @property
    def config(self) -> dict[str, ConfigValue]:
        """The run config with defaults filled in."""
        return {**RUN_DEFAULTS, **self.run_config}

    @property
    def run_deadline_s(self) -> float:
        """How long a run may take before it is stopped."""
        c = self.config
        start, rounds = float(c["start-timeout-s"]), int(c["num-rounds"])
        return self.gather_s + start + rounds * float(c["round-timeout-s"]) + 60.0


@dataclass
class RunRecord:
    """One training run as the dashboard shows it."""

    started_at: float
    run_id: int | None = None
    ended_at: float | None = None
    status: str = "running"  # running | completed | failed
    error: str | None = None
    model_version: int | None = None
    nodes: int = 0  # the most nodes that replied with a result in one round (run_log)
    rounds: list[RoundReplies] = field(default_factory=list)  # replies per round


class Federation:
    """Registry, SuperLink and run schedule; ``start`` then ``stop`` on the hub's loop."""

    def __init__(
        self, settings: LearningSettings, poll_every_s: Callable[[], float] | None = None
    ) -> None:
        """Open the registry and the run history; nothing runs until start().

        ``poll_every_s``: how often agents poll now (the hub's heartbeat interval in force,
        longer for a large fleet); a run gathers nodes for at least two polls.
        """
        self.settings = settings
        self.poll_every_s = poll_every_s
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        self.registry = ModelRegistry(settings.state_dir / "models")
        self.runs: list[RunRecord] = self._load_runs()
        self.reports: dict[str, dict[str, Any]] = {}  # agent id -> its last learning report
        self.superlink: SuperLink | None = None
        self.gateway: FleetGateway | None = None
        self.ca_pem: str | None = None
        self.wanted = False
        self.node_keys = NodeKeys(settings.state_dir / "node-keys")
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    def _load_runs(self) -> list[RunRecord]:
        path = self.settings.state_dir / RUNS_FILE
        try:
            rows = json.loads(path.read_text())
            return [RunRecord(**row) for row in rows]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError) as err:
            log.warning("run history %s unreadable (%s); starting a new one", path, err)
            return []

    def _save_runs(self) -> None:
        path = self.settings.state_dir / RUNS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in self.runs[-RUN_HISTORY:]]))
        tmp.replace(path)

    async def start(self) -> None:
        """Start the SuperLink and the run schedule when learning is configured."""
        s = self.settings
        if not s.enabled:
            return
        from cloud_hub.learning.pki import make_tls  # cryptography: the `learning` extra

        hosts = list(dict.fromkeys([s.host, LOOPBACK]))  # the gateway's name, then the link's
        tls = await asyncio.to_thread(make_tls, s.state_dir / "pki", hosts)
        self.ca_pem = tls.ca_cert.read_text()
        cfg = SuperLinkConfig(
            s.state_dir / "superlink",
            port=free_loopback_port(),
            tls=tls,
            supernode_auth=True,
            superexec_poll_s=s.superexec_poll_s,
        )
        self.superlink = SuperLink(cfg)
        await asyncio.to_thread(self.superlink.start)
        self.gateway = FleetGateway(s.host, s.port, cfg.port, tls)
        try:
            await self.gateway.start()
        except OSError as err:
            await asyncio.to_thread(self.superlink.stop)
            raise FederationError(f"learning port {s.host}:{s.port}: {err}") from err
        log.info(
            "SuperLink on %s (TLS, SuperNode auth); its Fleet API alone on %s",
            cfg.address, self.gateway.address,
        )  # fmt: skip
        self._task = asyncio.create_task(self._schedule(), name="hub-learning")

    async def stop(self) -> None:
        """Stop the schedule and the SuperLink (SIGTERM)."""
        self.wanted = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.gateway is not None:
            await self.gateway.stop()
        if self.superlink is not None:
            await asyncio.to_thread(self.superlink.stop)

    def run_now(self) -> None:
        """Start the next run at once instead of waiting for the schedule."""
        self._kick.set()

    def busy(self) -> tuple[str, str | None] | None:
        """Return ("queued" or "running", the run's Flower id as a string, None until it has
        one) while a run is asked for or under way; None when a new one may start."""
        if self._kick.is_set():
            return "queued", None
        last = self.runs[-1] if self.runs else None
        if self.wanted and last is not None and last.status == "running":
            return "running", None if last.run_id is None else str(last.run_id)
        return None

    async def _schedule(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.every_s):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.run_once()
            except Exception:  # a failed run must not end the schedule
                log.exception("learning run failed")

    def gather_s(self) -> float:
        """Seconds a run waits for agents to poll and start their SuperNodes: the configured
        gather, or two polls and a second where agents now poll less often."""
        base = self.settings.gather_s
        return base if self.poll_every_s is None else max(base, 2 * self.poll_every_s() + 1.0)

    async def run_once(self) -> RunRecord:
        """Tell agents rounds are wanted, run one training run, then tell them to stop."""
        if self.superlink is None:
            raise InvalidInput("learning is not configured (set the hub's learning_port)")
        s = replace(self.settings, gather_s=self.gather_s())  # the run's deadline includes it
        record = RunRecord(started_at=time.time())
        self.runs.append(record)
        self.wanted = True
        try:
            await asyncio.sleep(s.gather_s)  # agents poll, register and start their SuperNodes
            before = self.registry.latest()
            config = {**s.config, "registry-dir": str(self.registry.root)}
            link = self.superlink
            record.run_id = await asyncio.to_thread(link.submit, config)
            try:
                await asyncio.to_thread(link.wait, record.run_id, s.run_deadline_s)
            finally:  # who took part, from Flower's record of the run (failed runs too)
                path = link.run_log(record.run_id)
                record.rounds = await asyncio.to_thread(read_round_replies, path)
                record.nodes = nodes_taking_part(record.rounds)
            after = self.registry.latest()
            if after is not None and (before is None or after.version != before.version):
                record.model_version = after.version
            record.status = "completed"
        except FederationError as err:
            record.status, record.error = "failed", str(err)[:500]
            log.warning("learning run %s: %s", record.run_id, err)
        finally:
            self.wanted = False
            record.ended_at = time.time()
            if record.status == "running":
                record.status, record.error = "failed", "interrupted"
            await asyncio.to_thread(self._save_runs)
        return record

    async def agent_report(self, agent_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Keep an agent's learning report; answer with the latest model and run instructions."""
        self.reports[agent_id] = {**doc, "received_at": time.time()}
        latest = self.registry.latest()
        answer: dict[str, Any] = {"latest": None if latest is None else model_entry(latest)}
        run: dict[str, Any] = {"active": False}
        key = doc.get("supernode_public_key")
        if self.wanted and self.gateway is not None and isinstance(key, str):
            await asyncio.to_thread(self._register, agent_id, key)
            run = {
                "active": True,
                "superlink": self.gateway.address,
                "root_certificates": self.ca_pem,
            }
        answer["run"] = run
        return answer

    def _register(self, agent_id: str, public_key: str) -> None:
        """Register an agent's SuperNode key (blocking CLI); revoke the key it replaces."""
        assert self.superlink is not None
        self.node_keys.register(self.superlink, agent_id, public_key)

    def recent_runs(self) -> list[RunRecord]:
        """The runs kept in the history, oldest first."""
        return self.runs[-RUN_HISTORY:]

    def summary(self) -> dict[str, Any]:
        """What the dashboard shows: runs, models with their metrics, each agent's predictor."""
        return {
            "enabled": self.settings.enabled,
            "superlink": None if self.gateway is None else self.gateway.address,
            "refused_requests": 0 if self.gateway is None else self.gateway.refused,
            "active": self.wanted,
            "runs": [asdict(r) for r in self.recent_runs()],
            "models": [model_entry(v) for v in self.registry.versions()],
            "agents": self.reports,
        }


def model_entry(v: ModelVersion) -> dict[str, Any]:
    """A registry version as the API lists it, with where to download it."""
    return {
        "version": v.version,
        "sha256": v.sha256,
        "metrics": v.metrics,
        "added_at": v.added_at,
        "url": f"/v1/models/{v.version}/onnx",
    }
