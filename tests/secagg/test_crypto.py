"""Crypto wrappers of the secure-aggregation protocol: key agreement, AEAD, AES-256-CTR PRG."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fedpriv.secagg import crypto
from fedpriv.secagg.crypto import (
    ProtocolViolation,
    ShareAuthenticationError,
    agree,
    agree_many,
    decrypt,
    encrypt,
    generate_keypair,
    pair_info,
    prg_sum,
    prg_words,
    public_from_private,
)


def test_keypair_is_raw_x25519() -> None:
    private, public = generate_keypair()
    assert len(private) == len(public) == 32
    assert public_from_private(private) == public
    assert generate_keypair()[0] != private  # fresh CSPRNG draw


def test_agreement_is_symmetric_and_bound_to_its_info() -> None:
    (a, a_pub), (b, b_pub) = generate_keypair(), generate_keypair()
    info = pair_info(b"mask", 3, 7, 2)
    assert info == pair_info(b"mask", 3, 2, 7)  # canonical id order
    key = agree(a, b_pub, info=info)
    assert len(key) == 32 and key == agree(b, a_pub, info=info)
    for other in (pair_info(b"mask", 4, 2, 7), pair_info(b"enc", 3, 2, 7), pair_info(b"mask", 3, 2, 8)):
        assert agree(a, b_pub, info=other) != key
    c_pub = generate_keypair()[1]
    assert agree_many(a, [b_pub, c_pub], infos=[info, info]) == [key, agree(a, c_pub, info=info)]


def test_aead_round_trip_and_authentication() -> None:
    key, ad = bytes(range(32)), b"instance-1|3->5"
    ct = encrypt(key, b"share pair", ad)
    assert decrypt(key, ct, ad) == b"share pair"
    assert encrypt(key, b"share pair", ad) != ct  # random nonce
    tampered = ct[:-1] + bytes([ct[-1] ^ 1])
    for k, c, a in ((key, tampered, ad), (key, ct, b"instance-2|3->5"), (bytes(32), ct, ad), (key, ct[:20], ad)):
        with pytest.raises(ShareAuthenticationError):
            decrypt(k, c, a)
    assert issubclass(ShareAuthenticationError, ProtocolViolation) and issubclass(ProtocolViolation, ValueError)


def test_prg_is_deterministic_reduced_and_prefix_consistent() -> None:
    seed = bytes(range(32))
    long = prg_words(seed, 1000, bits=64)
    assert long.dtype == np.uint64 and long.shape == (1000,)
    np.testing.assert_array_equal(prg_words(seed, 10, bits=64), long[:10])
    short = prg_words(seed, 1000, bits=32)  # up to 32 bits the words are uint32: the same keystream, cut finer
    assert short.dtype == np.uint32
    np.testing.assert_array_equal(short[:20:2] | (short[1:20:2].astype(np.uint64) << np.uint64(32)), long[:10])
    np.testing.assert_array_equal(prg_words(seed, 1000, bits=20), short & np.uint32(2**20 - 1))
    assert not np.array_equal(prg_words(bytes(32), 1000, bits=64), long)


def test_prg_bits_are_balanced() -> None:
    # each of the 64 bit positions is a fair coin: mean within 5 standard errors of 1/2
    words = prg_words(b"\x07" * 32, 20_000, bits=64)
    bits = (words[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    se = 0.5 / np.sqrt(words.size)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 5 * se)


def test_prg_is_the_aes256_ctr_keystream() -> None:
    # independent construction: block i of the keystream is AES-256_k(i) with i as a 128-bit big-endian counter
    seed = bytes(range(32))
    ecb = Cipher(algorithms.AES(seed), modes.ECB()).encryptor()
    counters = b"".join(i.to_bytes(16, "big") for i in range(5))
    expected = np.frombuffer(ecb.update(counters) + ecb.finalize(), dtype=np.uint64)
    np.testing.assert_array_equal(prg_words(seed, 10, bits=64), expected)


def test_expander_reuses_its_buffer() -> None:
    expand = crypto.PrgExpander(8)
    a = expand(b"\x01" * 32).copy()
    b = expand(b"\x02" * 32)
    assert b is expand(b"\x02" * 32) and not np.array_equal(a, b)
    np.testing.assert_array_equal(a, prg_words(b"\x01" * 32, 8, bits=64))


def test_prg_sum_equals_one_at_a_time() -> None:
    seeds = [bytes([i]) * 32 for i in range(7)]
    plus, minus = seeds[:4], seeds[4:]
    bits = 13
    expected = np.zeros(30, dtype=np.uint64)
    for s in plus:
        expected += prg_words(s, 30, bits=bits)
    for s in minus:
        expected -= prg_words(s, 30, bits=bits)
    np.testing.assert_array_equal(prg_sum(plus, minus, 30, bits=bits), expected & np.uint64(2**bits - 1))
    np.testing.assert_array_equal(prg_sum([], [], 5, bits=bits), np.zeros(5, np.uint64))


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: agree(b"short", bytes(32), info=b""), ProtocolViolation, "private must be 32 bytes, got 5 bytes"),
        (lambda: agree(bytes(32), b"x" * 31, info=b""), ProtocolViolation, "peer_public must be 32 bytes"),
        (lambda: agree(b"\x01" * 32, bytes(32), info=b""), ProtocolViolation, "not a usable X25519 public key"),
        (lambda: agree_many(bytes(32), [bytes(32)], infos=[]), ValueError, "infos must have one entry per peer"),
        (lambda: encrypt(b"k", b"", b""), ProtocolViolation, "key must be 32 bytes"),
        (lambda: prg_words(bytes(32), 4, bits=0), ValueError, "bits must be >= 1, got 0"),
        (lambda: prg_words(bytes(32), 4, bits=65), ValueError, "bits must be <= 64, got 65"),
        (lambda: prg_words(bytes(32), -1, bits=8), ValueError, "count must be >= 0, got -1"),
        (lambda: prg_words(bytes(16), 4, bits=8), ProtocolViolation, "seed must be 32 bytes"),
        (lambda: pair_info(b"p", -1, 0, 1), ValueError, "instance must be >= 0, got -1"),
    ],
)
def test_errors(call, exc, match) -> None:
    with pytest.raises(exc, match=match):
        call()
