"""Cryptographic primitives of the secure-aggregation protocol (docs/federated_mf.md §6.6), over ``cryptography``.

Thin wrappers only: nothing here is a hand-rolled cipher, key agreement, KDF or PRG.

* Key agreement: X25519, then HKDF-SHA256 to 32 bytes; the HKDF ``info`` binds the purpose, the
  protocol instance and both client ids in canonical (ascending) order (:func:`pair_info`), so the
  two ends of a pair derive the same key and a key of one purpose or instance is useless in another.
* Authenticated encryption of client-to-client messages relayed by the server: ChaCha20-Poly1305
  with a random 12-byte nonce prepended to the ciphertext; any authentication failure raises
  :class:`ShareAuthenticationError`.
* PRG: AES-256 in counter mode keyed by a 32-byte seed, encrypting zeros from a zero counter block
  (the PRG of Bonawitz et al. 2017's implementation; AES-NI makes it about twice as fast as
  ChaCha20 here). A fixed initial counter is safe because every seed expands exactly one mask (the
  pairwise seeds are HKDF outputs bound to purpose and instance; a self-mask seed is fresh per
  instance) and a mask is far shorter than 2^128 blocks. :class:`PrgExpander` expands seed after
  seed into one reusable buffer, so a client's ``k`` masks are summed without a ``(k, d)`` temporary.

Every secret (private keys, self-mask seeds, Shamir coefficients, nonces) comes from the OS CSPRNG
through :func:`random_bytes`, never from fedpriv's keyed streams; tests may replace that one
function with a seeded source to make statistical tests reproducible.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv._validation import check_int
from fedpriv.errors import FedprivError

__all__ = [
    "KEY_BYTES",
    "NONCE_BYTES",
    "TAG_BYTES",
    "PrgExpander",
    "ProtocolViolation",
    "ShareAuthenticationError",
    "agree",
    "agree_many",
    "decrypt",
    "encrypt",
    "generate_keypair",
    "pair_info",
    "prg_sum",
    "prg_words",
    "public_from_private",
    "random_bytes",
    "word_dtype",
]

#: Length of X25519 keys, derived symmetric keys and PRG seeds.
KEY_BYTES = 32
#: ChaCha20-Poly1305 nonce length (prepended to every ciphertext) and tag length.
NONCE_BYTES, TAG_BYTES = 12, 16
#: Prefix and packed (instance, lower id, higher id) of a pairwise key's HKDF info.
_INFO_PREFIX = b"fedpriv/secagg/v1/"
_INFO_IDS = struct.Struct(">QQQ")
#: The HKDF hash (one stateless algorithm object for every derivation).
_SHA256 = hashes.SHA256()
#: The PRG's initial AES-CTR counter block (all zero; see the module docstring).
_PRG_COUNTER = bytes(16)


class ProtocolViolation(FedprivError, ValueError):
    """A message that violates the protocol: wrong instance, replay, unknown sender, bad length or value."""


class ShareAuthenticationError(ProtocolViolation):
    """An AEAD ciphertext failed authentication, or a reconstructed secret does not match its commitment."""


def random_bytes(count: int) -> bytes:
    """``count`` bytes from the OS CSPRNG (the only source of secrets in the protocol)."""
    return os.urandom(count)


def _check_key(key: bytes, name: str) -> bytes:
    """``key`` after checking it is ``KEY_BYTES`` bytes."""
    if type(key) is bytes and len(key) == KEY_BYTES:  # the hot path: no copy, no ABC checks
        return key
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
        got = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
        raise ProtocolViolation(f"{name} must be {KEY_BYTES} bytes, got {got}")
    return bytes(key)


def generate_keypair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair as raw ``(private 32 bytes, public 32 bytes)`` from the OS CSPRNG."""
    private = random_bytes(KEY_BYTES)  # any 32 bytes are a valid X25519 scalar (clamped by the curve)
    return private, public_from_private(private)


def public_from_private(private: bytes) -> bytes:
    """The raw X25519 public key of a raw private key."""
    key = X25519PrivateKey.from_private_bytes(_check_key(private, "private"))
    return key.public_key().public_bytes_raw()


def pair_info(purpose: bytes, instance: int, a: int, b: int) -> bytes:
    """HKDF ``info`` for a pairwise key: purpose, instance and the two ids in ascending order."""
    if not (type(instance) is int and type(a) is int and type(b) is int and min(instance, a, b) >= 0):
        instance, a, b = (check_int(v, name, minimum=0) for v, name in ((instance, "instance"), (a, "a"), (b, "b")))
    lo, hi = (a, b) if a <= b else (b, a)
    return _INFO_PREFIX + purpose + b"|" + _INFO_IDS.pack(int(instance), int(lo), int(hi))


def agree(private: bytes, peer_public: bytes, *, info: bytes) -> bytes:
    """X25519(private, peer_public) expanded with HKDF-SHA256 (no salt, ``info``) to a 32-byte key."""
    return agree_many(private, [peer_public], infos=[info])[0]


def agree_many(private: bytes, peer_publics: Sequence[bytes], *, infos: Sequence[bytes],
               loaded: dict[bytes, X25519PublicKey] | None = None) -> list[bytes]:
    """:func:`agree` with one private key and many peers (the private key is loaded once).

    ``loaded`` (optional) caches parsed peer public keys across calls (a simulation of many clients
    parses each client's key once instead of once per neighbour).
    """
    if len(peer_publics) != len(infos):
        raise ValueError(f"infos must have one entry per peer ({len(peer_publics)}), got {len(infos)}")
    key = X25519PrivateKey.from_private_bytes(_check_key(private, "private"))
    out = []
    for peer_public, info in zip(peer_publics, infos, strict=True):
        peer = None if loaded is None else loaded.get(peer_public)
        if peer is None:
            peer = X25519PublicKey.from_public_bytes(_check_key(peer_public, "peer_public"))
            if loaded is not None:
                loaded[peer_public] = peer
        try:
            shared = key.exchange(peer)
        except ValueError as exc:  # low-order peer point: the shared secret would be all zeros
            raise ProtocolViolation(f"peer_public is not a usable X25519 public key: {exc}") from exc
        out.append(HKDF(algorithm=_SHA256, length=KEY_BYTES, salt=None, info=info).derive(shared))
    return out


def encrypt(key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """ChaCha20-Poly1305 encryption under ``key``: ``nonce (12 bytes) || ciphertext || tag``."""
    nonce = random_bytes(NONCE_BYTES)
    return nonce + ChaCha20Poly1305(_check_key(key, "key")).encrypt(nonce, plaintext, associated_data)


def decrypt(key: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """Inverse of :func:`encrypt`; raises :class:`ShareAuthenticationError` if authentication fails."""
    if not isinstance(ciphertext, (bytes, bytearray)) or len(ciphertext) < NONCE_BYTES + TAG_BYTES:
        size = len(ciphertext) if isinstance(ciphertext, (bytes, bytearray)) else type(ciphertext).__name__
        raise ShareAuthenticationError(
            f"ciphertext must be at least {NONCE_BYTES + TAG_BYTES} bytes (nonce + tag), got {size}"
        )
    try:
        return ChaCha20Poly1305(_check_key(key, "key")).decrypt(
            bytes(ciphertext[:NONCE_BYTES]), bytes(ciphertext[NONCE_BYTES:]), associated_data
        )
    except InvalidTag as exc:
        raise ShareAuthenticationError(
            "ciphertext failed authentication (tampered, wrong key, or sent for another instance/pair)"
        ) from exc


def word_dtype(bits: int) -> type[np.unsignedinteger]:
    """The word of arithmetic mod ``2^bits``: uint32 up to 32 bits (half the PRG and upload bytes), else uint64."""
    bits = check_int(bits, "bits", minimum=1, maximum=64)
    return np.uint32 if bits <= 32 else np.uint64


def _word_mask(bits: int) -> np.unsignedinteger:
    """``2^bits − 1`` in :func:`word_dtype` (reduction mod 2^bits of wrapping words)."""
    return word_dtype(bits)((1 << bits) - 1)


class PrgExpander:
    """Expands 32-byte seeds into ``count`` words (AES-256-CTR keystream) in one reusable buffer.

    ``dtype`` is uint64 or uint32 (:func:`word_dtype`); word ``i`` is keystream bytes
    ``[i·w, (i+1)·w)`` read little-endian. ``expander(seed)`` returns the buffer, overwritten by the
    next call: add it where it is needed before expanding the next seed.
    """

    def __init__(self, count: int, dtype: type[np.unsignedinteger] = np.uint64) -> None:
        self.count = check_int(count, "count", minimum=0)
        if dtype not in (np.uint32, np.uint64):
            raise ValueError(f"dtype must be numpy.uint32 or numpy.uint64, got {dtype!r}")
        self._out = np.empty(self.count, dtype=dtype)
        # memoryviews (``.data``) over the buffers: what ``update_into`` is typed to take, without a copy
        self._view = self._out.view(np.uint8).data
        self._zeros = np.zeros(self._view.nbytes, dtype=np.uint8).data

    def __call__(self, seed: bytes) -> np.ndarray:
        encryptor = Cipher(algorithms.AES(_check_key(seed, "seed")), modes.CTR(_PRG_COUNTER)).encryptor()
        encryptor.update_into(self._zeros, self._view)  # keystream XOR zeros = keystream
        return self._out


def prg_words(seed: bytes, count: int, *, bits: int) -> np.ndarray:
    """``count`` PRG words mod ``2^bits`` (:func:`word_dtype`) expanded from a 32-byte ``seed``."""
    count = check_int(count, "count", minimum=0)
    mask = _word_mask(bits)
    return PrgExpander(count, word_dtype(bits))(seed) & mask


def prg_sum(plus: Sequence[bytes], minus: Sequence[bytes], count: int, *, bits: int) -> np.ndarray:
    """``Σ_plus PRG(s) − Σ_minus PRG(s) mod 2^bits`` (:func:`word_dtype`, length ``count``).

    Equal to adding and subtracting :func:`prg_words` one seed at a time: word arithmetic wraps
    mod 2^32 or 2^64 and 2^bits divides it, so one reduction at the end suffices. Each expansion is
    added into the total while it is still in cache.
    """
    count = check_int(count, "count", minimum=0)
    mask = _word_mask(bits)
    total = np.zeros(count, dtype=word_dtype(bits))
    expand = PrgExpander(count, total.dtype.type)
    for seed in plus:
        np.add(total, expand(seed), out=total)
    for seed in minus:
        np.subtract(total, expand(seed), out=total)
    return total & mask
