"""Certificates and keys of a deployment, made with ``cryptography`` (no ``openssl``/``ssh-keygen`` needed).

* a self-signed CA (``ca.crt``, ``ca.key``) — the SuperNodes and the ``flwr`` CLI trust it
  (``--root-certificates``, ``root-certificates`` in ``config.toml``);
* the SuperLink's server certificate (``server.pem``, ``server.key``) signed by the CA, valid for
  ``127.0.0.1``, ``::1``, ``localhost`` and every ``--host`` given (IP addresses and DNS names);
  one certificate covers the Fleet gRPC API and the Control/Runtime HTTP APIs (docs/deployment.md §5);
* one ECDSA P-384 key pair per SuperNode in OpenSSH format (``keys/node<i>``, ``keys/node<i>.pub``),
  the format ``ssh-keygen -t ecdsa -b 384`` writes and ``flower-supernode
  --auth-supernode-private-key`` / ``flwr supernode register`` read.

Every file is created exclusively and without following a link (:mod:`fedpriv.private_files`): private
keys with mode 0600 before any byte is written, into a directory of mode 0700; a file or link already
at a path is an error naming it, never overwritten. ``generate_certs(..., keep_ca_key=False)`` signs
the server certificate and discards the CA key without writing it anywhere (``fedpriv deploy local``).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedpriv.private_files import UnsafePathError, create_file, private_dir, write_private

__all__ = ["DEFAULT_HOSTS", "CertPaths", "check_node_key", "check_server_cert", "generate_certs", "generate_node_keys",
           "node_key_paths", "san_entry"]

#: Names the server certificate is always valid for (the loopback deployment).
DEFAULT_HOSTS: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class CertPaths:
    """Where :func:`generate_certs` wrote the CA and the server certificate (``ca_key`` None: not written)."""

    ca_cert: Path
    ca_key: Path | None
    server_cert: Path
    server_key: Path


def san_entry(host: str) -> x509.GeneralName:
    """The subjectAltName entry of ``host``: an IP address if it parses as one, else a DNS name."""
    if not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host.strip()):
        raise ValueError(f"host must be an IP address or a DNS name without spaces, got {host!r}")
    host = host.strip()
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


#: Mode of the certificates and public keys (readable by everyone: nothing secret in them).
PUBLIC_MODE = 0o644


def _refuse_existing(paths: Sequence[Path]) -> None:
    """Raise naming the first of ``paths`` that exists (a file or a link): nothing is written over it."""
    for path in paths:
        if os.path.lexists(path):
            raise UnsafePathError(f"{path} already exists: fedpriv never overwrites a certificate or key; move the "
                                  f"old files in {path.parent} away (or delete them), or write to another directory")


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def generate_certs(out: Path, hosts: Sequence[str] = (), *, days: int = 365, keep_ca_key: bool = True) -> CertPaths:
    """Write a CA and a CA-signed server certificate for ``DEFAULT_HOSTS`` + ``hosts`` into ``out`` (made 0700).

    With ``keep_ca_key=False`` the CA key signs the server certificate and is discarded, never written.
    """
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days must be an int >= 1, got {days!r}")
    names = list(dict.fromkeys([*DEFAULT_HOSTS, *hosts]))
    sans = [san_entry(h) for h in names]
    out = Path(out)
    paths = CertPaths(out / "ca.crt", out / "ca.key" if keep_ca_key else None, out / "server.pem", out / "server.key")
    _refuse_existing([p for p in (paths.ca_cert, paths.ca_key, paths.server_cert, paths.server_key) if p is not None])
    private_dir(out)
    now = _dt.datetime.now(_dt.UTC) - _dt.timedelta(minutes=5)  # tolerate small clock skew
    until = now + _dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedpriv deployment CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name).public_key(server_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=True, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    create_file(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), mode=PUBLIC_MODE, what="certificate")
    if paths.ca_key is not None:
        write_private(paths.ca_key, _pem_key(ca_key))
    create_file(paths.server_cert, server_cert.public_bytes(serialization.Encoding.PEM), mode=PUBLIC_MODE,
                what="certificate")
    write_private(paths.server_key, _pem_key(server_key))
    return paths


def node_key_paths(out: Path, node: int) -> tuple[Path, Path]:
    """The private and public key files of SuperNode ``node`` under ``out``."""
    return Path(out) / f"node{node}", Path(out) / f"node{node}.pub"


def generate_node_keys(out: Path, nodes: int) -> list[tuple[Path, Path]]:
    """Write ``nodes`` ECDSA P-384 key pairs in OpenSSH format into ``out`` (made 0700); returns (private, public)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be an int >= 1, got {nodes!r}")
    pairs = [node_key_paths(out, i) for i in range(nodes)]
    _refuse_existing([p for pair in pairs for p in pair])
    private_dir(Path(out))
    for i, (private, public) in enumerate(pairs):
        key = ec.generate_private_key(ec.SECP384R1())
        write_private(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                 serialization.NoEncryption()))
        pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        create_file(public, pub + f" fedpriv-node{i}\n".encode(), mode=PUBLIC_MODE, what="public key")
    return pairs


def check_server_cert(ca_cert: Path, server_cert: Path, host: str = "127.0.0.1",
                      at: _dt.datetime | None = None) -> None:
    """Raise ``ValueError`` unless ``server_cert`` is signed by ``ca_cert``, valid ``at`` (now) and names ``host``."""
    for path in (ca_cert, server_cert):
        if not Path(path).is_file():
            raise ValueError(f"certificate file {path} does not exist")
    try:
        ca = x509.load_pem_x509_certificate(Path(ca_cert).read_bytes())
        cert = x509.load_pem_x509_certificate(Path(server_cert).read_bytes())
    except ValueError as exc:
        raise ValueError(f"{ca_cert} and {server_cert} must be PEM certificates: {exc}") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise ValueError(f"the server certificate {server_cert} is not signed by the CA {ca_cert}: use the CA that "
                         "issued it, or make both with `fedpriv deploy certs`") from None
    now = at or _dt.datetime.now(_dt.UTC)
    for path, c in ((ca_cert, ca), (server_cert, cert)):
        if not c.not_valid_before_utc <= now <= c.not_valid_after_utc:
            raise ValueError(f"the certificate {path} is valid from {c.not_valid_before_utc:%Y-%m-%d %H:%M} to "
                             f"{c.not_valid_after_utc:%Y-%m-%d %H:%M} UTC, not now ({now:%Y-%m-%d %H:%M} UTC): "
                             "make new ones with `fedpriv deploy certs`")
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = x509.SubjectAlternativeName([])
    if san_entry(host) not in names:
        listed = ", ".join(str(n.value) for n in names) or "none"
        raise ValueError(f"the server certificate {server_cert} is not valid for {host} (its subjectAltNames: "
                         f"{listed}): make one with `fedpriv deploy certs --host {host}`")


def check_node_key(private_key: Path) -> None:
    """Raise ``ValueError`` unless ``private_key`` is an unencrypted OpenSSH EC private key with a ``.pub`` beside it."""
    path = Path(private_key)
    if not path.is_file() or not path.with_name(path.name + ".pub").is_file():
        raise ValueError(f"node key {path} and its public key {path}.pub must both exist "
                         "(make them with `fedpriv deploy certs --nodes N`)")
    try:
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"node key {path} must be an unencrypted OpenSSH private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"node key {path} must be an ECDSA key (Flower's node authentication), got "
                         f"{type(key).__name__}")
