"""``fedpriv deploy certs``: the server certificate verifies against the CA with the SANs; node keys are OpenSSH P-384."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from simulations.deploy.certs import (
    check_node_key,
    check_server_cert,
    generate_certs,
    generate_node_keys,
)


def test_server_certificate_is_signed_by_the_ca_and_names_every_host(tmp_path: Path) -> None:
    paths = generate_certs(tmp_path, ["10.0.0.5", "node.example.org"], days=3)
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(paths.server_cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises if the signature or issuer do not match
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.0.0.5")}
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "node.example.org"}
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc) == dt.timedelta(days=3)
    key = serialization.load_pem_private_key(paths.server_key.read_bytes(), password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    for private in (paths.ca_key, paths.server_key):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    for host in ("127.0.0.1", "::1", "localhost", "10.0.0.5", "node.example.org"):
        check_server_cert(paths.ca_cert, paths.server_cert, host)


def test_node_keys_are_openssh_ecdsa_p384(tmp_path: Path) -> None:
    pairs = generate_node_keys(tmp_path, 3)
    assert [p.name for p, _ in pairs] == ["node0", "node1", "node2"]
    publics = set()
    for private, public in pairs:
        assert private.read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
        key = serialization.load_ssh_private_key(private.read_bytes(), password=None)
        pub = serialization.load_ssh_public_key(public.read_bytes())
        assert isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP384R1)
        assert public.read_text().startswith("ecdsa-sha2-nistp384 ")
        assert pub.public_numbers() == key.public_key().public_numbers()
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        check_node_key(private)
        publics.add(public.read_text().split()[1])
    assert len(publics) == 3


@pytest.mark.parametrize("case, match", [
    ("other-ca", "is not signed by the CA"),
    ("expired", "not now"),
    ("wrong-host", "not valid for 10.9.9.9"),
])
def test_bad_certificates_are_refused_with_the_reason(tmp_path: Path, case: str, match: str) -> None:
    good = generate_certs(tmp_path / "good", days=1)
    other = generate_certs(tmp_path / "other")
    ca, host, at = good.ca_cert, "127.0.0.1", None
    if case == "other-ca":
        ca = other.ca_cert
    elif case == "expired":
        at = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    else:
        host = "10.9.9.9"
    with pytest.raises(ValueError, match=match):
        check_server_cert(ca, good.server_cert, host, at=at)


def test_bad_hosts_and_node_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="host must be an IP address or a DNS name"):
        generate_certs(tmp_path, ["bad host"])
    with pytest.raises(ValueError, match="nodes must be an int >= 1"):
        generate_node_keys(tmp_path, 0)
    paths = generate_certs(tmp_path / "c")
    (tmp_path / "k.pub").write_text("x")
    (tmp_path / "k").write_bytes(paths.server_key.read_bytes())  # a PEM key, not OpenSSH
    with pytest.raises(ValueError, match="OpenSSH private key"):
        check_node_key(tmp_path / "k")
    with pytest.raises(ValueError, match="must both exist"):
        check_node_key(tmp_path / "missing")
