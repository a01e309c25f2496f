"""The agent's own HTTP surface: the /v1 API, its OpenAPI document, the status page, Prometheus
metrics.
"""
