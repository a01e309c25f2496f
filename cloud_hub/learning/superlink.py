"""The hub's Flower SuperLink: start it, register SuperNodes, submit runs, wait for them.

The SuperLink listens on 127.0.0.1 only: Flower 1.42 serves its Fleet, Control and ServerAppIo
APIs on one port and the Control API has no authentication, so only this host may reach it
(the LAN reaches the Fleet API through ``fleet_gateway``). ``start()`` checks that no process
of the SuperLink's listens anywhere else.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.predictor.supernode import (
    SUPEREXEC_POLL_ENV,
    ConfigValue,
    FlowerProcess,
    config_arg,
    flower_env,
    flower_script,
)

if TYPE_CHECKING:  # pki needs cryptography (the `learning` extra); the hub imports this always
    from cloud_hub.learning.pki import TlsFiles

log = logging.getLogger(__name__)

APP_DIR = Path(__file__).with_name("flower_app")  # the FAB: pyproject naming both apps
CONNECTION = "hetmesh"
READY_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0
LOOPBACK = "127.0.0.1"


class FederationError(HetmeshError):
    """The SuperLink or the Flower CLI failed; the message carries Flower's own words."""


class RunFailed(FederationError):
    """A run ended other than finished:completed, or overran its deadline and was stopped."""


@dataclass(frozen=True)
class SuperLinkConfig:
    """The SuperLink's port (on 127.0.0.1), its TLS files (None: insecure), node authentication."""

    state_dir: Path
    port: int = 9093
    tls: TlsFiles | None = None
    supernode_auth: bool = False
    superexec_poll_s: float | None = None  # how often SuperExec looks for runs (Flower: 1 s)

    @property
    def address(self) -> str:
        """host:port of the one HTTP endpoint (Fleet, Control and Runtime APIs), on loopback."""
        return f"{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        """The flower-superlink command line (loopback only; runtime dependency install off)."""
        args = [flower_script("flower-superlink"), "--host", LOOPBACK, "--port", str(self.port)]
        if self.tls is None:
            args.append("--insecure")
        else:
            args += [
                "--ssl-certfile", str(self.tls.server_cert),
                "--ssl-keyfile", str(self.tls.server_key),
                "--ssl-ca-certfile", str(self.tls.ca_cert),
            ]  # fmt: skip
        if self.supernode_auth:
            args.append("--enable-supernode-auth")
        args += [
            "--disable-runtime-dependency-installation",
            "--database", str(self.state_dir / "superlink.db"),
        ]  # fmt: skip
        return args


class SuperLink:
    """A supervised flower-superlink plus the `flwr` CLI pointed at it (own FLWR_HOME)."""

    def __init__(self, cfg: SuperLinkConfig) -> None:
        """Prepare the state directory and the CLI's connection file; nothing runs yet."""
        self.cfg = cfg
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.home = cfg.state_dir / "flwr-home"
        self.home.mkdir(exist_ok=True)
        conn = [f"[superlink]\ndefault = \"{CONNECTION}\"\n\n[superlink.{CONNECTION}]",
                f"address = \"{cfg.address}\""]  # fmt: skip
        if cfg.tls is None:
            conn.append("insecure = true")
        else:
            conn.append(f'root-certificates = "{cfg.tls.ca_cert}"')
        (self.home / "config.toml").write_text("\n".join(conn) + "\n")
        extra = {"FLWR_HOME": str(self.home)}
        if cfg.superexec_poll_s is not None:
            extra[SUPEREXEC_POLL_ENV] = str(cfg.superexec_poll_s)
        self.env = flower_env(extra)
        self.process = FlowerProcess(
            "superlink", cfg.argv(), self.env, cfg.state_dir / "superlink.log"
        )

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the SuperLink; return once its port accepts connections, loopback only."""
        self.process.start()
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.process.alive():
                raise FederationError(f"SuperLink exited at start:\n{self.process.log_tail()}")
            try:
                socket.create_connection((LOOPBACK, self.cfg.port), timeout=0.5).close()
                self.check_loopback_only()
                return
            except OSError:
                if time.monotonic() >= deadline:
                    self.process.stop()
                    raise FederationError(
                        f"SuperLink not listening on {self.cfg.address} after {timeout_s:.0f} s"
                    ) from None
                time.sleep(0.1)  # a port poll, not synchronisation: the daemon has no ready signal

    def exposed(self) -> set[tuple[str, int]]:
        """Sockets the SuperLink or a process it started listens on other than loopback."""
        return {(a, p) for a, p in self.process.listening() if a not in (LOOPBACK, "::1")}

    def check_loopback_only(self) -> None:
        """Stop the SuperLink and raise FederationError if it listens beyond loopback."""
        exposed = self.exposed()
        if exposed:
            self.process.stop()
            raise FederationError(
                f"SuperLink listened on {sorted(exposed)}; its Control API must stay on "
                f"{LOOPBACK} (unset FLWR_INTERNAL_GRPC_* and --health-server-address)"
            )

    def stop(self) -> int | None:
        """SIGTERM the SuperLink (and its SuperExec); the exit code."""
        return self.process.stop()

    def _cli(self, *args: str) -> dict[str, Any]:
        """Run `flwr ARGS --format json` against this SuperLink; its JSON reply."""
        cmd = [flower_script("flwr"), *args, "--format", "json"]
        try:
            out = subprocess.run(
                cmd, env=self.env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise FederationError(f"`flwr {args[0]}` gave no answer in {CLI_TIMEOUT_S} s") from err
        try:
            reply: dict[str, Any] = json.loads(out.stdout[out.stdout.index("{") :])
        except ValueError:
            reply = {"success": False, "error-message": (out.stderr or out.stdout)[-2000:]}
        if not reply.get("success"):
            raise FederationError(f"`flwr {' '.join(args)}` failed: {reply}")
        return reply

    def register_supernodes(self, public_keys: Sequence[Path]) -> None:
        """Allow SuperNodes' public keys (only with supernode_auth); one CLI call each, at once."""
        with ThreadPoolExecutor(max_workers=max(1, len(public_keys))) as pool:
            for call in [pool.submit(self.register_supernode, k) for k in public_keys]:
                call.result()

    def register_supernode(self, public_key: Path) -> int | None:
        """Allow one SuperNode public key; the node id the SuperLink gave it (None: not said)."""
        node_id = self._cli("supernode", "register", str(public_key), CONNECTION).get("node-id")
        return None if node_id is None else int(node_id)

    def unregister_supernode(self, node_id: int) -> None:
        """Remove a SuperNode: its key can no longer join a run (``flwr supernode unregister``)."""
        self._cli("supernode", "unregister", str(node_id), CONNECTION)

    def supernodes(self) -> list[dict[str, Any]]:
        """The SuperLink's nodes as ``flwr supernode list`` gives them (node-id, status, ...)."""
        return list(self._cli("supernode", "list", CONNECTION).get("nodes", []))

    def submit(self, run_config: dict[str, ConfigValue], app_dir: Path = APP_DIR) -> int:
        """Start a run of the Flower App with run-config overrides; its run id."""
        args = ["run", str(app_dir), CONNECTION]
        if run_config:
            args += ["--run-config", config_arg(run_config)]
        return int(self._cli(*args)["run-id"])

    def status(self, run_id: int) -> str:
        """Flower's status text for a run, e.g. 'running' or 'finished:completed'."""
        runs = self._cli("ls", CONNECTION, "--run-id", str(run_id))["runs"]
        return str(runs[0]["status"])

    def run_log(self, run_id: int) -> Path:
        """Where wait() keeps the run's streamed ServerApp log."""
        return self.cfg.state_dir / f"run-{run_id}.log"

    def wait(self, run_id: int, timeout_s: float) -> str:
        """Stream the run's log until it finishes; stop it and raise RunFailed past the deadline."""
        cmd = [flower_script("flwr"), "log", str(run_id), CONNECTION, "--stream"]
        with open(self.run_log(run_id), "ab") as out:
            stream = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
            try:
                stream.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stream.terminate()
                stream.wait()
                # the run may have finished as the deadline passed (or its log stream lagged):
                # stop only a run still going; "already finished" is then no error
                if not self.status(run_id).startswith("finished"):
                    try:
                        self._cli("stop", str(run_id), CONNECTION)
                    except FederationError as err:
                        if "already finished" not in str(err):
                            raise
                    if self.status(run_id) != "finished:completed":
                        raise RunFailed(
                            f"run {run_id} did not finish in {timeout_s:.0f} s; stopped"
                        ) from None
        status = self.status(run_id)
        if status != "finished:completed":
            raise RunFailed(f"run {run_id} ended {status}; see {self.run_log(run_id)}")
        return status

    def run(self, run_config: dict[str, ConfigValue], timeout_s: float) -> int:
        """Submit a run and wait for it to complete; its run id."""
        if not run_config.get("registry-dir"):
            raise InvalidInput("run config needs 'registry-dir' (where the hub keeps models)")
        run_id = self.submit(run_config)
        log.info("run %s submitted to %s", run_id, self.cfg.address)
        self.wait(run_id, timeout_s)
        return run_id
