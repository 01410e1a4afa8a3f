"""Keyed hash backends of the DP Flajolet–Martin sketch (docs/vertical_kmeans.md §5.5, §13 item 1, A9).

Guarantees
----------
* ``keyed_uniforms(key, ids, M)[j, i]`` is ``u_i(ids[j])``: a deterministic function of the secret
  key K, the repetition index i and the id alone (R1). It does not depend on M, on the other ids,
  on their order, on the chunk size or on the platform's byte order, so every party holding K
  computes the same value for the same user.
* Values lie on the grid ``(k + 1/2)·2^-52``, ``k = 0 .. 2^52 − 1``: strictly inside (0, 1), never
  rounded to 0 or 1.
* ``cluster_minima`` returns the per-(repetition, cluster) minimum of ``u_i`` over the cluster's ids,
  exactly the minimum of the corresponding ``keyed_uniforms`` entries (1.0 for an empty cluster),
  computed in bounded memory (chunks of ids), without a Python loop over ids for ``"prf"``.
* The key K (:class:`HashKey`) is never printed, pickled or copied into a plain container: it
  stays with the parties (R3).

Backends
--------
``"prf"`` (default, [proposal], a deviation from a BLAKE2b-keyed Philox per id).
    AES-256 used as a block PRF: ``u_{2j}(id) ‖ u_{2j+1}(id) = AES_{K_aes}(id ‖ j)`` where the 16-byte
    plaintext is the id and the counter j as little-endian uint64 words, and ``K_aes`` is derived from
    K with keyed BLAKE2b (domain-separated per backend). Each 128-bit cipher block gives two 64-bit
    words, whose top 52 bits make the uniform. AES is a vetted pseudo-random permutation, and all
    plaintexts are distinct, so the outputs are indistinguishable from independent uniform words
    (R2; PRP/PRF switching costs nothing below 2^64 blocks). A BLAKE2b→Philox construction
    needs one Python-level generator per id; AES in ECB mode over an array of counter blocks is one
    OpenSSL call per chunk of ids (AES-NI), about 3× faster here (R4) and fully vectorized.
``"datasketch"`` (§13 item 1; cross-checks and speed comparisons only).
    ``datasketch.MinHash(num_perm=M, scheme="affine64")`` with a keyed 64-bit ``hashfunc``
    (BLAKE2b keyed with a subkey of K) and a permutation seed derived from K. Its M values are affine
    maps ``a_i·fmix(h(id)) + b_i mod 2^64`` of ONE 64-bit hash per id, so they are **not independent
    across repetitions** (Ambiguity A9): the ε'-per-repetition composition of Lemma 6 does not
    strictly apply, and runs using it must be marked. Words map to uniforms as for ``"prf"``
    (top 52 bits + 1/2): the spec's ``(h + 0.5)/2^64`` rounds to exactly 1.0 in float64 for the
    largest hash values.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fedpriv._validation import check_choice, check_int

__all__ = [
    "HASH_BACKENDS",
    "HashKey",
    "cluster_minima",
    "keyed_uniforms",
]

#: Hash backends (§5.5): ``"prf"`` (default, AES block PRF) and ``"datasketch"`` (MinHash affine64, A9).
HASH_BACKENDS = ("prf", "datasketch")

#: Bits of a 64-bit word kept for a uniform: (k + 1/2)·2^-52 is exact in float64 for k < 2^52.
_UNIFORM_BITS = 52
_UNIFORM_SHIFT = np.uint64(64 - _UNIFORM_BITS)
#: AES blocks per chunk when ``chunk`` is not given (4 MiB of plaintext: fits in cache, fastest here).
_BLOCKS_PER_CHUNK = 2**18
#: ids per ``MinHash.update_batch`` call (it builds an ids × M matrix, §13 item 1).
_DATASKETCH_CHUNK = 1024
_PERSON = b"fedpriv-dpfm"


class HashKey:
    """The secret hash key K shared by the data parties and never by the server (§5.5 R3).

    One key stands for all M hash keys ζ_1..ζ_M of the thesis: repetition i uses the PRF at
    counter i. The object is deliberately inert: ``repr``/``str`` show only a short fingerprint,
    it has no ``__dict__``, no serialization helper, refuses to be pickled (so it cannot ride
    along in a message or a Ray/multiprocessing payload by accident) and is immutable.

    Parameters
    ----------
    secret : bytes
        16 to 64 bytes of key material, identical at every party (e.g. read from a file provisioned
        to the clients only). Use :meth:`generate` for a fresh one from the OS CSPRNG.

    Examples
    --------
    >>> key = HashKey(bytes(range(32)))
    >>> repr(key).startswith("HashKey(fingerprint=")
    True
    """

    __slots__ = ("_secret",)
    _secret: bytes

    def __init__(self, secret: bytes) -> None:
        if isinstance(secret, bytearray):
            secret = bytes(secret)
        if not isinstance(secret, bytes):
            raise TypeError(f"secret must be bytes, got {type(secret).__name__}")
        if not 16 <= len(secret) <= 64:
            raise ValueError(f"secret must be 16 to 64 bytes long, got {len(secret)} bytes")
        object.__setattr__(self, "_secret", secret)

    @classmethod
    def generate(cls) -> HashKey:
        """A fresh 32-byte key from the OS CSPRNG (``os.urandom``), never from a keyed stream."""
        return cls(os.urandom(32))

    @property
    def fingerprint(self) -> str:
        """8 hex digits identifying the key (keyed BLAKE2b of a constant): safe to log and compare."""
        return self._derive("fingerprint", 4).hex()

    def _derive(self, purpose: str, size: int) -> bytes:
        """A ``size``-byte subkey for ``purpose`` (keyed BLAKE2b, domain-separated)."""
        return hashlib.blake2b(purpose.encode(), key=self._secret, digest_size=size, person=_PERSON).digest()

    def __repr__(self) -> str:
        return f"HashKey(fingerprint={self.fingerprint!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashKey):
            return NotImplemented
        return hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(self._derive("hash", 8))

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("HashKey is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("HashKey is immutable")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise TypeError("HashKey cannot be pickled or serialized: provision the secret to every party "
                        "out of band (e.g. a client-side file) and build HashKey(secret) there "
                        "(docs/vertical_kmeans.md §5.5 R3)")

    def __getstate__(self) -> NoReturn:
        self.__reduce_ex__(None)

    def __copy__(self) -> HashKey:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> HashKey:
        return self


# --------------------------------------------------------------------------------------------------
# input checks


def _check_key(key: Any) -> HashKey:
    if not isinstance(key, HashKey):
        raise TypeError(f"key must be a HashKey, got {type(key).__name__}")
    return key


def _check_ids(ids: Any) -> np.ndarray:
    """``ids`` as a 1-D uint64 array after checking they are non-negative integers below 2^64."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"ids must be a 1-D array, got an array of shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be an integer array, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        n_bad = int(np.count_nonzero(arr < 0))
        raise ValueError(f"ids must lie in [0, 2**64 - 1], got {n_bad} negative value(s)")
    return arr.astype(np.uint64, copy=False)


def _check_labels(labels: Any, n: int, k: int) -> np.ndarray:
    """``labels`` as a 1-D int64 array of length ``n`` with values in [0, k − 1]."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"labels must be a 1-D array with one label per id ({n}), got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"labels must be an integer array, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    outside = (arr < 0) | (arr >= k)
    if np.any(outside):
        raise ValueError(f"labels must lie in [0, {k - 1}] (k={k}), got {int(np.count_nonzero(outside))} "
                         f"value(s) outside")
    return arr


def _check_chunk(chunk: Any, M: int, backend: str) -> int:
    if chunk is None:
        return _DATASKETCH_CHUNK if backend == "datasketch" else max(1, _BLOCKS_PER_CHUNK // -(-M // 2))
    return check_int(chunk, "chunk", minimum=1)


# --------------------------------------------------------------------------------------------------
# word sources: (ids, M) -> 64-bit words, then one shared map to (0, 1)


def _words_to_uniforms(words: np.ndarray) -> np.ndarray:
    """Top 52 bits of each 64-bit word, as ``(k + 1/2)·2^-52`` (exact, strictly inside (0, 1))."""
    return ((words >> _UNIFORM_SHIFT).astype(np.float64) + 0.5) * 2.0**-_UNIFORM_BITS


def _prf_word_chunks(key: HashKey, ids: np.ndarray, M: int, chunk: int) -> Iterator[tuple[slice, np.ndarray]]:
    """Yield ``(rows, words)``: words[r, i] = word i of AES_K(id_r ‖ i // 2), for consecutive id chunks."""
    n_blocks = -(-M // 2)  # two 64-bit words per 128-bit block
    encryptor = Cipher(algorithms.AES(key._derive("prf-aes256", 32)), modes.ECB()).encryptor()
    rows = min(chunk, max(len(ids), 1))
    plain = np.empty((rows, n_blocks, 2), dtype="<u8")  # block = id ‖ counter, little-endian (R1)
    plain[:, :, 1] = np.arange(n_blocks, dtype="<u8")
    cipher = np.empty(rows * n_blocks * 16 + 15, dtype=np.uint8)  # update_into wants block_size − 1 spare
    for start in range(0, len(ids), rows):
        c = min(rows, len(ids) - start)
        plain[:c, :, 0] = ids[start : start + c, None]
        nbytes = c * n_blocks * 16
        encryptor.update_into(plain[:c].data.cast("B"), cipher[: nbytes + 15].data)  # .data: the arrays' memoryviews
        words = cipher[:nbytes].view("<u8").reshape(c, 2 * n_blocks)[:, :M]
        yield slice(start, start + c), words


def _datasketch_hashfunc(key: HashKey) -> Callable[[bytes], int]:
    """Keyed 64-bit hash for ``MinHash(hashfunc=...)``: BLAKE2b with a subkey of K (§13 item 1)."""
    subkey = key._derive("datasketch-hash", 32)

    def hashfunc(b: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(b, key=subkey, digest_size=8).digest(), "little")

    return hashfunc


def _minhash_class() -> Any:
    """``datasketch.MinHash``, or an error naming the optional extra that provides it."""
    try:
        from datasketch import MinHash  # optional extra: imported only when the backend is asked for
    except ImportError:
        raise ModuleNotFoundError(
            "hash-backend = 'datasketch' needs the optional package datasketch: pip install 'fedpriv[datasketch]' "
            "(or use the default hash-backend = 'prf')") from None
    return MinHash


def _datasketch_cluster_words(key: HashKey, ids: np.ndarray, labels: np.ndarray, k: int, M: int,
                              chunk: int) -> np.ndarray:
    """(k, M) MinHash values, one ``MinHash`` per cluster, updated in chunks of ``chunk`` ids."""
    MinHash = _minhash_class()
    hashfunc = _datasketch_hashfunc(key)
    seed = int.from_bytes(key._derive("datasketch-seed", 4), "little")  # identical at all parties
    permutations = MinHash(num_perm=M, seed=seed, scheme="affine64", hashfunc=hashfunc).permutations
    raw = ids.astype("<u8").tobytes()
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(k + 1))
    out = np.empty((k, M), dtype=np.uint64)
    for a in range(k):  # loop over clusters; datasketch itself hashes id by id
        sketch = MinHash(num_perm=M, scheme="affine64", hashfunc=hashfunc, permutations=permutations)
        members = order[bounds[a] : bounds[a + 1]]
        for s in range(0, len(members), chunk):
            sketch.update_batch([raw[8 * j : 8 * j + 8] for j in members[s : s + chunk].tolist()])
        out[a] = sketch.hashvalues
    return out


# --------------------------------------------------------------------------------------------------
# public API


def keyed_uniforms(key: HashKey, ids: np.ndarray, M: int, *, backend: str = "prf") -> np.ndarray:
    """``(len(ids), M)`` float64 in (0, 1): ``u_i(id)``, deterministic in (K, i, id) (§5.5 R1–R4).

    Diagnostics and tests: the full matrix takes ``8·len(ids)·M`` bytes (``cluster_minima`` never
    forms it), and ``"datasketch"`` builds one ``MinHash`` per id.
    """
    key = _check_key(key)
    ids = _check_ids(ids)
    M = check_int(M, "M", minimum=1)
    backend = check_choice(backend, "backend", HASH_BACKENDS)
    if backend == "datasketch":
        words = _datasketch_cluster_words(key, ids, np.arange(len(ids)), len(ids), M, _DATASKETCH_CHUNK)
        return _words_to_uniforms(words)
    out = np.empty((len(ids), M), dtype=np.float64)
    for rows, words in _prf_word_chunks(key, ids, M, _check_chunk(None, M, backend)):
        out[rows] = _words_to_uniforms(words)
    return out


def cluster_minima(key: HashKey, ids: np.ndarray, labels: np.ndarray, k: int, M: int, *,
                   backend: str = "prf", chunk: int | None = None) -> np.ndarray:
    """``(M, k)`` minimum of ``u_i`` over each cluster's ids (1.0 for an empty cluster), §5.4.

    ``chunk`` is the number of ids hashed at once (default: about 4 MiB of cipher blocks for
    ``"prf"``, 1024 ids per ``update_batch`` for ``"datasketch"``); the result does not depend on it.
    Duplicate ids are harmless (set semantics: the minimum is idempotent).
    """
    key = _check_key(key)
    ids = _check_ids(ids)
    k = check_int(k, "k", minimum=1)
    M = check_int(M, "M", minimum=1)
    labels = _check_labels(labels, len(ids), k)
    backend = check_choice(backend, "backend", HASH_BACKENDS)
    chunk = _check_chunk(chunk, M, backend)
    if backend == "datasketch":
        minima = _datasketch_cluster_words(key, ids, labels, k, M, chunk)
    else:
        order = np.argsort(labels, kind="stable")  # a chunk then holds a few contiguous label runs
        ids_sorted, labels_sorted = ids[order], labels[order]
        minima = np.full((k, M), np.iinfo(np.uint64).max, dtype=np.uint64)
        for rows, words in _prf_word_chunks(key, ids_sorted, M, chunk):
            lab = labels_sorted[rows]
            starts = np.flatnonzero(np.r_[True, lab[1:] != lab[:-1]])
            run_labels = lab[starts]  # distinct within a chunk, because labels are sorted
            minima[run_labels] = np.minimum(minima[run_labels], np.minimum.reduceat(words, starts, axis=0))
    u = _words_to_uniforms(minima)
    u[np.bincount(labels, minlength=k) == 0] = 1.0  # empty cluster: no element, u_min = 1 (§5.4)
    return np.ascontiguousarray(u.T)
