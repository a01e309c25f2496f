"""A Flower daemon as a supervised child process; the agent's SuperNode command line."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

import edge_agent
from edge_agent.errors import InvalidInput

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0  # SIGTERM, then this long before SIGKILL
SUPEREXEC_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"  # Flower's own knob (default 1 s)
#: Flower 1.42 switches on its legacy gRPC Fleet/Control servers (bound to 0.0.0.0) when these
#: are "1"; a Flower daemon started here never inherits them.
LEGACY_GRPC_ENV = ("FLWR_INTERNAL_GRPC_CONTROL_API", "FLWR_INTERNAL_GRPC_FLEET_API")
LISTEN = "0A"  # the TCP state LISTEN in /proc/<pid>/net/tcp
ConfigValue = str | int | float | bool


def config_arg(values: Mapping[str, ConfigValue]) -> str:
    """Flower's `key=value` list (node or run config); strings are quoted TOML strings."""
    parts = []
    for key, value in values.items():
        if not key or any(c.isspace() or c == "=" for c in key):
            raise InvalidInput(f"config key {key!r} must be non-empty, without spaces or '='")
        if isinstance(value, bool):
            parts.append(f"{key}={'true' if value else 'false'}")
        elif isinstance(value, int | float):
            parts.append(f"{key}={value!r}")
        else:
            if any(c in value for c in '"\\\n'):
                raise InvalidInput(f"config value for {key!r} may not hold quotes or backslashes")
            parts.append(f'{key}="{value}"')
    return " ".join(parts)


def parse_config_arg(text: str) -> dict[str, ConfigValue]:
    """The inverse of config_arg: ``key=value ...`` with TOML values (``window=8 bucket-s=2.0``)."""
    out: dict[str, ConfigValue] = {}
    for part in text.split():
        key, sep, raw = part.partition("=")
        if not sep or not key:
            raise InvalidInput(f"config item {part!r}: expected key=value")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            raise InvalidInput(
                f"config item {part!r}: the value must be a number, true/false or a quoted string"
            ) from None
        if not isinstance(value, str | int | float | bool):
            raise InvalidInput(f"config item {part!r}: expected a number, boolean or string")
        out[key] = value
    return out


def flower_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for Flower daemons: this interpreter's scripts and hetmesh importable."""
    env = {k: v for k, v in os.environ.items() if k not in LEGACY_GRPC_ENV}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    root = str(Path(edge_agent.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [root, env.get("PYTHONPATH", "")] if p)
    env.update(extra or {})
    return env


def flower_script(name: str) -> str:
    """Path of a Flower console script installed beside this interpreter."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise InvalidInput(f"{name} not found beside {sys.executable}; is flwr installed?")
    return str(path)


class FlowerProcess:
    """One Flower daemon (SuperLink or SuperNode) and the SuperExec/app processes it spawns."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path):
        """Describe the process; nothing runs until start()."""
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stopping: list[psutil.Process] = []

    @property
    def pid(self) -> int | None:
        """The daemon's pid while started."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        """Start the daemon with its output appended to log_path."""
        if self.alive():
            return
        self._log = open(self.log_path, "ab")  # noqa: SIM115  # closed in stop()
        self._proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT
        )
        log.info("started %s (pid %s)", self.name, self._proc.pid)

    def alive(self) -> bool:
        """Whether the daemon is running."""
        return self._proc is not None and self._proc.poll() is None

    def pids(self) -> list[int]:
        """The daemon's pid and its descendants' pids, now."""
        return [p.pid for p in self._family()]

    def _family(self) -> list[psutil.Process]:
        """The daemon and its descendants (SuperExec detaches into its own session)."""
        if self._proc is None:
            return []
        try:
            root = psutil.Process(self._proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def listening(self) -> set[tuple[str, int]]:
        """(address, port) of every TCP socket the daemon and its descendants listen on now."""
        return {sock for pid in self.pids() for sock in listening_sockets(pid)}

    def terminate(self) -> None:
        """Send SIGTERM (a planned stop); wait_stopped() then reaps the daemon and its children."""
        self._stopping = self._family()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Wait for the daemon, then its children; SIGKILL what outlives the grace; exit code."""
        deadline = time.monotonic() + grace_s
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0f s; killing", self.name, grace_s)
                self._proc.kill()
                code = self._proc.wait()
        root = None if self._proc is None else self._proc.pid
        children = [p for p in self._stopping if p.pid != root]
        while (left := [p for p in children if _running(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)  # SuperExec notices its parent is gone on its own poll
        for p in left:
            log.warning("%s: child pid %s outlived it; killing", self.name, p.pid)
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        self._stopping = []
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the daemon and wait for it and its children; the exit code."""
        self.terminate()
        return self.wait_stopped(grace_s)

    def kill(self) -> None:
        """SIGKILL the daemon alone, as a crash would (its children notice and exit)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the daemon's log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def stopped_cleanly(code: int | None) -> bool:
    """Whether an exit code means a planned stop (0 or SIGTERM), not a SIGKILL or a crash."""
    return code in (0, -signal.SIGTERM)  # uvicorn re-raises SIGTERM after a graceful shutdown


def _running(p: psutil.Process) -> bool:
    """Whether a process still runs (a zombie awaiting a reaper does not)."""
    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def stop_all(procs: Sequence[FlowerProcess], grace_s: float = STOP_GRACE_S) -> list[int | None]:
    """SIGTERM every daemon at once, then wait for each; their exit codes in order."""
    for p in procs:
        p.terminate()
    return [p.wait_stopped(grace_s) for p in procs]


@dataclass(frozen=True)
class SuperNodeConfig:
    """How this box joins a federation: SuperLink address, trust, identity and its data."""

    superlink: str
    node_config: Mapping[str, ConfigValue] = field(default_factory=dict)
    root_certificates: Path | None = None  # None: insecure (loopback tests only)
    auth_private_key: Path | None = None
    runtime_port: int = 9094  # the SuperNode's own ClientAppIo API, on 127.0.0.1
    max_wait_s: float | None = None
    superexec_poll_s: float | None = None  # how often SuperExec looks for work (Flower: 1 s)
    flwr_home: Path | None = None  # where Flower unpacks apps; default ~/.flwr

    def argv(self) -> list[str]:
        """The flower-supernode command line (runtime dependency installation stays off)."""
        args = [flower_script("flower-supernode"), "--superlink", self.superlink]
        if self.root_certificates is None:
            args.append("--insecure")
        else:
            args += ["--root-certificates", str(self.root_certificates)]
        if self.auth_private_key is not None:
            args += ["--auth-supernode-private-key", str(self.auth_private_key)]
        args += ["--host", "127.0.0.1", "--port", str(self.runtime_port)]
        if self.node_config:
            args += ["--node-config", config_arg(self.node_config)]
        if self.max_wait_s is not None:
            args += ["--max-wait-time", str(self.max_wait_s)]
        return args


def supernode_process(cfg: SuperNodeConfig, name: str, log_path: Path) -> FlowerProcess:
    """A supervised flower-supernode for cfg (start() to join, stop() to leave cleanly)."""
    extra = {} if cfg.flwr_home is None else {"FLWR_HOME": str(cfg.flwr_home)}
    if cfg.superexec_poll_s is not None:
        extra[SUPEREXEC_POLL_ENV] = str(cfg.superexec_poll_s)
    return FlowerProcess(name, cfg.argv(), flower_env(extra), log_path)


def make_node_key(directory: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode key pair (NIST P-384, OpenSSH, as `flwr supernode register` wants): paths.

    Returns (private key, public key); the private key file is readable by the owner only.
    """
    # cryptography comes with the `learning` extra (flwr); the agent imports this module always
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    priv_path, pub_path = directory / f"{name}_key", directory / f"{name}_key.pub"
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    pub_path.write_bytes(public)
    return priv_path, pub_path


class SuperNodeSupervisor:
    """The agent's SuperNode: running only while the hub wants rounds; SIGTERM to stop.

    ``want(run)`` takes the hub's instruction ({"active", "superlink", "root_certificates"}):
    start (or restart at a new address, or after a crash) while active, stop otherwise. The
    node's identity key pair lives in ``state_dir`` and survives restarts; its public key is
    what the hub registers with the SuperLink.
    """

    def __init__(
        self, state_dir: Path, telemetry_db: Path, superexec_poll_s: float | None = None
    ) -> None:
        """Load or create the node key pair (blocking); nothing runs yet."""
        self.state_dir = state_dir
        self.telemetry_db = telemetry_db
        self.superexec_poll_s = superexec_poll_s
        state_dir.mkdir(parents=True, exist_ok=True)
        private, public = state_dir / "supernode_key", state_dir / "supernode_key.pub"
        if not (private.exists() and public.exists()):
            private, public = make_node_key(state_dir, "supernode")
        self.private_key = private
        self.public_key = public.read_text().strip()
        self.process: FlowerProcess | None = None
        self.superlink: str | None = None
        self.starts = 0
        self.exit_codes: list[int | None] = []

    @property
    def running(self) -> bool:
        """Whether the SuperNode daemon is alive now."""
        return self.process is not None and self.process.alive()

    def want(self, run: Mapping[str, object]) -> None:
        """Apply the hub's instruction (blocking: starting and stopping are process calls)."""
        address = run.get("superlink")
        if not run.get("active") or not isinstance(address, str):
            self.stop()
            return
        if self.running and address == self.superlink:
            return
        self.stop()
        root = None
        pem = run.get("root_certificates")
        if isinstance(pem, str):
            root = self.state_dir / "superlink-ca.pem"
            root.write_text(pem)
        cfg = SuperNodeConfig(
            superlink=address,
            node_config={"telemetry-db": str(self.telemetry_db)},
            root_certificates=root,
            auth_private_key=self.private_key if root is not None else None,
            runtime_port=free_loopback_port(),
            superexec_poll_s=self.superexec_poll_s,
            flwr_home=self.state_dir / "flwr-home",
        )
        self.process = supernode_process(cfg, "supernode", self.state_dir / "supernode.log")
        self.process.start()
        self.superlink = address
        self.starts += 1

    def stop(self) -> None:
        """SIGTERM the SuperNode (a planned stop) and wait for it and its children (blocking)."""
        if self.process is not None:
            code = self.process.stop()
            self.exit_codes.append(code)
            log.info("supernode stopped (exit %s)", code)
        self.process, self.superlink = None, None

    def status(self) -> dict[str, object]:
        """What the agent reports: running, where, how often started, last exit code."""
        return {
            "running": self.running,
            "superlink": self.superlink,
            "starts": self.starts,
            "last_exit": self.exit_codes[-1] if self.exit_codes else None,
        }


def free_loopback_port() -> int:
    """A loopback port free now (a SuperNode's ClientAppIo API, the SuperLink's own port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on (Linux /proc).

    Read from ``/proc/PID/net/tcp{,6}``, the tables of the process's own network namespace
    (psutil reads the caller's), matched against the socket inodes among its open files.
    """
    proc = Path("/proc") / str(pid)
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in (proc / "fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    found: set[tuple[str, int]] = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            rows = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] != LISTEN or cols[9] not in inodes:
                continue
            hexaddr, hexport = cols[1].split(":")
            raw = bytes.fromhex(hexaddr)  # printed as 32-bit words in host byte order
            if sys.byteorder == "little":
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((socket.inet_ntop(family, raw), int(hexport, 16)))
    return found
