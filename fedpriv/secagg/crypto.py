"""Cryptographic primitives of the secure-aggregation protocol (federated_mf.md §6.6), over ``cryptography``.

Thin wrappers only: nothing here is a hand-rolled cipher, key agreement, KDF or PRG.

* Key agreement: X25519, then HKDF-SHA256 to 32 bytes; the HKDF ``info`` binds the purpose, the
  protocol instance and both client ids in canonical (ascending) order (:func:`pair_info`), so the
  two ends of a pair derive the same key and a key of one purpose or instance is useless in another.
* Authenticated encryption of client-to-client messages relayed by the server: ChaCha20-Poly1305
  with a random 12-byte nonce prepended to the ciphertext; any authentication failure raises
  :class:`ShareAuthenticationError`.
* PRG: the ChaCha20 stream cipher keyed by a 32-byte seed, encrypting zeros under a fixed nonce.
  A fixed nonce is safe because every seed expands exactly one mask (the pairwise seeds are HKDF
  outputs bound to purpose and instance; a self-mask seed is fresh per instance).

Every secret (private keys, self-mask seeds, Shamir coefficients, nonces) comes from the OS CSPRNG
through :func:`random_bytes`, never from fedpriv's keyed streams; tests may replace that one
function with a seeded source to make statistical tests reproducible.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedpriv._validation import check_int

__all__ = [
    "KEY_BYTES",
    "NONCE_BYTES",
    "TAG_BYTES",
    "ProtocolError",
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
]

#: Length of X25519 keys, derived symmetric keys and PRG seeds.
KEY_BYTES = 32
#: ChaCha20-Poly1305 nonce length (prepended to every ciphertext) and tag length.
NONCE_BYTES, TAG_BYTES = 12, 16
#: ChaCha20 (cryptography) takes a 16-byte nonce: 4-byte block counter + 12-byte nonce; all zero here.
_PRG_NONCE = bytes(16)
#: PRG expansions are done in blocks of this many words (bounds the temporary buffer of prg_sum).
_PRG_BLOCK_WORDS = 1 << 19


class ProtocolError(ValueError):
    """A message that violates the protocol: wrong instance, replay, unknown sender, bad length or value."""


class ShareAuthenticationError(ProtocolError):
    """An AEAD ciphertext failed authentication, or a reconstructed secret does not match its commitment."""


def random_bytes(count: int) -> bytes:
    """``count`` bytes from the OS CSPRNG (the only source of secrets in the protocol)."""
    return os.urandom(count)


def _check_key(key: bytes, name: str) -> bytes:
    """``key`` after checking it is ``KEY_BYTES`` bytes."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
        got = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
        raise ProtocolError(f"{name} must be {KEY_BYTES} bytes, got {got}")
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
    lo, hi = sorted((check_int(a, "a", minimum=0), check_int(b, "b", minimum=0)))
    return b"fedpriv/secagg/v1/" + purpose + b"|" + b"".join(
        v.to_bytes(8, "big") for v in (check_int(instance, "instance", minimum=0), lo, hi)
    )


def agree(private: bytes, peer_public: bytes, *, info: bytes) -> bytes:
    """X25519(private, peer_public) expanded with HKDF-SHA256 (no salt, ``info``) to a 32-byte key."""
    return agree_many(private, [peer_public], infos=[info])[0]


def agree_many(private: bytes, peer_publics: Sequence[bytes], *, infos: Sequence[bytes]) -> list[bytes]:
    """:func:`agree` with one private key and many peers (the private key is loaded once)."""
    if len(peer_publics) != len(infos):
        raise ValueError(f"infos must have one entry per peer ({len(peer_publics)}), got {len(infos)}")
    key = X25519PrivateKey.from_private_bytes(_check_key(private, "private"))
    out = []
    for peer_public, info in zip(peer_publics, infos, strict=True):
        peer = X25519PublicKey.from_public_bytes(_check_key(peer_public, "peer_public"))
        try:
            shared = key.exchange(peer)
        except ValueError as exc:  # low-order peer point: the shared secret would be all zeros
            raise ProtocolError(f"peer_public is not a usable X25519 public key: {exc}") from exc
        out.append(HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(shared))
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


def _word_mask(bits: int) -> np.uint64:
    """``2^bits − 1`` as uint64 (reduction mod 2^bits of uint64 words)."""
    bits = check_int(bits, "bits", minimum=1, maximum=64)
    return np.uint64((1 << bits) - 1)


def _chacha_fill(seed: bytes, out: np.ndarray) -> None:
    """Overwrite the uint64 array ``out`` (C-contiguous) with the ChaCha20 keystream of ``seed``."""
    encryptor = Cipher(algorithms.ChaCha20(_check_key(seed, "seed"), _PRG_NONCE), mode=None).encryptor()
    view = out.view(np.uint8).reshape(-1)
    view[:] = 0
    encryptor.update_into(view, view)  # keystream XOR zeros = keystream, written in place


def prg_words(seed: bytes, count: int, *, bits: int) -> np.ndarray:
    """``count`` PRG words mod ``2^bits`` (uint64) expanded from a 32-byte ``seed`` with ChaCha20."""
    count = check_int(count, "count", minimum=0)
    mask = _word_mask(bits)
    out = np.empty(count, dtype=np.uint64)
    _chacha_fill(seed, out)
    if mask != np.uint64(2**64 - 1):
        out &= mask
    return out


def prg_sum(plus: Sequence[bytes], minus: Sequence[bytes], count: int, *, bits: int) -> np.ndarray:
    """``Σ_plus PRG(s) − Σ_minus PRG(s) mod 2^bits`` (uint64, length ``count``), expanded in blocks.

    Equal to adding and subtracting :func:`prg_words` one seed at a time, but summing a block of
    expansions with one reduction (uint64 arithmetic wraps mod 2^64, and 2^bits divides 2^64).
    """
    count = check_int(count, "count", minimum=0)
    mask = _word_mask(bits)
    total = np.zeros(count, dtype=np.uint64)
    rows = max(1, _PRG_BLOCK_WORDS // max(count, 1))
    buf = np.empty((min(rows, max(len(plus), len(minus), 1)), count), dtype=np.uint64)
    for seeds, sign in ((plus, 1), (minus, -1)):
        for start in range(0, len(seeds), buf.shape[0]):
            block = seeds[start : start + buf.shape[0]]
            for row, seed in enumerate(block):
                _chacha_fill(seed, buf[row])
            part = buf[: len(block)].sum(axis=0, dtype=np.uint64)
            if sign > 0:
                total += part
            else:
                total -= part
    return total & mask
