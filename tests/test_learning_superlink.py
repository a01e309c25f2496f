"""The hub side of Flower, without processes: credentials, SuperLink command line, schedules."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_ssh_private_key

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.localgrid import LocalGrid
from cloud_hub.learning.pki import make_node_key, make_tls
from cloud_hub.learning.serverapp import RoundSettings, train_federated
from cloud_hub.learning.superlink import APP_DIR, SuperLink, SuperLinkConfig
from edge_agent.errors import InvalidInput
from edge_agent.predictor.clientapp import app as client_app
from edge_agent.predictor.features import FeatureSpec


def test_tls_certificate_is_signed_by_the_ca_for_the_hosts(tmp_path: Path) -> None:
    tls = make_tls(tmp_path, ["127.0.0.1", "hub.local"])
    ca = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(tls.server_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["hub.local"]
    key = load_pem_private_key(tls.server_key.read_bytes(), None)
    assert key.public_key() == cert.public_key()
    assert tls.server_key.stat().st_mode & 0o077 == 0  # private key: owner only


def test_node_key_is_an_openssh_nist_ec_pair(tmp_path: Path) -> None:
    pair = make_node_key(tmp_path, "box1")
    key = load_ssh_private_key(pair.private.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    assert pair.public.read_text().startswith("ecdsa-sha2-nistp384 ")


def test_superlink_argv_and_cli_connection(tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "pki", ["127.0.0.1"])
    link = SuperLink(SuperLinkConfig(tmp_path / "hub", port=9555, tls=tls, supernode_auth=True))
    argv = link.cfg.argv()
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # the Control API stays on this host
    assert "--health-server-address" not in argv
    assert argv[argv.index("--ssl-certfile") + 1] == str(tls.server_cert)
    assert "--insecure" not in argv and "--enable-supernode-auth" in argv
    assert "--disable-runtime-dependency-installation" in argv  # boxes are offline
    conn = (link.home / "config.toml").read_text()
    assert 'address = "127.0.0.1:9555"' in conn and f'root-certificates = "{tls.ca_cert}"' in conn
    assert link.env["FLWR_HOME"] == str(link.home)
    insecure = SuperLink(SuperLinkConfig(tmp_path / "plain", port=9556))
    assert "--insecure" in insecure.cfg.argv()
    assert "insecure = true" in (insecure.home / "config.toml").read_text()


def test_app_folder_names_both_apps() -> None:
    text = (APP_DIR / "pyproject.toml").read_text()
    assert 'serverapp = "cloud_hub.learning.serverapp:app"' in text
    assert 'clientapp = "edge_agent.predictor.clientapp:app"' in text


def test_run_without_registry_is_refused_before_submitting(tmp_path: Path) -> None:
    link = SuperLink(SuperLinkConfig(tmp_path / "hub", port=9557))
    with pytest.raises(InvalidInput, match="registry-dir"):
        link.run({"num-rounds": 1}, timeout_s=1.0)


def test_evaluation_runs_on_schedule_and_in_the_last_round(tmp_path: Path) -> None:
    npz = tmp_path / "s.npz"
    np.savez(npz, t0=0.0, series=np.abs(np.sin(np.arange(300.0))) + 0.1)
    grid = LocalGrid(client_app, {101: {"series-npz": str(npz)}, 102: {"series-npz": str(npz)}})
    settings = RoundSettings(
        spec=FeatureSpec(window=8), num_rounds=5, min_nodes=2, local_epochs=1, evaluate_every=2
    )
    _, result = train_federated(grid, settings)
    assert sorted(result.train_metrics_clientapp) == [1, 2, 3, 4, 5]
    assert sorted(result.evaluate_metrics_clientapp) == [2, 4, 5]
