"""``cloud-hub run``, ``repair``, ``policy set / history`` and ``agents release`` (talk to a hub).

``register(cli)`` adds the commands to the ``cloud-hub`` ``CommandLine``.
"""

from __future__ import annotations

import argparse
import json
import logging
import urllib.request
from pathlib import Path
from typing import Any

from edge_agent.clikit import CommandLine, call_service, columns, running_service_url
from edge_agent.errors import HetmeshError, InvalidInput, PolicyError


class HubUnreachable(HetmeshError):
    """No hub answered at the address; start one with ``cloud-hub run``."""


def request(base: str, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
    """Call the hub; return its JSON answer, InvalidInput carrying its error message."""
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    return call_service(
        base, req, service="hub", unreachable=HubUnreachable, start_with="cloud-hub run"
    )


def _config(args: argparse.Namespace) -> Any:
    from cloud_hub.hub.config import load_config

    return load_config(args.config)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="hub config (TOML)")


def _client(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--url", metavar="URL", help="hub base URL (default: the local hub)")


def _base_url(args: argparse.Namespace) -> str:
    if args.url:
        return str(args.url).rstrip("/")
    config = _config(args)
    return running_service_url(
        config.state_path, config.host, f"http://{config.host}:{config.port}"
    )


def _admin_token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    config = _config(args)
    if config.admin_token:
        return str(config.admin_token)
    try:
        return str(json.loads(config.secrets_path.read_text(encoding="utf-8"))["admin_token"])
    except (OSError, ValueError, KeyError) as err:
        raise InvalidInput(f"no admin token: pass --token or run the hub once ({err})") from None


def _run_options(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--host", metavar="ADDR", help="listen address")
    parser.add_argument("--port", type=int, metavar="N", help="listen port (0: any free port)")
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="database directory")
    parser.add_argument(
        "--advertise",
        action="store_true",
        default=None,
        help='announce the hub over mDNS (_hetmesh-hub._tcp) for agents with url = "mdns"',
    )


def _run(args: argparse.Namespace) -> int:
    """Run the hub until SIGTERM / SIGINT."""
    from cloud_hub.hub import server

    logging.getLogger("cloud_hub").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    config = _config(args).replace(
        host=args.host, port=args.port, data_dir=args.data_dir, advertise=args.advertise
    )
    return server.run(config)


def _repair_options(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help="database directory")


def _repair(args: argparse.Namespace) -> int:
    """Salvage a damaged hub database (the hub must be stopped); keep the damaged file."""
    from cloud_hub.hub.schema import MIGRATIONS
    from edge_agent.storage.salvage import repair

    print(repair(_config(args).replace(data_dir=args.data_dir).db_path, MIGRATIONS).summary())
    return 0


def _set_options(parser: argparse.ArgumentParser) -> None:
    _client(parser)
    parser.add_argument("file", type=Path, metavar="FILE", help="a JSON policy document")
    parser.add_argument("--token", metavar="T", help="admin token (default: the hub's secrets)")
    parser.add_argument(
        "--rollout", metavar="SELECTOR", help='roll it out: "" for all, or "site=lab,board=rk3588"'
    )
    parser.add_argument("--canary", type=float, default=1.0, metavar="F", help="canary share")
    parser.add_argument("--max-slo-misses", type=int, default=0, metavar="N", help="health gate")
    parser.add_argument(
        "--gate-timeout",
        type=float,
        metavar="S",
        help="roll back if the canaries have not passed the gate after S seconds "
        "(default: the hub's canary_timeout_s)",
    )


def _selector(text: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--rollout: expected LABEL=VALUE pairs, got {item!r}")
        pairs[key.strip()] = value.strip()
    return pairs


def _set(args: argparse.Namespace) -> int:
    """Store FILE as the policy's next version on the hub; optionally roll it out."""
    try:
        doc = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except OSError as err:
        raise InvalidInput(f"cannot read policy file {args.file}: {err}") from None
    except ValueError as err:
        raise PolicyError(f"{args.file}: not valid JSON: {err}") from None
    base, auth = _base_url(args), {"Authorization": f"Bearer {_admin_token(args)}"}
    stored = request(base, "POST", "/v1/policies", doc, auth)
    print(f"stored {stored['name']}@{stored['version']}")
    if args.rollout is not None:
        body = {
            "name": stored["name"],
            "version": stored["version"],
            "selector": _selector(args.rollout),
            "canary_fraction": args.canary,
            "max_slo_misses": args.max_slo_misses,
        }
        if args.gate_timeout is not None:
            body["gate_timeout_s"] = args.gate_timeout
        rollout = request(base, "POST", "/v1/rollouts", body, auth)["rollout"]
        print(
            f"rollout {rollout['id']}: {rollout['state']}, {rollout['agents']} agents, "
            f"canaries: {', '.join(rollout['canaries'])}"
        )
    return 0


def _history_options(parser: argparse.ArgumentParser) -> None:
    _client(parser)
    parser.add_argument("name", metavar="NAME", help="policy name")


def _history(args: argparse.Namespace) -> int:
    """Print every version of a policy, newest first."""
    import time

    versions = request(_base_url(args), "GET", f"/v1/policies/{args.name}")["versions"]
    rows = [("VERSION", "CREATED", "WEIGHTS")]
    for v in versions:
        weights = v["document"]["weights"]
        top = sorted(((w, o) for o, w in weights.items() if w > 0), reverse=True)
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v["created_at"]))
        rows.append((str(v["version"]), created, ", ".join(f"{o} {w:.3g}" for w, o in top)))
    print("\n".join(columns(rows, right=[0])))
    return 0


def _release_options(parser: argparse.ArgumentParser) -> None:
    _client(parser)
    parser.add_argument("agent_id", metavar="AGENT_ID", help="the enrolled agent's id")
    parser.add_argument("--token", metavar="T", help="admin token (default: the hub's secrets)")


def _release(args: argparse.Namespace) -> int:
    """Forget an agent's key so its id can be enrolled again (a replaced or stolen box)."""
    auth = {"Authorization": f"Bearer {_admin_token(args)}"}
    request(_base_url(args), "DELETE", f"/v1/agents/{args.agent_id}/key", None, auth)
    print(
        f"released {args.agent_id}: the next box to enrol with this id and the join token gets "
        "it (rotate the join token first if the old box was stolen)"
    )
    return 0


def register(cli: CommandLine) -> None:
    """Add ``run``, ``repair``, ``policy set / history`` and ``agents release`` to ``cloud-hub``."""
    cli.command("run", "run the cloud hub (API, dashboard, liveness, rollouts)", _run_options)(_run)
    cli.command(
        "repair", "salvage a damaged hub database (keeps the damaged file)", _repair_options
    )(_repair)
    if "policy" not in cli.groups:
        cli.group("policy", "show, validate, store and roll out scheduling policies")
    cli.command(
        "policy set", "store a policy version on the hub, optionally roll it out", _set_options
    )(_set)
    cli.command("policy history", "list a policy's versions on the hub", _history_options)(_history)
    if "agents" not in cli.groups:
        cli.group("agents", "manage enrolled agents")
    cli.command(
        "agents release", "forget an agent's key so its id can be enrolled anew", _release_options
    )(_release)
