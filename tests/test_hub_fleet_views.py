"""The dashboard's system views (cloud_hub/hub/fleet_views.py): mesh links named by hub agent
id, each site's carbon now and next clean window, deferred work; bad heartbeat fields refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from cloud_hub.hub.fleet_views import MeshLinks, carbon_view, deferred_view, parse_links
from cloud_hub.hub.site_report import parse_report
from edge_agent.errors import InvalidInput

H = 3600.0
HOUR = 480_000  # a Unix hour


def test_links_are_named_by_hub_agent_id_and_an_unknown_peer_keeps_its_mesh_id() -> None:
    links = MeshLinks()
    links.observe(
        "lab",
        {
            "mesh_id": "mesh-lab",
            "peer_links": [
                {"id": "mesh-dock", "state": "online", "rtt_ms": 1.5},
                {"id": "stranger", "state": "suspect", "rtt_ms": None},
            ],
        },
        10.0,
    )
    links.observe("dock", {"mesh_id": "mesh-dock", "peer_links": []}, 11.0)
    links.observe(
        "gone", {"mesh_id": "mesh-gone", "peer_links": [{"id": "mesh-lab", "state": "online"}]}, 1.0
    )
    view = links.view({"lab": "online", "dock": "online"})  # "gone" is no agent of this hub
    assert [(v["from"], v["to"], v["to_agent"], v["state"], v["rtt_ms"]) for v in view] == [
        ("lab", "dock", "dock", "online", 1.5),
        ("lab", "stranger", None, "suspect", None),
    ]
    assert view[0]["to_mesh_id"] == "mesh-dock" and view[0]["reported_at"] == 10.0


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"peer_links": "x"}, "body.peer_links"),
        ({"peer_links": [{"id": "a b", "state": "online"}]}, "body.peer_links[0].id"),
        ({"peer_links": [{"id": "a", "state": "gone"}]}, "body.peer_links[0].state"),
        ({"peer_links": [{"id": "a", "state": "online", "rtt_ms": -1}]}, "rtt_ms"),
        ({"peer_links": [{"id": "a", "state": "online", "rtt_ms": True}]}, "rtt_ms"),
        ({"mesh_id": 3}, "body.mesh_id"),
    ],
)
def test_a_bad_link_report_is_refused_naming_the_field_and_keeps_the_last(
    doc: dict[str, Any], field: str
) -> None:
    links = MeshLinks()
    links.observe("lab", {"mesh_id": "m", "peer_links": [{"id": "p", "state": "online"}]}, 1.0)
    with pytest.raises(InvalidInput, match=field.replace("[", r"\[").replace("]", r"\]")):
        links.observe("lab", doc, 2.0)
    assert [v["to"] for v in links.view({"lab": "online"})] == ["p"]
    with pytest.raises(InvalidInput):
        parse_links(doc)


def test_carbon_now_and_the_next_clean_window() -> None:
    now = HOUR * H + 600.0  # ten minutes into HOUR
    dirty = parse_report(
        {
            "carbon": {"hour": HOUR - 1, "forecast": [50.0, 500.0, 450.0, 300.0, 300.0, 420.0]},
            "deferred": [
                {
                    "id": "t2",
                    "energy_j": 5.0,
                    "deadline_at": now + 6 * H,
                    "not_before": (HOUR + 2) * H,
                    "latest_start": now + 5 * H,
                    "g_per_kwh": 300.0,
                },
                {
                    "id": "t1",
                    "energy_j": 5.0,
                    "deadline_at": now + 6 * H,
                    "not_before": (HOUR + 1) * H,
                    "latest_start": now + 5 * H,
                    "g_per_kwh": 450.0,
                },
            ],
        },
        now,
    )
    flat = parse_report({"carbon": {"hour": HOUR, "forecast": [100.0, 100.0]}}, now)
    assert dirty is not None and flat is not None
    sites = {"dirty": dirty, "flat": flat}
    view = {c["agent_id"]: c for c in carbon_view(sites, now)}
    # the past hour's 50 g is no window; the earliest of the cleanest hours ahead is
    assert view["dirty"]["g_per_kwh_now"] == 500.0
    assert view["dirty"]["clean_g_per_kwh"] == 300.0
    assert view["dirty"]["clean_at"] == (HOUR + 2) * H
    assert view["dirty"]["forecast_hours"] == 5
    # clean now: the window is now, not the start of the hour
    assert view["flat"]["clean_g_per_kwh"] == 100.0 and view["flat"]["clean_at"] == now
    held = deferred_view(sites)
    assert [(d["agent_id"], d["task_id"], d["held_until"]) for d in held] == [
        ("dirty", "t1", (HOUR + 1) * H),
        ("dirty", "t2", (HOUR + 2) * H),
    ]


def test_a_task_held_for_an_accepted_move_is_listed_as_moving() -> None:
    moves = [
        {"state": "accepted", "queued": False, "origin": "dirty", "task_id": "t9",
         "start_at": 5.0, "target": "clean"},
        {"state": "done", "queued": False, "origin": "dirty", "task_id": "t8",
         "start_at": 1.0, "target": "clean"},
        {"state": "accepted", "queued": True, "origin": "dirty", "task_id": "t7",
         "start_at": 1.0, "target": "clean"},
    ]  # fmt: skip
    [held] = deferred_view({}, moves)  # done: ran there; queued: never held
    assert held["task_id"] == "t9" and held["held_until"] == 5.0
    assert held["agent_id"] == "dirty" and held["moving_to"] == "clean"
