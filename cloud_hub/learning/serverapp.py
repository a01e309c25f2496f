"""Flower ServerApp: FedAvg rounds of the load model that finish with nodes offline."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result

from cloud_hub.learning.registry import ModelRegistry, ModelVersion
from edge_agent.errors import HetmeshError
from edge_agent.predictor.clientapp import spec_from_config
from edge_agent.predictor.features import FeatureSpec
from edge_agent.predictor.model import LoadModel, model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often a starting round re-checks connected nodes


class RunCannotStart(HetmeshError):
    """Too few nodes connected before the start deadline; the run is stopped, not left waiting."""


@dataclass(frozen=True)
class RoundSettings:
    """What a training run does: rounds, node minimum, timeouts and local training."""

    spec: FeatureSpec
    num_rounds: int = 5
    min_nodes: int = 2
    round_timeout_s: float = 60.0
    start_timeout_s: float = 30.0
    local_epochs: int = 2
    lr: float = 0.02
    hidden: int = 16
    holdout: float = 0.3
    seed: int = 0
    evaluate_every: int = 1  # federated evaluation every N rounds, and always in the last

    def train_config(self) -> ConfigRecord:
        """The config record each train/evaluate message carries."""
        return ConfigRecord(
            {
                "window": self.spec.window,
                "horizon": self.spec.horizon,
                "bucket-s": self.spec.bucket_s,
                "period-s": self.spec.period_s,
                "local-epochs": self.local_epochs,
                "lr": self.lr,
                "hidden": self.hidden,
                "holdout": self.holdout,
            }
        )


def settings_from_config(cfg: Mapping[str, object]) -> RoundSettings:
    """RoundSettings from a Flower run config (keys as in RoundSettings, dashed)."""

    def get(key: str, default: float) -> float:
        return float(cast(float, cfg.get(key, default)))

    return RoundSettings(
        spec=spec_from_config(cfg),
        num_rounds=int(get("num-rounds", 5)),
        min_nodes=int(get("min-nodes", 2)),
        round_timeout_s=get("round-timeout-s", 60.0),
        start_timeout_s=get("start-timeout-s", 30.0),
        local_epochs=int(get("local-epochs", 2)),
        lr=get("lr", 0.02),
        hidden=int(get("hidden", 16)),
        holdout=get("holdout", 0.3),
        evaluate_every=max(1, int(get("evaluate-every", 1))),
    )


class GuardedFedAvg(FedAvg):
    """FedAvg that gives up after start_timeout_s instead of waiting forever for nodes."""

    def __init__(
        self, min_nodes: int, start_timeout_s: float, num_rounds: int = 0, evaluate_every: int = 1
    ) -> None:
        """Train and evaluate need min_nodes connected; evaluate every N rounds and the last."""
        super().__init__(
            min_train_nodes=min_nodes, min_evaluate_nodes=min_nodes, min_available_nodes=min_nodes
        )
        self.start_timeout_s = start_timeout_s
        self.num_rounds = num_rounds
        self.evaluate_every = evaluate_every
        self._wake = threading.Event()

    def _await_nodes(self, grid: Grid) -> None:
        """Return once enough nodes are connected; raise RunCannotStart at the deadline."""
        deadline = time.monotonic() + self.start_timeout_s
        while (n := len(list(grid.get_node_ids()))) < self.min_available_nodes:
            if time.monotonic() >= deadline:
                raise RunCannotStart(
                    f"{n} of {self.min_available_nodes} required nodes connected after "
                    f"{self.start_timeout_s:.0f} s; run stopped"
                )
            self._wake.wait(POLL_S)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Check nodes with a deadline, then sample as FedAvg does."""
        self._await_nodes(grid)
        return super().configure_train(server_round, arrays, config, grid)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Skip off-schedule rounds; else check nodes with a deadline and sample as FedAvg."""
        if server_round % self.evaluate_every and server_round != self.num_rounds:
            return []
        self._await_nodes(grid)
        return super().configure_evaluate(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """FedAvg's aggregate, plus ``train_nodes``: how many nodes replied in time."""
        replies = list(replies)
        arrays, metrics = super().aggregate_train(server_round, replies)
        return arrays, _with_count(metrics, "train_nodes", server_round, replies)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """FedAvg's aggregate, plus ``eval_nodes``: how many nodes replied in time."""
        replies = list(replies)
        metrics = super().aggregate_evaluate(server_round, replies)
        return _with_count(metrics, "eval_nodes", server_round, replies)


def _with_count(
    metrics: MetricRecord | None, key: str, server_round: int, replies: list[Message]
) -> MetricRecord | None:
    """Log each failed reply and add the count of valid ones to the aggregated metrics."""
    ok = 0
    for m in replies:
        if m.has_error():
            log.warning("round %d: %s: node %s failed: %s", server_round, key,
                        m.metadata.src_node_id, m.error.reason)  # fmt: skip
        else:
            ok += 1
    if metrics is not None:
        metrics[key] = ok
    return metrics


def train_federated(grid: Grid, settings: RoundSettings) -> tuple[LoadModel, Result]:
    """Run FedAvg rounds over the grid; the final global model and Flower's result."""
    spec = settings.spec
    model = model_for(spec.n_features, spec.window, hidden=settings.hidden, seed=settings.seed)
    strategy = GuardedFedAvg(
        settings.min_nodes, settings.start_timeout_s, settings.num_rounds, settings.evaluate_every
    )
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.get_weights()),
        num_rounds=settings.num_rounds,
        timeout=settings.round_timeout_s,
        train_config=settings.train_config(),
        evaluate_config=settings.train_config(),
    )
    if len(result.arrays) > 0:
        model.set_weights(result.arrays.to_numpy_ndarrays())
    return model, result


def publish(
    model: LoadModel,
    result: Result,
    settings: RoundSettings,
    registry: ModelRegistry,
    extra: dict[str, float] | None = None,
) -> ModelVersion:
    """Export the global model to ONNX; register it with its last evaluation and extra metrics."""
    metrics: dict[str, float] = {
        "rounds": float(settings.num_rounds),
        "rounds_completed": float(len(result.train_metrics_clientapp)),
        **(extra or {}),
    }
    metrics["train_nodes"] = metrics["eval_nodes"] = 0.0  # no reply in time: no aggregate
    for by_round in (result.train_metrics_clientapp, result.evaluate_metrics_clientapp):
        if by_round:
            last = by_round[max(by_round)]
            metrics.update({k: float(cast(float, v)) for k, v in last.items()})
    data = to_onnx(model, metadata=spec_metadata(settings.spec))
    entry = registry.add(data, metrics)
    log.info("registered load model v%s (%s)", entry.version, metrics)
    return entry


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Train per the run config, then export and register the model (run config registry-dir)."""
    settings = settings_from_config(dict(context.run_config))
    started = time.monotonic()
    model, result = train_federated(grid, settings)
    wall = {"train_wall_s": time.monotonic() - started}
    registry_dir = str(context.run_config.get("registry-dir", "hub-models"))
    publish(model, result, settings, ModelRegistry(Path(registry_dir)), wall)
