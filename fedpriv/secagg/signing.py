"""Signatures of secure aggregation against an active server: node keys, peers tables, what is signed.

Bonawitz et al., CCS 2017, "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
the actively secure variant (their §4, rounds AdvertiseKeys and ConsistencyCheck), over a public-key
infrastructure that the node operators provide, not the server:

* each client signs its advertised public keys with its **node key** (the ECDSA P-384 key a
  SuperNode authenticates with; ``fedpriv deploy`` writes one per node in OpenSSH format), and
  verifies every other client's signature against its **peers table** (client id → public key,
  from the node's policy). A server that substitutes a key — to decrypt the shares a client
  addressed to a peer, or to play every other client itself — is caught: the signature does not
  verify;
* in the consistency check each client signs the survivor set ``U3`` the server announced and,
  before it reveals any share, verifies ``≥ t`` signatures of other clients over the **same** set.
  A server that tells some clients that client ``v`` uploaded (to get shares of ``v``'s self-mask
  seed) and others that it dropped (to get shares of ``v``'s mask key) cannot collect ``t``
  signatures for both sets when ``2t − n`` exceeds the clients colluding with it.

What is signed (ECDSA over SHA-384; every payload starts with a domain tag, so no signature made
here is a valid signature of anything else the node key signs, e.g. Flower's node authentication):

* keys: ``b"fedpriv/secagg/v1/advertise-keys\\0" ‖ SHA-256(instance config) ‖ instance ‖ client ‖
  enc_public ‖ mask_public`` (:func:`keys_payload`); the instance config is the
  :class:`~fedpriv.secagg.messages.ProtocolConfig` (roster, thresholds, graph, dim, codec) in canonical
  JSON (:func:`config_digest`), so clients that were sent different configs reject each other;
* consistency: ``b"fedpriv/secagg/v1/consistency\\0" ‖ SHA-256(instance config) ‖ instance ‖ |U3| ‖
  U3 ascending`` (:func:`survivors_payload`), ids and counts as 8-byte big-endian integers.

A simulation (:meth:`fedpriv.node.policy.NodePolicy.simulation`) has no node keys: there
:func:`simulated_signer` and :func:`simulated_peers` derive each client's key from the run seed
(public, so this protects nothing, and signs deterministically, RFC 6979) so that the runtimes
exercise the same checks and agree bit for bit.
"""

from __future__ import annotations

import functools
import hashlib
import json
import struct
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpriv._validation import check_int
from fedpriv.node.versioned import file_version
from fedpriv.secagg.crypto import ProtocolViolation

__all__ = ["CURVE", "PeerKeys", "SignatureError", "Signer", "config_digest", "keys_payload", "load_peers",
           "load_signing_key", "simulated_peers", "simulated_signer", "survivors_payload"]

#: The curve of node keys (what ``fedpriv deploy`` and ``ssh-keygen -t ecdsa -b 384`` write).
CURVE = ec.SECP384R1()
_KEYS_TAG = b"fedpriv/secagg/v1/advertise-keys\0"
_SURVIVORS_TAG = b"fedpriv/secagg/v1/consistency\0"
_SIMULATED_TAG = b"fedpriv/secagg/v1/simulated-node-key\0"
_U64 = struct.Struct(">Q")
#: The largest DER-encoded ECDSA P-384 signature (2 integers of up to 49 bytes, with their headers).
MAX_SIGNATURE_BYTES = 104


class SignatureError(ProtocolViolation):
    """A signature that does not verify against the signer's key in the peers table, or too few of them."""


def config_digest(fields: Mapping[str, Any]) -> bytes:
    """SHA-256 of an instance config's flat fields (``ProtocolConfig.to_dict()``) in canonical JSON."""
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def keys_payload(digest: bytes, instance: int, client: int, enc_public: bytes, mask_public: bytes) -> bytes:
    """What a client signs when it advertises its two public keys (module docstring)."""
    return b"".join((_KEYS_TAG, digest, _U64.pack(instance), _U64.pack(client), enc_public, mask_public))


def survivors_payload(digest: bytes, instance: int, survivors: Sequence[int]) -> bytes:
    """What a client signs in the consistency check: the survivor set ``U3`` of ``instance`` (module docstring)."""
    ids = sorted(int(c) for c in survivors)
    return b"".join((_SURVIVORS_TAG, digest, _U64.pack(instance), _U64.pack(len(ids)), *map(_U64.pack, ids)))


class Signer:
    """A node's signing key: ECDSA P-384 over SHA-384 (``deterministic``: RFC 6979, for simulated keys)."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, *, deterministic: bool = False, source: str = "") -> None:
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != CURVE.name:
            raise TypeError(f"key must be an ECDSA {CURVE.name} private key, got {_describe(key)}")
        self._key = key
        self._algorithm = ec.ECDSA(hashes.SHA384(), deterministic_signing=bool(deterministic))
        self.source = source

    def __repr__(self) -> str:
        return f"Signer({self.source or '<key>'})"

    @property
    def public_key(self) -> ec.EllipticCurvePublicKey:
        """The public half (what the peers' tables hold)."""
        return self._key.public_key()

    def sign(self, data: bytes) -> bytes:
        """The DER-encoded ECDSA signature of ``data``."""
        return self._key.sign(data, self._algorithm)


class PeerKeys:
    """A peers table: client id → ECDSA P-384 public key (``resolve``: a key computed on first use, for simulations)."""

    def __init__(self, keys: Mapping[int, ec.EllipticCurvePublicKey] | None = None, *, source: str = "",
                 resolve: Callable[[int], ec.EllipticCurvePublicKey] | None = None) -> None:
        self._keys = dict(keys or {})
        for client, key in self._keys.items():
            check_int(client, "peer client id", minimum=0)
            if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != CURVE.name:
                raise TypeError(f"the key of peer {client} must be an ECDSA {CURVE.name} public key, got "
                                f"{_describe(key)}")
        self._resolve = resolve
        self.source = source

    def __repr__(self) -> str:
        return f"PeerKeys({self.source or f'{len(self._keys)} peers'})"

    def __contains__(self, client: object) -> bool:
        return self._resolve is not None or client in self._keys

    def missing(self, clients: Iterable[int]) -> list[int]:
        """The ``clients`` this table has no key for (sorted)."""
        return sorted(int(c) for c in clients if int(c) not in self)

    def key(self, client: int) -> ec.EllipticCurvePublicKey:
        """The public key of ``client`` (SignatureError naming the table when it has none)."""
        if client not in self._keys:
            if self._resolve is None:
                raise SignatureError(f"client {client} is not in this node's peers table ({self.source}): its "
                                     "signature cannot be checked")
            self._keys[client] = self._resolve(client)
        return self._keys[client]

    def verify(self, client: int, signature: bytes, data: bytes) -> bool:
        """Whether ``signature`` is ``client``'s ECDSA/SHA-384 signature of ``data``."""
        if not isinstance(signature, bytes) or not 0 < len(signature) <= MAX_SIGNATURE_BYTES:
            return False
        try:
            self.key(client).verify(signature, data, ec.ECDSA(hashes.SHA384()))
        except InvalidSignature:
            return False
        return True


def _describe(key: object) -> str:
    curve = getattr(key, "curve", None)
    return f"{type(key).__name__}{f' on {curve.name}' if curve is not None else ''}"


def _private_key(data: bytes, where: str) -> ec.EllipticCurvePrivateKey:
    """An unencrypted OpenSSH or PEM private key from ``data`` (ValueError naming ``where``)."""
    loaders = (serialization.load_ssh_private_key, serialization.load_pem_private_key)
    for load in loaders:
        try:
            key = load(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != CURVE.name:
            raise ValueError(f"{where} must hold an ECDSA P-384 key (ssh-keygen -t ecdsa -b 384), got "
                             f"{_describe(key)}")
        return key
    raise ValueError(f"{where} is not an unencrypted OpenSSH or PEM private key")


def _public_key(text: str, where: str) -> ec.EllipticCurvePublicKey:
    """An OpenSSH public key line (``ecdsa-sha2-nistp384 AAAA... comment``) (ValueError naming ``where``)."""
    try:
        key = serialization.load_ssh_public_key(" ".join(text.split()[:2]).encode("ascii"))
    except (ValueError, UnicodeEncodeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"{where} is not an OpenSSH public key line: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != CURVE.name:
        raise ValueError(f"{where} must be an ECDSA P-384 key (ecdsa-sha2-nistp384), got {_describe(key)}")
    return key


@functools.lru_cache(maxsize=8)
def _signing_key_file(path: str, mtime_ns: int, size: int) -> Signer:
    return Signer(_private_key(Path(path).read_bytes(), f"signing-key file {path}"), source=path)


def load_signing_key(path: str | Path) -> Signer:
    """The node's signing key in ``path`` (read once per version of the file); ValueError naming the file."""
    return _signing_key_file(*file_version(path, "signing-key file"))


@functools.lru_cache(maxsize=8)
def _peers_file(path: str, mtime_ns: int, size: int) -> PeerKeys:
    where = f"peers file {path}"
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{where} cannot be read: {type(exc).__name__}: {exc}") from None
    base = Path(path).resolve().parent
    keys = {}
    for name, value in doc.items():
        if not name.isdigit() or not isinstance(value, str):
            raise ValueError(f"{where}: each entry must be <client id> = \"<OpenSSH public key or .pub file>\", got "
                             f"{name} = {value!r}")
        text = value
        if not value.startswith(("ecdsa-", "ssh-")):  # the path of a .pub file, relative to the table
            pub = Path(value).expanduser()
            pub = pub if pub.is_absolute() else base / pub
            try:
                text = pub.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{where}: client {name}'s public key file {pub} cannot be read: {exc}") from None
        keys[int(name)] = _public_key(text, f"{where}: client {name}'s key")
    if not keys:
        raise ValueError(f"{where} lists no peer (expected lines <client id> = \"ecdsa-sha2-nistp384 AAAA...\")")
    return PeerKeys(keys, source=path)


def load_peers(path: str | Path) -> PeerKeys:
    """The peers table in the TOML file ``path`` (read once per version of the file); ValueError naming the file.

    Each entry maps a client id (the node's ``partition-id``) to its OpenSSH public key line, or to the
    path of its ``.pub`` file (relative to the table)::

        0 = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQ... fedpriv-node0"
        1 = "keys/node1.pub"
    """
    return _peers_file(*file_version(path, "peers file"))


@functools.lru_cache(maxsize=4096)
def _simulated_key(seed: int, client: int) -> ec.EllipticCurvePrivateKey:
    h = hashlib.sha384(_SIMULATED_TAG + _U64.pack(seed) + _U64.pack(client)).digest()
    order = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973
    return ec.derive_private_key(int.from_bytes(h, "big") % (order - 1) + 1, CURVE)


def simulated_signer(seed: int, client: int) -> Signer:
    """Client ``client``'s node key in a simulation: derived from the run seed (public), signing deterministically."""
    seed, client = check_int(seed, "seed", minimum=0), check_int(client, "client", minimum=0)
    return Signer(_simulated_key(seed, client), deterministic=True, source=f"simulated key of client {client}")


def simulated_peers(seed: int) -> PeerKeys:
    """The peers table of a simulation: every client's :func:`simulated_signer` public key, computed on first use."""
    seed = check_int(seed, "seed", minimum=0)
    return PeerKeys(source=f"simulated keys of run seed {seed}",
                    resolve=lambda client: _simulated_key(seed, check_int(client, "client", minimum=0)).public_key())
