"""The agent and the hub read settings with one loader (edge_agent/config_file.py): the same
spellings from the environment, and the same errors naming the file, section, key or variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cloud_hub.hub import config as hub_config
from edge_agent.agent import config as agent_config
from edge_agent.config_file import ConfigError


@pytest.mark.parametrize(
    ("raw", "flag"),
    [("true", True), ("1", True), (" Yes ", True), ("false", False), ("0", False), ("NO", False)],
)
def test_both_services_read_a_flag_from_the_environment_alike(raw: str, flag: bool) -> None:
    agent = agent_config.load_config(env={"EDGE_AGENT_PREDICTOR_PERSONALISE": raw})
    assert agent.predictor_personalise is flag
    hub = hub_config.load_config(env={"CLOUD_HUB_ADVERTISE": raw})
    assert hub.advertise is flag


def test_both_services_name_the_variable_of_a_bad_value() -> None:
    with pytest.raises(ConfigError, match=r"^\$EDGE_AGENT_PORT: expected an integer$"):
        agent_config.load_config(env={"EDGE_AGENT_PORT": "80a"})
    with pytest.raises(ConfigError, match=r"^\$CLOUD_HUB_PORT: expected an integer$"):
        hub_config.load_config(env={"CLOUD_HUB_PORT": "80a"})


def test_both_services_name_the_file_section_and_key_of_a_bad_value(tmp_path: Path) -> None:
    agent_file, hub_file = tmp_path / "agent.toml", tmp_path / "hub.toml"
    agent_file.write_text('[api]\nport = "x"\n')
    hub_file.write_text('[api]\nport = "x"\n')
    with pytest.raises(ConfigError, match=re.escape(f"{agent_file}: [api] port: expected an")):
        agent_config.load_config(agent_file, env={})
    with pytest.raises(ConfigError, match=re.escape(f"{hub_file}: [api] port: expected an")):
        hub_config.load_config(hub_file, env={})


def test_an_unknown_key_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "hub.toml"
    path.write_text("[liveness]\nheartbeat_s = 2.0\n")
    with pytest.raises(ConfigError) as err:
        hub_config.load_config(path, env={})
    assert str(err.value) == (
        f"{path}: [liveness] unknown key 'heartbeat_s'; known: heartbeat_interval_s, "
        "max_heartbeats_per_s, stale_heartbeats, push_interval_s"
    )


def test_an_empty_path_setting_means_its_default(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'[agent]\ndata_dir = "{tmp_path}"\n')
    assert agent_config.load_config(path, env={}).data_dir == tmp_path
    reset = agent_config.load_config(path, env={"EDGE_AGENT_DATA_DIR": ""})
    assert reset.data_dir == agent_config.default_data_dir()
    hub = hub_config.load_config(env={"CLOUD_HUB_DATA_DIR": ""})
    assert hub.data_dir == hub_config.HubConfig().data_dir


def test_a_number_out_of_range_names_the_toml_key_and_the_value() -> None:
    with pytest.raises(
        ConfigError, match=r"^config: \[mesh\] lease_min_s must be a finite number > 0, got 0\.0$"
    ):
        agent_config.load_config(env={"EDGE_AGENT_MESH_LEASE_MIN_S": "0"})
    with pytest.raises(
        ConfigError, match=r"^config: push_interval_s must be a finite number > 0, got inf$"
    ):
        hub_config.load_config(env={"CLOUD_HUB_PUSH_INTERVAL_S": "inf"})
