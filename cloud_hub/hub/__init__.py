"""The cloud hub: fleet registry, signed heartbeats, outbox sync, liveness, policies, dashboard."""
