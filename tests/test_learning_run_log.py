"""A run's node count and replies per round, read from Flower's own log of the run."""

from __future__ import annotations

from pathlib import Path

from cloud_hub.learning.run_log import nodes_taking_part, read_round_replies, round_replies

# as `flwr log --stream` writes it (Flower 1.42's FedAvg, colours included)
LOG = """\x1b[92mINFO \x1b[0m:      Starting GuardedFedAvg strategy:
\x1b[92mINFO \x1b[0m:      \t├── Number of rounds: 2
\x1b[92mINFO \x1b[0m:      [ROUND 1/2]
\x1b[92mINFO \x1b[0m:      configure_train: Sampled 3 nodes (out of 3)
\x1b[92mINFO \x1b[0m:      aggregate_train: Received 2 results and 1 failures
\x1b[92mINFO \x1b[0m:      \t> Received error in reply from node 1: Error: Node Unavailable
\x1b[92mINFO \x1b[0m:      configure_evaluate: Sampled 3 nodes (out of 3)
\x1b[92mINFO \x1b[0m:      aggregate_evaluate: Received 2 results and 0 failures
\x1b[92mINFO \x1b[0m:      [ROUND 2/2]
\x1b[92mINFO \x1b[0m:      aggregate_train: Received 3 results and 0 failures
\x1b[92mINFO \x1b[0m:      aggregate_evaluate: Received 1 results and 2 failures
"""


def test_replies_per_round_and_the_nodes_that_took_part(tmp_path: Path) -> None:
    rounds = round_replies(LOG)
    assert [(r["round"], r["train"], r["train_failures"]) for r in rounds] == [(1, 2, 1), (2, 3, 0)]
    assert [(r["evaluate"], r["evaluate_failures"]) for r in rounds] == [(2, 0), (1, 2)]
    assert nodes_taking_part(rounds) == 3
    path = tmp_path / "run-1.log"
    path.write_text(LOG)
    assert read_round_replies(path) == rounds
    assert read_round_replies(tmp_path / "missing.log") == []  # the run never started


def test_a_run_that_never_had_its_nodes_counts_none() -> None:
    text = "INFO :      [ROUND 1/1]\nRunCannotStart: 0 of 2 required nodes connected after 4 s\n"
    rounds = round_replies(text)
    assert [(r["round"], r["train"], r["evaluate"]) for r in rounds] == [(1, 0, 0)]
    assert nodes_taking_part(rounds) == 0 and nodes_taking_part([]) == 0
