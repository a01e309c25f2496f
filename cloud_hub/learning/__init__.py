"""Server side of federated learning: ServerApp, model registry, evaluation harness."""
