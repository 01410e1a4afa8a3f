"""Keyed hash backends and the secret key (docs/vertical_kmeans.md §5.5 R1–R4, §13 item 1, A9, §19 item 12)."""

from __future__ import annotations

import copy
import hashlib
import json
import pickle

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from fedpriv.sketch import HASH_BACKENDS, HashKey, cluster_minima, keyed_uniforms

KEY = HashKey(bytes(range(32)))
OTHER = HashKey(bytes(range(1, 33)))
P_MIN = 1e-6


# ---------------------------------------------------------------------------------------------
# R1: deterministic in (K, i, id) only


@pytest.mark.parametrize("backend", HASH_BACKENDS)
def test_values_depend_on_key_repetition_and_id_only(backend: str) -> None:
    ids = np.array([5, 17, 2**40 + 3, 0, 2**64 - 1], dtype=np.uint64)
    full = keyed_uniforms(KEY, ids, 64, backend=backend)
    assert full.shape == (5, 64) and full.dtype == np.float64
    assert np.all((full > 0) & (full < 1))
    # the same key rebuilt from the same bytes (another party) gives the same bits
    assert np.array_equal(keyed_uniforms(HashKey(bytes(range(32))), ids, 64, backend=backend), full)
    # order of ids and the other ids do not matter
    perm = np.array([3, 0, 4, 1, 2])
    assert np.array_equal(keyed_uniforms(KEY, ids[perm], 64, backend=backend), full[perm])
    assert np.array_equal(keyed_uniforms(KEY, ids[1:2], 64, backend=backend), full[1:2])
    # another key gives unrelated values
    assert not np.any(keyed_uniforms(OTHER, ids, 64, backend=backend) == full)


def test_prf_values_do_not_depend_on_m_or_the_id_dtype() -> None:
    ids = np.arange(40, dtype=np.int32) * 7
    full = keyed_uniforms(KEY, ids, 257)
    assert np.array_equal(keyed_uniforms(KEY, ids.astype(np.uint64), 10), full[:, :10])  # u_i does not see M
    assert np.array_equal(keyed_uniforms(KEY, ids.astype(np.int64), 257), full)


def test_prf_matches_an_independent_reimplementation() -> None:
    """The documented construction, rebuilt id by id: K_aes = BLAKE2b(b"prf-aes256", key=K, 32 bytes,
    person=b"fedpriv-dpfm"); block j of id = AES-256(K_aes, id ‖ j) (little-endian uint64 words); the
    two 64-bit words of the block are u_{2j}, u_{2j+1} = ((w >> 12) + 1/2)·2^-52."""
    secret = bytes(range(32))
    k_aes = hashlib.blake2b(b"prf-aes256", key=secret, digest_size=32, person=b"fedpriv-dpfm").digest()
    ids, M = [0, 1, 123456789, 2**64 - 1], 5
    expected = np.empty((len(ids), M))
    for r, id_ in enumerate(ids):
        for i in range(M):
            encryptor = Cipher(algorithms.AES(k_aes), modes.ECB()).encryptor()
            block = encryptor.update(id_.to_bytes(8, "little") + (i // 2).to_bytes(8, "little"))
            word = int.from_bytes(block[8 * (i % 2) : 8 * (i % 2) + 8], "little")
            expected[r, i] = ((word >> 12) + 0.5) / 2**52
    assert np.array_equal(keyed_uniforms(HashKey(secret), np.array(ids, dtype=np.uint64), M), expected)


def test_prf_golden_value() -> None:
    """Pins the bits: parties on any platform or version must agree exactly."""
    u = keyed_uniforms(KEY, np.array([0, 1]), 3)
    assert u.tobytes().hex() == (
        "38701509c9e5b23fc8b0f239fa76bb3f153e313ae291ef3f"
        "d38e59312fede53fd5ebfd45101fe83f0597deab3834e73f"
    )


# ---------------------------------------------------------------------------------------------
# R2: uniform and independent across ids and repetitions


@pytest.mark.parametrize("backend", HASH_BACKENDS)
def test_values_are_uniform(backend: str) -> None:
    u = keyed_uniforms(KEY, np.arange(400), 256, backend=backend)
    assert stats.kstest(u.ravel(), "uniform").pvalue > P_MIN
    # each repetition separately: the column means are Uniform means (sd 1/√(12·400))
    assert np.max(np.abs(u.mean(axis=0) - 0.5)) <= 5 / np.sqrt(12 * 400)


def test_prf_repetitions_and_ids_are_uncorrelated() -> None:
    u = keyed_uniforms(KEY, np.arange(2000), 64)
    n = u.shape[0]
    corr = np.corrcoef(u.T)[np.triu_indices(64, 1)]  # between repetitions, over ids
    assert np.max(np.abs(corr)) <= 6 / np.sqrt(n)  # max of 2016 |N(0, 1/n)|: P(> 6/√n) ≈ 4e-6
    assert abs(np.mean(corr)) <= 5 / np.sqrt(n * len(corr))
    # consecutive ids (a structured input) are not correlated either
    adj = np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]
    assert abs(adj) <= 5 / np.sqrt(u[:-1].size)


def test_prf_pairs_in_one_cipher_block_are_independent() -> None:
    """u_{2j} and u_{2j+1} come from one AES block: their joint law is the uniform square (chi-square 10×10)."""
    u = keyed_uniforms(KEY, np.arange(5000), 32)
    a, b = (u[:, 0::2].ravel() * 10).astype(int), (u[:, 1::2].ravel() * 10).astype(int)
    counts = np.bincount(a * 10 + b, minlength=100)
    assert stats.chisquare(counts).pvalue > P_MIN


# ---------------------------------------------------------------------------------------------
# cluster_minima: exact per-cluster minima, chunk-independent


@pytest.mark.parametrize("backend", HASH_BACKENDS)
def test_cluster_minima_are_the_minima_of_the_keyed_uniforms(backend: str) -> None:
    rng = np.random.default_rng(0)
    ids = rng.choice(10**9, size=300, replace=False)
    labels = rng.integers(0, 4, size=300)
    labels[labels == 2] = 3  # cluster 2 is empty
    u = keyed_uniforms(KEY, ids, 48, backend=backend)
    expected = np.stack([u[labels == a].min(axis=0) if np.any(labels == a) else np.ones(48) for a in range(4)],
                        axis=1)
    got = cluster_minima(KEY, ids, labels, 4, 48, backend=backend)
    assert got.shape == (48, 4) and got.flags.c_contiguous
    assert np.array_equal(got, expected)
    assert np.all(got[:, 2] == 1.0)
    for chunk in (1, 7, 1000):
        assert np.array_equal(cluster_minima(KEY, ids, labels, 4, 48, backend=backend, chunk=chunk), expected)


def test_duplicate_ids_do_not_change_the_minima() -> None:
    ids = np.array([3, 9, 27])
    once = cluster_minima(KEY, ids, np.zeros(3, dtype=int), 1, 16)
    twice = cluster_minima(KEY, np.r_[ids, ids], np.zeros(6, dtype=int), 1, 16)
    assert np.array_equal(once, twice)


def test_no_ids_gives_empty_clusters() -> None:
    assert np.array_equal(cluster_minima(KEY, np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3, 5),
                          np.ones((5, 3)))
    assert keyed_uniforms(KEY, np.array([], dtype=np.int64), 5).shape == (0, 5)


@pytest.mark.parametrize("N", [300, 3000])
def test_datasketch_backend_agrees_statistically_with_prf(N: int) -> None:
    """E[min of N uniforms] = 1/(N+1) under both backends; A9 does not bias the marginals."""
    k, M = 4, 256
    ids = np.arange(k * N) * 13 + 5
    labels = np.repeat(np.arange(k), N)
    for backend in HASH_BACKENDS:
        m = cluster_minima(KEY, ids, labels, k, M, backend=backend).ravel()
        # N·min ~ Exp(1) approximately: mean 1, sd 1 over k·M (independent for prf) values
        assert abs(np.mean(m) * (N + 1) - 1.0) <= 5 / np.sqrt(k * M)


# ---------------------------------------------------------------------------------------------
# R3 / §19 item 12: the key never leaves in a printable or serializable form


def test_key_repr_and_str_hide_the_secret() -> None:
    secret = bytes(range(100, 132))
    key = HashKey(secret)
    for text in (repr(key), str(key), f"{key}", f"{key!r}"):
        assert secret.hex() not in text and str(secret) not in text and "100" not in text
        assert text == f"HashKey(fingerprint='{key.fingerprint}')"
    assert len(key.fingerprint) == 8


def test_key_cannot_be_pickled_dumped_or_inspected() -> None:
    key = HashKey.generate()
    with pytest.raises(TypeError, match="HashKey cannot be pickled"):
        pickle.dumps(key)
    with pytest.raises(TypeError):
        json.dumps(key)
    with pytest.raises(TypeError):
        vars(key)
    assert not hasattr(key, "__dict__")
    for helper in ("to_dict", "as_dict", "to_json", "state_dict", "serialize", "secret", "to_bytes"):
        assert not hasattr(key, helper)
    assert copy.copy(key) is key and copy.deepcopy({"k": key})["k"] is key
    with pytest.raises(AttributeError, match="immutable"):
        key._secret = b"0" * 32  # type: ignore[misc]


def test_key_equality_and_generation() -> None:
    assert HashKey(bytes(range(32))) == KEY and KEY != OTHER and hash(HashKey(bytes(range(32)))) == hash(KEY)
    assert HashKey.generate() != HashKey.generate()  # os.urandom
    assert HashKey(bytearray(range(16))) == HashKey(bytes(range(16)))


@pytest.mark.parametrize(
    "secret, exc, match",
    [
        (b"short", ValueError, "secret must be 16 to 64 bytes long, got 5 bytes"),
        (bytes(65), ValueError, "secret must be 16 to 64 bytes long, got 65 bytes"),
        ("a" * 32, TypeError, "secret must be bytes, got str"),
    ],
)
def test_key_errors(secret: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        HashKey(secret)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# boundary errors


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"ids": np.array([1, -2, -3])}, ValueError, r"ids must lie in \[0, 2\*\*64 - 1\], got 2 negative"),
        ({"ids": np.array([1.0, 2.0])}, TypeError, "ids must be an integer array, got dtype float64"),
        ({"ids": np.ones((2, 2), dtype=int)}, ValueError, r"ids must be a 1-D array, got an array of shape \(2, 2\)"),
        ({"labels": np.array([0, 3])}, ValueError, r"labels must lie in \[0, 2\] \(k=3\), got 1 value\(s\) outside"),
        ({"labels": np.array([0])}, ValueError, r"labels must be a 1-D array with one label per id \(2\)"),
        ({"labels": np.array([0.0, 1.0])}, TypeError, "labels must be an integer array"),
        ({"k": 0}, ValueError, "k must be >= 1, got 0"),
        ({"M": 0}, ValueError, "M must be >= 1, got 0"),
        ({"backend": "philox"}, ValueError, "backend must be one of 'prf', 'datasketch', got 'philox'"),
        ({"chunk": 0}, ValueError, "chunk must be >= 1, got 0"),
        ({"key": b"0" * 32}, TypeError, "key must be a HashKey, got bytes"),
    ],
)
def test_cluster_minima_errors(kwargs: dict, exc: type, match: str) -> None:
    kwargs = {"key": KEY, "ids": np.array([1, 2]), "labels": np.array([0, 1]), "k": 3, "M": 4, **kwargs}
    with pytest.raises(exc, match=match):
        cluster_minima(**kwargs)
