"""The outbox's JSON, written by a C encoder built once, is what ``json.dumps`` writes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from edge_agent.agent.core import outbox

VALUES: list[Any] = [
    {"id": 'a"b\\c é', "state": "done", "result": {"label": 3, "p": [0.1, 2.5e-300, -0.0]}},
    {"error": None, "latency_s": 0.0123, "nested": {"x": [True, False, None, {"y": "ü\n"}]}},
    [1, 2.0, "three", 10**30],
    "a string alone",
    3.25,
    None,
    {},
    [],
    {1: "int key", 2.5: "float key", None: "null key", False: "bool key"},
]


@pytest.mark.parametrize("value", VALUES)
def test_strict_json_writes_what_json_dumps_writes(value: Any) -> None:
    assert outbox.strict_json(value) == json.dumps(value, allow_nan=False)
    assert outbox.strict_json(value) == json.JSONEncoder(allow_nan=False).encode(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused_then_nulled(bad: float) -> None:
    payload = {"ok": 1.5, "deep": [{"v": bad}]}
    with pytest.raises(ValueError, match="Out of range float"):
        outbox.strict_json(payload)
    assert outbox.encode(payload) == '{"ok": 1.5, "deep": [{"v": null}]}'
    assert outbox.strict_json({"after": "an error"}) == '{"after": "an error"}'  # no stale state


def test_unencodable_values_are_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        outbox.strict_json({"x": object()})
