"""Running README blocks as a new user would (tests/test_readme_commands.py says how): the
``Session`` that runs each command in a fresh home and network namespace, the services it
starts and stops, and the claims each command's ``# comment`` makes about its output.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.readme_blocks import MARK, PLACEHOLDER, ROOT, Block, comment

COMMAND_TIMEOUT_S = 120.0  # the slowest command (a simulation) takes ~10 s on an idle machine
READY_TIMEOUT_S = 60.0
#: Where each service's state file (its bound port) lives under HOME, and its default config
#: file (the hub has none: it is configured by --config or $CLOUD_HUB_CONFIG only).
SERVICES = {
    "agent": (".local/share/hetmesh/agent.json", ".config/hetmesh/agent.toml"),
    "hub": (".local/share/hetmesh-hub/hub.json", ""),
}
#: What the text after a service's block says it writes under HOME: a JSON file and its keys.
WRITES = {"hub": (".local/share/hetmesh-hub/secrets.json", {"join_token", "admin_token"})}


@dataclass
class Ran:
    """A command as run: the line, its comment, exit status and output."""

    where: str
    line: str
    rc: int
    out: str
    err: str

    @property
    def comment(self) -> str:
        return comment(self.line)


# -- what a command's comment promises --------------------------------------------------


def _prints_task_id(ran: Ran, state: Session) -> None:
    ids = ran.out.split()
    assert len(ids) == 1 and re.fullmatch(r"[0-9a-f]{8,}", ids[0]), f"not a task id: {ran.out!r}"
    state.values["TASK_ID"] = ids[0]


def _states_devices(ran: Ran, state: Session) -> None:
    header = ran.out.splitlines()[0].split()
    assert {"STATE", "DEVICE"} <= set(header), f"no STATE and DEVICE columns: {header}"
    assert state.values["TASK_ID"] in ran.out, "the submitted task is not listed"


def _why_here(ran: Ran, state: Session) -> None:
    assert ran.out.startswith(state.values["TASK_ID"]), "not the submitted task"
    assert "was chosen" in ran.out, "no line says why here"
    others = ("feasible", "rejected")  # each other device: scored worse, or why it could not
    assert any(w in ln for ln in ran.out.splitlines() for w in others), "nothing says why not"


def _status(ran: Ran, state: Session) -> None:
    for word in ("DEVICE", "queue", "recent tasks"):
        assert word in ran.out, f"{word!r} missing"


def _prometheus(ran: Ran, state: Session) -> None:
    sample = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+")
    for ln in ran.out.splitlines():
        assert ln.startswith(("# HELP ", "# TYPE ")) or sample.fullmatch(ln), ln
    url = re.search(r"(\S+:\d+)/metrics", ran.line).group(1)  # type: ignore[union-attr]
    api = state.run(ran.where, f"curl -sf {url}/v1/openapi.json", state.home)  # "for the API"
    assert api.rc == 0 and "openapi" in json.loads(api.out), f"{url}/v1/openapi.json: {api.rc}"


def _mode_0600(ran: Ran, state: Session) -> None:
    written = Path(re.search(r"^wrote (\S+)$", ran.out, re.M).group(1))  # type: ignore[union-attr]
    assert written.stat().st_mode & 0o777 == 0o600, oct(written.stat().st_mode)


def _labelled_emulated(ran: Ran, state: Session) -> None:
    assert json.loads(ran.out)["emulated"] is True, ran.out[:200]


def _profiles_shipped(ran: Ran, state: Session) -> None:
    listed = {ln.split()[0] for ln in ran.out.splitlines() if ln.strip()}
    shipped = {p.stem for p in (ROOT / "firmware_profiles").glob("*.json")}
    assert shipped <= listed, f"not listed: {sorted(shipped - listed)}"


def _policy_document(ran: Ran, state: Session) -> None:
    line = state.fill(ran.line)
    assert json.loads(ran.out)["name"] == line.split("#")[0].split()[-1], ran.out[:200]


#: A comment (its start) and the check of what the command printed.
CLAIMS: dict[str, Callable[[Ran, Session], None]] = {
    "an emulated board, labelled emulated": _labelled_emulated,
    "the firmware profiles shipped": _profiles_shipped,
    "policy documents": _policy_document,
    "prints the task id": _prints_task_id,
    "states, devices": _states_devices,
    "why here, why not there": _why_here,
    "devices, queue, recent tasks": _status,
    "Prometheus": _prometheus,
    "first box: makes a key, writes it (mode 0600)": _mode_0600,
}


def check_comment(ran: Ran, state: Session) -> None:
    """The claim its comment makes, and any upper-case column names it lists, are printed."""
    for start, claim in CLAIMS.items():
        if ran.comment.startswith(start):
            claim(ran, state)
    columns = [c.strip() for c in ran.comment.split("(")[0].split(",")]
    if len(columns) > 2 and all(c.isupper() for c in columns):  # "ID, ADDRESS, STATE, ..."
        header = ran.out.splitlines()
        assert any(all(c in h for c in columns) for h in header), f"columns {columns} missing"


# -- running ---------------------------------------------------------------------------


@dataclass
class Service:
    block: Block
    home: Path
    proc: subprocess.Popen[bytes]
    config_mtime: float


@dataclass
class Session:
    """The namespace, the fresh clone and home, the running services, filled placeholders."""

    netns: str
    clone: Path
    home: Path
    values: dict[str, str] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def env(self, home: Path, venv_on_path: bool = False) -> dict[str, str]:
        """A new user's environment: HOME, no venv on PATH, no hetmesh or Python overrides."""
        venv_bin = str(Path(sys.prefix) / "bin")
        path = [p for p in os.environ.get("PATH", "").split(":") if p and p != venv_bin]
        keep = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("EDGE_AGENT_", "CLOUD_HUB_", "VIRTUAL_ENV", "PYTHONPATH"))
        }
        return {
            **keep,
            "HOME": str(home),
            "PATH": ":".join(([venv_bin] if venv_on_path else []) + path),
        }

    def argv(self, script: str) -> list[str]:
        """bash running ``script`` in the test's network namespace."""
        return ["ip", "netns", "exec", self.netns, "bash", "-c", script]

    def fill(self, line: str) -> str:
        """Return ``line`` with the placeholders known so far filled in."""
        for name, value in self.values.items():
            line = line.replace(name, value)
        return line

    def run(self, where: str, line: str, home: Path, venv_on_path: bool = False) -> Ran:
        try:
            proc = subprocess.run(
                self.argv(self.fill(line)),
                cwd=self.clone,
                env=self.env(home, venv_on_path),
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return Ran(where, line, -1, "", f"timed out after {COMMAND_TIMEOUT_S} s")
        return Ran(where, line, proc.returncode, proc.stdout, proc.stderr)

    def check(self, ran: Ran, output: bool = True) -> None:
        """Record a failure unless ``ran`` exited 0, printed (if ``output``) what it says."""
        try:
            assert ran.rc == 0, f"exit status {ran.rc}"
            assert ran.out.strip() or not output, "no output"
            assert "Traceback" not in ran.err, "a traceback"
            check_comment(ran, self)
            if ran.comment.endswith("(--json)"):  # the same command also answers in JSON
                command = ran.line[: ran.line.index("#")].strip() + " --json"
                as_json = self.run(ran.where, command, self.home)
                assert as_json.rc == 0, f"{command}: exit status {as_json.rc}: {as_json.err}"
                json.loads(as_json.out)
        except ValueError as err:  # json.JSONDecodeError
            self.fail(ran, f"not JSON: {err}")
        except AssertionError as err:
            self.fail(ran, str(err).splitlines()[0] if str(err) else "assertion failed")
        except KeyError as err:
            self.fail(ran, f"placeholder {err} unknown: no earlier command printed it")

    def fail(self, ran: Ran, why: str) -> None:
        self.failures.append(
            f"{ran.where}: `{ran.line}`: {why}\n  stdout: {ran.out[-1500:]}\n"
            f"  stderr: {ran.err[-1500:]}"
        )

    # -- services --

    def _state_port(self, name: str, home: Path) -> int | None:
        try:
            return int(json.loads((home / SERVICES[name][0]).read_text(encoding="utf-8"))["port"])
        except (OSError, ValueError, KeyError):
            return None

    def answers(self, name: str, home: Path, where: str) -> bool:
        """Return True once the state file names a port where /v1/health answers."""
        port = self._state_port(name, home)
        health = f"curl -sf http://127.0.0.1:{port}/v1/health"
        return port is not None and self.run(where, health, home).rc == 0

    @staticmethod
    def config_mtime(name: str, home: Path) -> float:
        """Return when the service's default config file last changed (0: none)."""
        config = SERVICES[name][1]
        return (home / config).stat().st_mtime if config and (home / config).exists() else 0.0

    def start(self, name: str, block: Block, home: Path) -> None:
        mtime = self.config_mtime(name, home)
        with (home / f"{name}.log").open("wb") as log:  # a file: a full pipe would stall it
            proc = subprocess.Popen(
                self.argv(block.text),
                cwd=self.clone,
                env=self.env(home),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.services[name] = Service(block, home, proc, mtime)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if self.answers(name, home, block.where):
                for url in re.findall(r"http://[\w.:/]+", block.text):  # what its comment names
                    if self.run(block.where, f"curl -sf {url}", home).rc != 0:
                        self.failures.append(f"{block.where}: {url} does not answer")
                if name in WRITES:
                    file, keys = WRITES[name]
                    found = (
                        json.loads((home / file).read_text(encoding="utf-8"))
                        if (home / file).exists()
                        else {}
                    )
                    if not keys <= set(found):
                        self.failures.append(
                            f"{block.where}: ~/{file} lacks {sorted(keys - set(found))}"
                        )
                return
            time.sleep(0.2)
        self.failures.append(f"{block.where}: {name} did not come up: {self.stop(name)}")

    def stop(self, name: str) -> str:
        """Stop the service with SIGINT; return '' if it exited 0, else what went wrong."""
        service = self.services.pop(name)
        if service.proc.poll() is None:
            os.killpg(service.proc.pid, signal.SIGINT)
        try:
            rc = service.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(service.proc.pid, signal.SIGKILL)
            service.proc.wait()
            rc = None
        log = (service.home / f"{name}.log").read_text(encoding="utf-8", errors="replace")
        if rc is None:
            return f"still running 30 s after SIGINT: {log[-2000:]}"
        return "" if rc == 0 else f"exit status {rc}: {log[-2000:]}"

    def restart_changed(self) -> None:
        """Restart each service whose config file a block rewrote since it started."""
        for name, service in list(self.services.items()):
            if self.config_mtime(name, service.home) != service.config_mtime:
                if problem := self.stop(name):
                    self.failures.append(f"{service.block.where}: stopping {name}: {problem}")
                self.start(name, service.block, service.home)

    def execute(self, block: Block) -> None:
        self.restart_changed()
        mark = MARK.match(block.mark) if block.mark else None
        if block.lang == "python":  # a script: it must run; what it prints is its own
            script = f".venv/bin/python -c {shlex.quote(block.text)}"
            self.check(self.run(block.where, script, self.home), output=False)
        elif mark and mark["service"]:
            self.start(mark["service"], block, self.home)
        elif block.mark == "<!-- run: one box per line -->":
            for i, line in enumerate(block.lines()):
                home = self.home if i == 0 else self.home.with_name(f"box{i}")
                home.mkdir(exist_ok=True)
                self.check(self.run(block.where, line, home))
                if i == 0:
                    toml = tomllib.loads((home / SERVICES["agent"][1]).read_text())
                    self.values["THE-SAME-KEY"] = toml["mesh"]["fleet_key"]
        elif block.mark == "<!-- synopsis -->":
            for line in block.lines():
                if not PLACEHOLDER.search(line.split("#")[0]):
                    self.check(self.run(block.where, line, self.home, venv_on_path=True))
        else:
            for line in block.lines():
                self.check(self.run(block.where, line, self.home))
