"""Agent configuration: defaults, TOML, environment overrides, errors, and ``init``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.cli_agent import main


def test_defaults_work_without_a_file(tmp_path: Path) -> None:
    config = load_config(env={"EDGE_AGENT_CONFIG": str(tmp_path / "none.toml")})
    assert config.host == "127.0.0.1" and config.port == 8470
    assert config.profile is None and config.policy == "balanced"
    assert config.command_allowlist == () and config.data_dir.name == "hetmesh"


def test_toml_then_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nprofile = "rk3588"\n[api]\nport = 9000\n')
    env = {
        "EDGE_AGENT_PORT": "9100",
        "EDGE_AGENT_DATA_DIR": str(tmp_path / "d"),
        "EDGE_AGENT_COMMAND_ALLOWLIST": "/bin/true, /bin/echo",
    }
    config = load_config(path, env)
    assert config.profile == "rk3588" and config.port == 9100
    assert config.data_dir == tmp_path / "d"
    assert config.command_allowlist == ("/bin/true", "/bin/echo")


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("[api]\nprot = 1\n", {}, "unknown key 'prot'"),
        ("[ap]\n", {}, "unknown section [ap]"),
        ("[api]\nport = 'x'\n", {}, "expected an integer"),
        ("[api]\nport = 70000\n", {}, "port must be 0..65535"),
        ("[agent]\npolicy = 'fastest'\n", {}, "policy must be one of"),
        ("port = = 1", {}, "not valid TOML"),
        ("", {"EDGE_AGENT_PORT": "eighty"}, "$EDGE_AGENT_PORT"),
        ("", {"EDGE_AGENT_EMULATION_JITTER": "-1"}, "emulation_jitter"),
    ],
)
def test_bad_config_names_the_problem(
    tmp_path: Path, text: str, env: dict[str, str], needle: str
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env)
    assert needle in str(err.value)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.toml", {})


def test_rendered_default_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(render_default(AgentConfig(data_dir=tmp_path, command_allowlist=("/x",))))
    assert "# " in path.read_text()
    tomllib.loads(path.read_text())
    config = load_config(path, {})
    assert config.data_dir == tmp_path and config.command_allowlist == ("/x",)
    assert config == AgentConfig(data_dir=tmp_path, command_allowlist=("/x",))


def test_init_writes_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "etc" / "agent.toml"
    assert main(["init", "--path", str(path)]) == 0
    assert path.is_file() and str(path) in capsys.readouterr().out
    assert main(["init", "--path", str(path)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["init", "--path", str(path), "--force"]) == 0


def test_predictor_personalise_from_toml_and_environment(tmp_path: Path) -> None:
    assert AgentConfig().predictor_personalise is True
    path = tmp_path / "agent.toml"
    path.write_text("[predictor]\npersonalise = false\n")
    assert load_config(path, {}).predictor_personalise is False
    env = {"EDGE_AGENT_PREDICTOR_PERSONALISE": "yes"}
    assert load_config(path, env).predictor_personalise is True
    path.write_text('[predictor]\npersonalise = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"\[predictor\] personalise"):
        load_config(path, {})
    with pytest.raises(ConfigError, match="EDGE_AGENT_PREDICTOR_PERSONALISE"):
        load_config(None, {**env, "EDGE_AGENT_PREDICTOR_PERSONALISE": "perhaps"})


def test_server_limits_from_toml_and_environment_and_documented(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("[api]\nheader_timeout_s = 5\nbody_timeout_s = 120.0\nmax_connections = 900\n")
    config = load_config(path, {"EDGE_AGENT_MAX_CONNECTIONS": "2000"})
    assert (config.header_timeout_s, config.body_timeout_s) == (5.0, 120.0)
    assert config.max_connections == 2000  # the environment wins
    text = render_default()
    for key in ("header_timeout_s = 10.0", "body_timeout_s = 60.0", "max_connections = 4096"):
        assert key in text
    for bad, needle in (
        ({"EDGE_AGENT_MAX_CONNECTIONS": "0"}, "max_connections must be 1..1000000"),
        ({"EDGE_AGENT_HEADER_TIMEOUT_S": "0"}, "header_timeout_s must be a finite number > 0"),
        ({"EDGE_AGENT_BODY_TIMEOUT_S": "inf"}, "body_timeout_s must be a finite number > 0"),
    ):
        with pytest.raises(ConfigError, match=needle):
            load_config(path, bad)


def test_mesh_link_speed_from_toml_and_environment_reaches_the_bid_gate(tmp_path: Path) -> None:
    from edge_agent.agent.mesh.link import mesh_config

    path = tmp_path / "agent.toml"
    path.write_text('[mesh]\nfleet_key = "0123456789abcdef0123"\nlink_bytes_per_s = 12.5e6\n')
    config = load_config(path, {})
    assert config.mesh_link_bytes_per_s == 12.5e6  # a 100 Mbit/s link
    assert mesh_config(config, "a1", generated=False).link_bytes_per_s == 12.5e6
    env = {"EDGE_AGENT_MESH_LINK_BYTES_PER_S": "1e9"}
    assert load_config(path, env).mesh_link_bytes_per_s == 1e9
    assert "link_bytes_per_s = 125000000.0" in render_default()
    with pytest.raises(ConfigError, match=r"\[mesh\] link_bytes_per_s must be a finite number > 0"):
        load_config(path, {"EDGE_AGENT_MESH_LINK_BYTES_PER_S": "0"})
