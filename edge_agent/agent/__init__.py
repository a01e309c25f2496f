"""The edge agent daemon: config, durable store, scheduler, executor, HTTP API, metrics.

Runtime roles, one module each: ``config`` (TOML + ``EDGE_AGENT_*``), ``store`` (SQLite,
one writer thread), ``intake`` (submissions -> contracts), ``scheduler`` (queue -> Placer),
``executor`` (onnxruntime or emulation, feedback), ``api`` (aiohttp), ``metrics``
(Prometheus), ``service`` (wires them), ``daemon`` (signals, listening socket).
"""
