"""hetmesh cloud hub: fleet view, policies, and the federated load predictor."""
