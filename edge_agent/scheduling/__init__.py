"""Scheduling logic shared by the agent and the simulator (pure: no I/O, no clock)."""
