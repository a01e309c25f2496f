"""The agent side of Flower: config strings, the SuperNode command line, process supervision."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

import edge_agent
from edge_agent.errors import InvalidInput
from edge_agent.predictor.supernode import (
    ConfigValue,
    FlowerProcess,
    SuperNodeConfig,
    config_arg,
    flower_env,
    parse_config_arg,
    stop_all,
    stopped_cleanly,
    supernode_process,
)


def test_config_arg_quotes_strings_and_keeps_numbers() -> None:
    arg = config_arg({"telemetry-db": "/var/lib/agent db/agent.db", "n": 3, "x": 0.5, "on": True})
    assert arg == 'telemetry-db="/var/lib/agent db/agent.db" n=3 x=0.5 on=true'


@pytest.mark.parametrize(
    ("values", "fix"),
    [({"a": 'say "hi"'}, "quotes"), ({"bad key": 1}, "without spaces"), ({"": 1}, "non-empty")],
)
def test_config_arg_refuses_what_flower_would_misparse(values: dict[str, str], fix: str) -> None:
    with pytest.raises(InvalidInput, match=fix):
        config_arg(values)


def test_parse_config_arg_reads_what_config_arg_writes() -> None:
    values: dict[str, ConfigValue] = {"window": 8, "bucket-s": 2.0, "name": "box", "on": False}
    assert parse_config_arg(config_arg(values)) == values
    assert parse_config_arg("") == {}
    with pytest.raises(InvalidInput, match="expected key=value"):
        parse_config_arg("=3")


def test_supernode_argv_secure_and_offline() -> None:
    cfg = SuperNodeConfig(
        superlink="hub.local:9093",
        node_config={"telemetry-db": "/data/agent.db"},
        root_certificates=Path("/etc/hetmesh/ca.pem"),
        auth_private_key=Path("/etc/hetmesh/node_key"),
        runtime_port=9200,
    )
    argv = cfg.argv()
    assert argv[0].endswith("flower-supernode")
    assert "--insecure" not in argv
    assert argv[argv.index("--root-certificates") + 1] == "/etc/hetmesh/ca.pem"
    assert argv[argv.index("--auth-supernode-private-key") + 1] == "/etc/hetmesh/node_key"
    assert argv[argv.index("--node-config") + 1] == 'telemetry-db="/data/agent.db"'
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # its runtime API stays on the box
    assert "--allow-runtime-dependency-installation" not in argv  # boxes are offline


def test_supernode_argv_insecure_without_ca() -> None:
    assert "--insecure" in SuperNodeConfig(superlink="127.0.0.1:1").argv()


def test_supernode_process_keeps_flower_state_in_its_own_home(tmp_path: Path) -> None:
    cfg = SuperNodeConfig(superlink="127.0.0.1:1", flwr_home=tmp_path, superexec_poll_s=0.5)
    proc = supernode_process(cfg, "box", tmp_path / "box.log")
    assert proc.env["FLWR_HOME"] == str(tmp_path)
    assert proc.env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.5"


def test_flower_env_makes_hetmesh_importable() -> None:
    env = flower_env({"FLWR_HOME": "/x"})
    root = str(Path(edge_agent.__file__).resolve().parents[1])  # where hetmesh is imported from
    assert root in env["PYTHONPATH"].split(":") and env["FLWR_HOME"] == "/x"
    assert env["PATH"].startswith(str(Path(sys.executable).parent))


def _py(tmp: Path, name: str, code: str) -> FlowerProcess:
    return FlowerProcess(name, [sys.executable, "-c", code], flower_env(), tmp / f"{name}.log")


def test_stop_sends_sigterm_and_reaps_children(tmp_path: Path) -> None:
    # the grandchild exits when its parent dies, as Flower's SuperExec does (--parent-pid)
    grandchild = "import os,time\nwhile os.getppid() == {ppid}: time.sleep(0.05)"
    child = (
        "import os,subprocess,sys,time\n"
        f"code = {grandchild!r}.replace('{{ppid}}', str(os.getpid()))\n"
        "subprocess.Popen([sys.executable, '-c', code])\n"
        "time.sleep(60)"
    )
    proc = _py(tmp_path, "parent", child)
    proc.start()
    deadline = time.monotonic() + 10
    while len(proc.pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = proc.pids()
    assert len(pids) == 2 and proc.alive()
    assert proc.stop(grace_s=5.0) == -15  # SIGTERM, not a kill
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids)


def test_stop_kills_a_daemon_that_ignores_sigterm(tmp_path: Path) -> None:
    stubborn = (
        "import signal,time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)"
    )
    a, b = _py(tmp_path, "a", stubborn), _py(tmp_path, "b", "import time; time.sleep(60)")
    for p in (a, b):
        p.start()
    deadline = time.monotonic() + 10
    while "ready" not in a.log_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    codes = stop_all([a, b], grace_s=0.3)
    assert codes == [-9, -15] and [stopped_cleanly(c) for c in codes] == [False, True]
    assert not a.alive() and not b.alive()
