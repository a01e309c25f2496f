"""Policy documents: templates, blends, round trips, versions and validation errors."""

from __future__ import annotations

import json
import math

import pytest

from edge_agent.errors import InvalidInput, PolicyError
from edge_agent.placement import TEMPLATES, Policy
from edge_agent.placement.layout import OBJECTIVE_NAMES
from edge_agent.placement.policy import RULE_DEFAULTS, SCHEMA

TEMPLATE_NAMES = ("latency-first", "energy-first", "throughput-first", "balanced")


def _largest(policy: Policy) -> str:
    return max(OBJECTIVE_NAMES, key=lambda o: policy.weights.get(o, 0.0))


# --- templates -----------------------------------------------------------------------


def test_the_four_templates_ship_built_in() -> None:
    assert set(TEMPLATE_NAMES) <= set(TEMPLATES)


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_template_weights_sum_to_one_over_known_objectives(name: str) -> None:
    policy = Policy.template(name)
    assert policy.name == name
    assert set(policy.weights) <= set(OBJECTIVE_NAMES)
    assert math.fsum(policy.weights.values()) == pytest.approx(1.0, abs=1e-12)
    assert all(w >= 0.0 for w in policy.weights.values())
    assert math.fsum(policy.weight_vector()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    ("name", "dominant"),
    [("latency-first", "latency"), ("energy-first", "energy"), ("throughput-first", "throughput")],
)
def test_template_dominant_objective_is_the_one_named(name: str, dominant: str) -> None:
    policy = Policy.template(name)
    assert _largest(policy) == dominant
    others = [w for o, w in policy.weights.items() if o != dominant]
    assert policy.weights[dominant] > max(others)


def test_weight_vector_follows_kernel_objective_order() -> None:
    policy = Policy.template("energy-first")
    assert policy.weight_vector() == [policy.weights.get(o, 0.0) for o in OBJECTIVE_NAMES]


def test_unknown_template_raises_policy_error_naming_it() -> None:
    with pytest.raises(PolicyError, match="template") as info:
        Policy.template("fastest-first")
    assert "fastest-first" in str(info.value)


# --- blends --------------------------------------------------------------------------


def test_half_and_half_blend_is_the_normalized_average() -> None:
    lat, en = Policy.template("latency-first"), Policy.template("energy-first")
    blend = Policy.blend({"latency-first": 0.5, "energy-first": 0.5})
    avg = {o: 0.5 * lat.weights.get(o, 0.0) + 0.5 * en.weights.get(o, 0.0) for o in OBJECTIVE_NAMES}
    total = sum(avg.values())
    for o in OBJECTIVE_NAMES:
        assert blend.weights.get(o, 0.0) == pytest.approx(avg[o] / total, abs=1e-12)
    assert math.fsum(blend.weights.values()) == pytest.approx(1.0, abs=1e-12)


def test_blend_fractions_need_not_sum_to_one() -> None:
    a = Policy.blend({"latency-first": 1.0, "energy-first": 1.0})
    b = Policy.blend({"latency-first": 0.5, "energy-first": 0.5})
    assert a.weight_vector() == pytest.approx(b.weight_vector(), abs=1e-12)


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_blend_of_a_template_with_itself_equals_the_template(name: str) -> None:
    template = Policy.template(name)
    alone = Policy.blend({name: 1.0})
    twice = Policy.blend([(name, 0.3), (template, 0.7)])
    assert alone.weight_vector() == pytest.approx(template.weight_vector(), abs=1e-12)
    assert twice.weight_vector() == pytest.approx(template.weight_vector(), abs=1e-12)


def test_blend_accepts_a_name_and_default_label_mentions_parts() -> None:
    named = Policy.blend({"latency-first": 0.5, "energy-first": 0.5}, name="mix")
    assert named.name == "mix"
    default = Policy.blend({"latency-first": 0.5, "energy-first": 0.5})
    assert "latency-first" in default.name and "energy-first" in default.name


@pytest.mark.parametrize(
    "parts",
    [
        {},
        {"latency-first": -1.0},
        {"latency-first": float("nan")},
        {"latency-first": True},
        {"latency-first": 0.0},
        {"no-such-template": 1.0},
    ],
)
def test_bad_blend_raises_policy_error(parts: dict[str, float]) -> None:
    with pytest.raises(PolicyError, match=r"blend|template"):
        Policy.blend(parts)


# --- documents -----------------------------------------------------------------------


def test_to_dict_is_json_ready_and_carries_schema() -> None:
    doc = Policy.template("balanced").to_dict()
    assert doc["schema"] == SCHEMA
    assert json.loads(json.dumps(doc)) == doc


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_from_dict_round_trips_to_dict(name: str) -> None:
    policy = Policy.template(name)
    again = Policy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert again.name == policy.name
    assert again.version == policy.version
    assert again.weight_vector() == pytest.approx(policy.weight_vector(), abs=1e-15)
    assert dict(again.rules) == dict(policy.rules)
    doc, again_doc = policy.to_dict(), again.to_dict()
    assert again_doc.pop("weights") == pytest.approx(doc.pop("weights"), abs=1e-15)
    assert again_doc == doc


def test_round_trip_keeps_custom_weights_rules_and_version() -> None:
    doc = {
        "schema": SCHEMA,
        "name": "night-shift",
        "version": 7,
        "weights": {"energy": 3, "carbon": 1},
        "rules": {
            "offload_margin": 0.5,
            "allowed_peers": ["agent-a", "agent-b"],
            "tenant_shares": {"lab": 2.0},
        },
    }
    policy = Policy.from_dict(doc)
    assert policy.name == "night-shift"
    assert policy.version == 7
    assert policy.weights["energy"] == pytest.approx(0.75)
    assert policy.weights["carbon"] == pytest.approx(0.25)
    assert policy.rules["offload_margin"] == 0.5
    assert policy.rules["allowed_peers"] == ["agent-a", "agent-b"]
    assert policy.rules["priority_classes"] == RULE_DEFAULTS["priority_classes"]
    again = Policy.from_dict(policy.to_dict())
    assert again.to_dict() == policy.to_dict()


def test_from_dict_template_and_blend_sources() -> None:
    by_template = Policy.from_dict({"template": "energy-first", "version": 2})
    assert by_template.name == "energy-first"
    assert by_template.version == 2
    assert by_template.weight_vector() == Policy.template("energy-first").weight_vector()
    by_blend = Policy.from_dict({"blend": {"latency-first": 0.5, "energy-first": 0.5}})
    assert by_blend.weight_vector() == pytest.approx(
        Policy.blend({"latency-first": 0.5, "energy-first": 0.5}).weight_vector()
    )


def test_version_defaults_to_one_and_is_kept_through_documents() -> None:
    assert Policy.template("balanced").version == 1
    assert Policy.from_dict({"template": "balanced"}).version == 1
    v3 = Policy.from_dict({"template": "balanced", "version": 3})
    assert v3.to_dict()["version"] == 3
    assert Policy.from_dict(v3.to_dict()).version == 3


@pytest.mark.parametrize("version", [0, -1, 1.5, "2", True, None])
def test_bad_version_raises_naming_version(version: object) -> None:
    with pytest.raises(PolicyError, match="version"):
        Policy.from_dict({"template": "balanced", "version": version})


# --- validation errors ---------------------------------------------------------------

BAD_DOCS = [
    pytest.param({"weights": {"latency": 1.0, "speed": 1.0}}, "speed", id="unknown-objective"),
    pytest.param({"weights": {"latency": 1.0, "energy": -0.1}}, "energy", id="negative-weight"),
    pytest.param({"weights": {"latency": float("nan")}}, "latency", id="nan-weight"),
    pytest.param({"weights": {"latency": float("inf")}}, "latency", id="inf-weight"),
    pytest.param({"weights": {"latency": True}}, "latency", id="bool-weight"),
    pytest.param({"weights": {"latency": "0.5"}}, "latency", id="string-weight"),
    pytest.param({"weights": {"latency": 0.0, "energy": 0}}, "weights", id="all-zero"),
    pytest.param({"weights": {}}, "weights", id="empty-weights"),
    pytest.param({"weights": [0.5, 0.5]}, "weights", id="weights-not-object"),
    pytest.param({"template": "fastest-first"}, "template", id="unknown-template"),
    pytest.param({"template": "balanced", "rules": {"max_hops": 2}}, "max_hops", id="unknown-rule"),
    pytest.param(
        {"template": "balanced", "rules": {"offload_margin": 1.0}},
        "offload_margin",
        id="margin-one",
    ),
    pytest.param(
        {"template": "balanced", "rules": {"offload_margin": -0.1}},
        "offload_margin",
        id="margin-negative",
    ),
    pytest.param(
        {"template": "balanced", "rules": {"offload_margin": float("nan")}},
        "offload_margin",
        id="margin-nan",
    ),
    pytest.param(
        {"template": "balanced", "rules": {"offload_margin": "0.2"}},
        "offload_margin",
        id="margin-string",
    ),
    pytest.param(
        {"template": "balanced", "rules": {"allowed_peers": "agent-a"}},
        "allowed_peers",
        id="peers-not-list",
    ),
    pytest.param(
        {"template": "balanced", "rules": ["offload_margin"]}, "rules", id="rules-not-object"
    ),
    pytest.param(
        {"template": "balanced", "weights": {"latency": 1.0}}, "weights", id="weights-and-template"
    ),
    pytest.param(
        {"template": "balanced", "blend": {"balanced": 1.0}}, "blend", id="template-and-blend"
    ),
    pytest.param({"name": "nothing"}, "weights", id="no-source"),
    pytest.param(
        {"schema": "hetmesh.policy/2", "template": "balanced"}, "schema", id="wrong-schema"
    ),
    pytest.param({"schema": "policy", "template": "balanced"}, "schema", id="other-schema"),
    pytest.param({"template": "balanced", "colour": "red"}, "colour", id="unknown-field"),
    pytest.param({"template": "balanced", "name": ""}, "name", id="empty-name"),
    pytest.param({"blend": ["balanced"]}, "blend", id="blend-not-object"),
]


@pytest.mark.parametrize(("doc", "field"), BAD_DOCS)
def test_invalid_document_raises_policy_error_naming_the_field(doc: dict, field: str) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.from_dict(doc)
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, InvalidInput)


def test_non_mapping_document_raises_policy_error() -> None:
    with pytest.raises(PolicyError, match="policy"):
        Policy.from_dict(["template", "balanced"])  # type: ignore[arg-type]


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(PolicyError, ValueError)
    with pytest.raises(ValueError, match="schema"):
        Policy.from_dict({"schema": "x", "template": "balanced"})
