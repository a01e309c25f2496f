"""Credentials for a Flower federation: a private CA, the SuperLink's TLS cert, SuperNode keys."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge_agent.predictor import supernode

VALID_DAYS = 365


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA that agents trust, and the SuperLink's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class NodeKey:
    """A SuperNode's EC key pair in OpenSSH format (Flower's SuperNode authentication)."""

    private: Path
    public: Path


def _write(path: Path, data: bytes, secret: bool = False) -> Path:
    """Write a credential file; private keys are readable by the owner only."""
    path.write_bytes(data)
    if secret:
        os.chmod(path, 0o600)
    return path


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    hosts: list[str] | None,
) -> x509.Certificate:
    """A certificate for subject; a CA when hosts is None, else a server cert for hosts."""
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=hosts is None, path_length=None), critical=True)
    )
    if hosts is not None:
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_tls(directory: Path, hosts: list[str]) -> TlsFiles:
    """A fresh CA and a SuperLink certificate it signs for the given hosts/IPs (SANs)."""
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("hetmesh federation CA", ca_key, None, ca_key, None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert(hosts[0], key, ca.subject, ca_key, hosts)
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return TlsFiles(
        ca_cert=_write(directory / "ca.pem", ca.public_bytes(pem)),
        server_cert=_write(directory / "superlink.pem", cert.public_bytes(pem)),
        server_key=_write(directory / "superlink.key", key_pem, secret=True),
    )


def make_node_key(directory: Path, name: str) -> NodeKey:
    """A SuperNode key pair (NIST P-384, OpenSSH format, as `flwr supernode register` wants)."""
    private, public = supernode.make_node_key(directory, name)
    return NodeKey(private=private, public=public)
