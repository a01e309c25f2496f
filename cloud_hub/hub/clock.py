"""The hub's notion of time: a callable returning Unix seconds, injectable for tests."""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
