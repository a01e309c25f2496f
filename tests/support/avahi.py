"""Avahi, the Linux mDNS/DNS-SD stack, run privately for interop tests (needs root).

``AvahiHost`` starts a private D-Bus system bus (``dbus-daemon`` on a socket in a temporary
directory, never the machine's) and an ``avahi-daemon`` inside one network namespace of a
``netns.Lan``, with a config file of its own: IPv4 only, one interface, no chroot, no
privilege drop, its pid file on a tmpfs private to that namespace's mount namespace (so it
runs beside any avahi of the machine). The avahi command line tools reach it through
``DBUS_SYSTEM_BUS_ADDRESS``, run inside the namespace: ``browse`` runs ``avahi-browse -rpt``
and parses its ``--parsable`` lines, ``resolve_host`` runs ``avahi-resolve -n``, ``publish``
runs ``avahi-publish`` until the record is established (``publish_attempt`` for one avahi
may lose to another host), ``withdraw`` stops the publishers (avahi sends goodbyes).
A missing program: ``missing_tools``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: The programs these tests run (Debian: avahi-daemon, avahi-utils, dbus).
TOOLS = ("avahi-daemon", "avahi-browse", "avahi-publish", "avahi-resolve", "dbus-daemon")
#: Bound on a daemon coming up or a record being established.
START_TIMEOUT_S = 20.0
_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

_BUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""

_AVAHI_CONF = """[server]
host-name={host_name}
use-ipv4=yes
use-ipv6=no
allow-interfaces={interface}
enable-dbus=yes
disallow-other-stacks=no
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-workstation=no
publish-hinfo=no
publish-addresses=yes
[reflector]
enable-reflector=no
[rlimits]
"""

#: Run avahi-daemon with /run on a tmpfs of its own (``ip netns exec`` gave it a private
#: mount namespace): its pid file and control socket never meet another avahi's.
_DAEMON = (
    "mount -t tmpfs tmpfs /run && mkdir -p /run/avahi-daemon && "
    'exec avahi-daemon -f "$0" --no-drop-root --no-chroot --no-rlimits --no-proc-title'
)


def missing_tools() -> list[str]:
    """Return the avahi/D-Bus programs that are not installed here."""
    return [tool for tool in TOOLS if shutil.which(tool, path=_PATH) is None]


@dataclass(frozen=True, slots=True)
class Resolved:
    """One ``=`` line of ``avahi-browse -rp``: a service avahi resolved."""

    interface: str
    name: str  # the instance name, unescaped
    service_type: str  # e.g. "_hetmesh._tcp"
    host: str  # the SRV target, e.g. "a1.local"
    address: str
    port: int
    txt: tuple[str, ...]  # each TXT string, as avahi read it

    def txt_map(self) -> dict[str, str]:
        """Return the TXT strings as key → value (a key without '=' maps to "")."""
        pairs = (item.partition("=") for item in self.txt)
        return {key: value for key, _, value in pairs}


def _unescape(field: str) -> str:
    """Undo avahi-browse's ``\\DDD`` escapes (decimal byte values) in a parsable field."""
    return re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1))), field)


def _is_ipv4(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 4
    except ValueError:
        return False


def parse_browse(output: str) -> list[Resolved]:
    """Return the resolved services (``=`` lines) in ``avahi-browse -rp`` output."""
    found = []
    for line in output.splitlines():
        fields = line.split(";", 9)
        if fields[0] != "=" or len(fields) != 10:
            continue
        _, interface, _proto, name, kind, _domain, host, address, port, txt = fields
        strings = re.findall(r'"((?:[^"\\]|\\.)*)"', txt)
        found.append(
            Resolved(
                interface=interface,
                name=_unescape(name),
                service_type=kind,
                host=host,
                address=address,
                port=int(port),
                txt=tuple(re.sub(r"\\(.)", r"\1", s) for s in strings),
            )
        )
    return found


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class AvahiHost:
    """A private D-Bus system bus and avahi-daemon in namespace ``ns`` on ``interface``."""

    def __init__(self, ns: str, interface: str, host_name: str = "avahi-peer") -> None:
        self.ns, self.interface, self.host_name = ns, interface, host_name
        self.work = Path(tempfile.mkdtemp(prefix="hmavahi-"))
        self.bus = self.work / "bus"
        self.env = {"PATH": _PATH, "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={self.bus}"}
        self.daemon_log = self.work / "avahi-daemon.log"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._publishers: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        """Start the bus and the daemon; return once avahi says its startup is complete."""
        bus_conf = self.work / "bus.conf"
        bus_conf.write_text(_BUS_CONF.format(socket=self.bus), encoding="utf-8")
        avahi_conf = self.work / "avahi-daemon.conf"
        conf = _AVAHI_CONF.format(host_name=self.host_name, interface=self.interface)
        avahi_conf.write_text(conf, encoding="utf-8")
        with (self.work / "dbus.log").open("wb") as log:
            self._spawn(
                ["dbus-daemon", f"--config-file={bus_conf}", "--nofork", "--nopidfile"], log
            )
        self._wait("the private D-Bus socket", self.bus.exists)
        with self.daemon_log.open("wb") as log:
            self._spawn(self._in_ns("sh", "-c", _DAEMON, str(avahi_conf)), log)
        self._wait("avahi-daemon to start", lambda: "startup complete" in self.log())

    def _in_ns(self, *cmd: str) -> list[str]:
        """Return ``cmd`` run inside this host's namespace (interface names are resolved
        there: an interface index means another device in the root namespace)."""
        return ["ip", "netns", "exec", self.ns, *cmd]

    def _run(self, *cmd: str) -> subprocess.CompletedProcess[bytes]:
        """Run an avahi tool in this host's namespace to its end (30 s at most)."""
        return subprocess.run(
            self._in_ns(*cmd), env=self.env, capture_output=True, timeout=30, check=False
        )

    def _publisher(self, args: tuple[str, ...], log: IO[bytes]) -> subprocess.Popen[bytes]:
        proc = self._spawn(self._in_ns("avahi-publish", *args), log)
        self._publishers.append(proc)
        return proc

    def withdraw(self) -> None:
        """Stop every ``avahi-publish`` started so far: avahi withdraws their records."""
        for proc in self._publishers:
            _stop(proc)
            self._procs.remove(proc)
        self._publishers.clear()

    def _spawn(self, cmd: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        self._procs.append(proc)
        return proc

    def _wait(self, what: str, ready: object) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():  # type: ignore[operator]
            dead = [p.args for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"waiting for {what}: exited {dead}; log: {self.log()[-2000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        """Return avahi-daemon's log so far."""
        return self.daemon_log.read_text(errors="replace") if self.daemon_log.exists() else ""

    def browse(self, service_type: str) -> list[Resolved]:
        """Return what ``avahi-browse -rpt SERVICE_TYPE`` resolves now (IPv4, this host's
        interface), as avahi parsed the records."""
        proc = self._run("avahi-browse", "-rpt", "-k", service_type)
        if proc.returncode != 0:
            raise RuntimeError(f"avahi-browse failed: {proc.stderr.decode(errors='replace')}")
        resolved = parse_browse(proc.stdout.decode(errors="replace"))
        # CI once saw avahi resolve a service at a link-local IPv6 address (fe80::...) even
        # with use-ipv6=no; the tests compare IPv4 addresses, so only those count here and
        # browse_until browses again until the IPv4 resolution shows.
        return [r for r in resolved if _is_ipv4(r.address)]

    def browse_until(
        self, service_type: str, match: str | Callable[[Resolved], bool], timeout_s: float = 30.0
    ) -> Resolved:
        """Return avahi's resolution of instance ``match`` (a name, or a test of each
        resolution), browsing again until one appears; AssertionError after ``timeout_s``."""
        test = match if callable(match) else (lambda r: r.name == match)
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.browse(service_type)
            hit = [r for r in seen if r.address and test(r)]
            if hit:
                return hit[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"avahi-browse did not resolve {match!r}; it saw {seen}")
            time.sleep(0.3)

    def resolve_host(self, host: str) -> str:
        """Return the IPv4 address ``avahi-resolve -4 -n HOST`` finds ("" if none)."""
        proc = self._run("avahi-resolve", "-4", "-n", host)
        fields = proc.stdout.decode(errors="replace").split()
        return fields[1] if len(fields) == 2 and fields[0] == host else ""

    def publish(self, *args: str) -> str:
        """Run ``avahi-publish ARGS`` until this host stops; return the name it established
        (avahi renames a service whose name another host defends: "NAME #2")."""
        out = self.work / f"publish-{len(self._procs)}.log"
        with out.open("wb") as log:
            proc = self._publisher(args, log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            text = out.read_text(errors="replace")
            established = re.search(r"Established under name '(.*)'", text)
            if established:
                return established.group(1)
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"avahi-publish {' '.join(args)}: {text}")
            time.sleep(0.05)

    def publish_attempt(self, *args: str, settle_s: float = 5.0) -> str:
        """Run ``avahi-publish ARGS`` for up to ``settle_s`` s; return what it printed (for
        a record avahi may find taken: an address another host defends)."""
        out = self.work / f"publish-{len(self._procs)}.log"
        with out.open("wb") as log:
            proc = self._publisher(args, log)
        deadline = time.monotonic() + settle_s
        while proc.poll() is None and time.monotonic() < deadline:
            if "Established" in out.read_text(errors="replace"):
                break
            time.sleep(0.05)
        return out.read_text(errors="replace")

    def close(self) -> None:
        """Stop every process this host started (publishers, daemon, bus); remove its files."""
        self.withdraw()
        for proc in reversed(self._procs):
            _stop(proc)
        self._procs.clear()
        shutil.rmtree(self.work, ignore_errors=True)


@contextlib.contextmanager
def avahi_host(ns: str, interface: str, host_name: str = "avahi-peer") -> Iterator[AvahiHost]:
    """Yield a started ``AvahiHost``; stop it and remove its files after."""
    host = AvahiHost(ns, interface, host_name)
    try:
        host.start()
        yield host
    finally:
        host.close()
