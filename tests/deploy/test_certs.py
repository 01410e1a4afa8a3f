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
from typer.testing import CliRunner

from simulations.cli import app
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


@pytest.mark.parametrize("victim_at", ["ca.key", "server.key", "ca.crt"])
def test_a_link_planted_where_a_key_goes_is_refused_and_its_target_untouched(tmp_path: Path, victim_at: str) -> None:
    out, victim = tmp_path / "certs", tmp_path / "victim"
    out.mkdir(mode=0o700)
    victim.write_text("someone else's file")
    (out / victim_at).symlink_to(victim)
    with pytest.raises(ValueError, match=rf"{out / victim_at} already exists: fedpriv never overwrites"):
        generate_certs(out)
    assert victim.read_text() == "someone else's file"
    assert sorted(p.name for p in out.iterdir()) == [victim_at]  # nothing written beside it either


def test_an_existing_node_key_is_never_overwritten(tmp_path: Path) -> None:
    (private, _), = generate_node_keys(tmp_path / "keys", 1)
    before = private.read_bytes()
    with pytest.raises(ValueError, match=rf"{private} already exists: .*move the old files"):
        generate_node_keys(tmp_path / "keys", 2)
    assert private.read_bytes() == before and not (tmp_path / "keys" / "node1").exists()


def test_key_folders_are_0700_and_a_shared_one_is_refused(tmp_path: Path) -> None:
    generate_certs(tmp_path / "certs")
    generate_node_keys(tmp_path / "certs" / "keys", 1)
    for folder in (tmp_path / "certs", tmp_path / "certs" / "keys"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(ValueError, match=r"can be entered by other users \(mode 0755\)"):
        generate_certs(shared)
    assert list(shared.iterdir()) == []


def test_the_ca_key_can_be_discarded_after_signing(tmp_path: Path) -> None:
    paths = generate_certs(tmp_path / "tls", keep_ca_key=False)
    assert paths.ca_key is None
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.crt", "server.key", "server.pem"]
    check_server_cert(paths.ca_cert, paths.server_cert, "127.0.0.1")


def test_deploy_certs_says_to_move_the_ca_key_off_the_superlink_host(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["deploy", "certs", str(tmp_path / "certs"), "--nodes", "1"])
    out = " ".join(result.output.split())
    assert result.exit_code == 0, out
    assert f"WARNING: {tmp_path / 'certs' / 'ca.key'} signs certificates every SuperNode trusts: move it off the " \
           "SuperLink's host now and keep it offline" in out
    again = CliRunner().invoke(app, ["deploy", "certs", str(tmp_path / "certs")])
    assert again.exit_code == 2 and "already exists: fedpriv never overwrites" in " ".join(again.output.split())
