"""t-of-n Shamir secret sharing over GF(p), p = 2^31 − 1, vectorized (docs/federated_mf.md §6.6).

Field and encoding (chosen for exact, fast numpy arithmetic):

* ``p = 2^31 − 1`` (a Mersenne prime). Field elements are int64 in ``[0, p)``; the product of two
  of them is below 2^62 and fits in int64 exactly, so element-wise steps need no big integers.
* A secret of ``2k`` bytes is cut into ``k`` big-endian 16-bit limbs; each limb is shared
  independently with its own random polynomial of degree ``t − 1`` (the constant term is the limb),
  so a share is an int64 vector of ``k`` field elements. Limbs are below 2^16 < p, which also
  lets reconstruction notice many inconsistent share sets (a limb ≥ 2^16 cannot come from a secret).
* Polynomial evaluation at all points and limbs is one matrix product ``V @ C mod p`` with the
  Vandermonde matrix ``V`` (n × t, cached per point set); Lagrange interpolation at 0 is one
  vector-matrix product with coefficients computed once per responder set (:func:`lagrange_at_zero`).
  Matrix products mod p run in float64 BLAS on 16/15-bit halves of both factors: every partial
  product is below 2^32, so sums of up to 2^21 terms are exact in float64.

Security: any ``t − 1`` shares of a limb are uniform on GF(p)^{t−1} whatever the secret (the
coefficients are uniform, from the OS CSPRNG via :func:`fedpriv.secagg.crypto.random_bytes`); any
``t`` shares determine it. Integrity is not provided here: a corrupted share silently yields a
wrong secret, which the protocol detects with commitments (:mod:`fedpriv.secagg.protocol`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.secagg import crypto

__all__ = [
    "LIMB_BITS",
    "PRIME",
    "SHARE_WORD_BYTES",
    "combine",
    "combine_rows",
    "lagrange_at_zero",
    "lagrange_at_zero_rows",
    "limbs_to_secret",
    "reconstruct",
    "secret_to_limbs",
    "share_from_bytes",
    "shares_from_bytes",
    "share_to_bytes",
    "split",
]

#: The field modulus p = 2^31 − 1.
PRIME = (1 << 31) - 1
#: Bits per secret limb (each limb is one field element below 2^16).
LIMB_BITS = 16
#: Bytes per field element in a serialized share (big-endian uint32).
SHARE_WORD_BYTES = 4
#: Largest number of terms a float64 dot product of 16-bit halves sums exactly (k · 2^32 < 2^53).
_MAX_TERMS = 1 << 21


def secret_to_limbs(secret: bytes) -> np.ndarray:
    """The big-endian 16-bit limbs of ``secret`` (non-empty, even length) as int64."""
    if not isinstance(secret, (bytes, bytearray)) or len(secret) == 0 or len(secret) % 2:
        got = f"{len(secret)} bytes" if isinstance(secret, (bytes, bytearray)) else type(secret).__name__
        raise ValueError(f"secret must be a non-empty bytes object of even length, got {got}")
    return np.frombuffer(bytes(secret), dtype=">u2").astype(np.int64)


def limbs_to_secret(limbs: np.ndarray) -> bytes:
    """Inverse of :func:`secret_to_limbs`; raises if a limb is not below 2^16 (inconsistent shares)."""
    arr = np.asarray(limbs, dtype=np.int64).reshape(-1)
    bad = (arr < 0) | (arr >= 1 << LIMB_BITS)
    if bad.any():
        raise ValueError(
            f"limbs must lie in [0, 2^{LIMB_BITS}), got {int(bad.sum())} limb(s) outside "
            f"(the shares are inconsistent: corrupted, or from different secrets)"
        )
    return arr.astype(">u2").tobytes()


def _check_points(xs: Any, name: str = "xs") -> np.ndarray:
    """Evaluation points as int64 after checking: 1-D, non-empty, distinct, in [1, p)."""
    arr = np.asarray(xs)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be a non-empty 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 1 or arr.max() >= PRIME:
        raise ValueError(f"{name} must lie in [1, {PRIME}) (non-zero field elements), got "
                         f"min {int(arr.min())} max {int(arr.max())}")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must be distinct, got {arr.size - np.unique(arr).size} repeated point(s)")
    return arr


def _halves(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Low 16 and high 15 bits of field elements, as float64 (exact)."""
    return (a & 0xFFFF).astype(np.float64), (a >> 16).astype(np.float64)


def _fold(ll: np.ndarray, mid: np.ndarray, hh: np.ndarray) -> np.ndarray:
    """``ll + 2^16·mid + 2^32·hh mod p`` for exact float64 partial sums below 2^53."""
    p = PRIME
    out = ll.astype(np.int64) % p
    out += ((mid.astype(np.int64) % p) << 16) % p
    out += ((hh.astype(np.int64) % p) * 2) % p  # 2^32 = 2·2^31 ≡ 2 (mod 2^31 − 1)
    return out % p


def _stacked_halves(a: np.ndarray) -> np.ndarray:
    """``[low 16 bits; high 15 bits]`` of an (m × k) int64 matrix stacked into a (2m × k) float64 one."""
    lo, hi = _halves(a)
    return np.vstack([lo, hi])


def _matmul_mod(a_stacked: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A @ B mod p`` from A's stacked halves (2m × k, :func:`_stacked_halves`) and int64 ``B`` (k × q)."""
    m, k = a_stacked.shape[0] // 2, a_stacked.shape[1]
    if k > _MAX_TERMS:
        raise ValueError(f"number of shares summed must be <= {_MAX_TERMS}, got {k}")
    b_lo, b_hi = _halves(b)
    q = b.shape[1]
    prod = a_stacked @ np.hstack([b_lo, b_hi])  # one BLAS call for the four half products
    ll, lh, hl, hh = prod[:m, :q], prod[:m, q:], prod[m:, :q], prod[m:, q:]
    return _fold(ll, lh + hl, hh)


@lru_cache(maxsize=8)
def _vandermonde(points: bytes, threshold: int) -> np.ndarray:
    """Stacked halves of ``V[i, k] = x_i^k mod p`` (n × t) for the int64 points packed in ``points``."""
    xs = np.frombuffer(points, dtype=np.int64)
    v = np.empty((xs.size, threshold), dtype=np.int64)
    v[:, 0] = 1
    for k in range(1, threshold):  # loop over the degree only; each step is vectorized over points
        v[:, k] = v[:, k - 1] * xs % PRIME
    out = _stacked_halves(v)
    out.setflags(write=False)
    return out


def _random_field(shape: tuple[int, ...]) -> np.ndarray:
    """Uniform elements of GF(p) (int64) from the OS CSPRNG, by rejection of the value p."""
    count = int(np.prod(shape))
    out = np.frombuffer(crypto.random_bytes(4 * count), dtype=np.uint32).astype(np.int64) & PRIME
    bad = np.flatnonzero(out == PRIME)
    while bad.size:  # 31 random bits, value p rejected: exactly uniform on [0, p)
        out[bad] = np.frombuffer(crypto.random_bytes(4 * bad.size), dtype=np.uint32).astype(np.int64) & PRIME
        bad = bad[out[bad] == PRIME]
    return out.reshape(shape)


def _evaluate(limbs: np.ndarray, coefficients: np.ndarray, xs: np.ndarray, threshold: int) -> np.ndarray:
    """Shares ``f_l(x)`` (len(xs) × limbs) of the polynomials with constant terms ``limbs``."""
    poly = np.vstack([limbs[None, :], coefficients])  # (t, limbs): row k = coefficient of x^k
    return _matmul_mod(_vandermonde(xs.tobytes(), threshold), poly)


def split(secret: bytes, *, threshold: int, xs: np.ndarray) -> np.ndarray:
    """Shamir shares of ``secret`` at points ``xs``: int64 array (len(xs), limbs), any ``threshold`` recover it."""
    points = _check_points(xs)
    threshold = check_int(threshold, "threshold", minimum=1, maximum=min(points.size, _MAX_TERMS))
    limbs = secret_to_limbs(secret)
    return _evaluate(limbs, _random_field((threshold - 1, limbs.size)), points, threshold)


def _pow_mod(base: np.ndarray, exponent: int) -> np.ndarray:
    """Element-wise ``base^exponent mod p`` by square-and-multiply (vectorized over ``base``)."""
    result = np.ones_like(base)
    b = base % PRIME
    while exponent:
        if exponent & 1:
            result = result * b % PRIME
        b = b * b % PRIME
        exponent >>= 1
    return result


def lagrange_at_zero(xs: np.ndarray) -> np.ndarray:
    """Lagrange coefficients ``λ_i = Π_{j≠i} x_j / (x_j − x_i) mod p`` for interpolation at 0."""
    return lagrange_at_zero_rows(_check_points(xs)[None, :])[0]


def lagrange_at_zero_rows(xs: np.ndarray) -> np.ndarray:
    """:func:`lagrange_at_zero` for each row of an (m, t) array of point sets (distinct within a row)."""
    points = np.asarray(xs)
    if points.ndim != 2 or points.shape[1] == 0 or not np.issubdtype(points.dtype, np.integer):
        raise ValueError(f"xs must be a 2-D integer array with at least one column, got shape {points.shape}")
    points = points.astype(np.int64)
    if points.size and (points.min() < 1 or points.max() >= PRIME):
        raise ValueError(f"xs must lie in [1, {PRIME}) (non-zero field elements)")
    srt = np.sort(points, axis=1)
    if (srt[:, 1:] == srt[:, :-1]).any():
        raise ValueError("xs must be distinct within each row")
    num = np.ones_like(points)
    den = np.ones_like(points)
    for j in range(points.shape[1]):  # loop over one row's points; each step is vectorized over rows and i
        xj = points[:, j:j + 1]
        diff = (xj - points) % PRIME
        diff[:, j] = 1  # the j = i factor is left out of both products
        factor = np.broadcast_to(xj, points.shape).copy()
        factor[:, j] = 1
        num = num * factor % PRIME
        den = den * diff % PRIME
    return num * _pow_mod(den, PRIME - 2) % PRIME  # Fermat inverse of the denominators


def combine(coefficients: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """``Σ_k coefficients[k] · shares[k] mod p`` over axis 0 of ``shares`` (k, ...): many secrets at once."""
    lam = np.asarray(coefficients, dtype=np.int64)
    s = np.asarray(shares, dtype=np.int64)
    if lam.ndim != 1 or s.ndim < 1 or s.shape[0] != lam.size:
        raise ValueError(f"shares must have shape (k, ...) with k = len(coefficients) = {lam.size}, got {s.shape}")
    _check_field(s)
    flat = s.reshape(lam.size, -1)
    return _matmul_mod(_stacked_halves(lam[None, :]), flat).reshape(s.shape[1:])


def combine_rows(coefficients: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """Secret ``m`` = ``Σ_k coefficients[m, k] · shares[m, k, :] mod p``: (m, t) and (m, t, limbs) → (m, limbs)."""
    lam = np.asarray(coefficients, dtype=np.int64)
    s = np.asarray(shares, dtype=np.int64)
    if lam.ndim != 2 or s.ndim != 3 or s.shape[:2] != lam.shape:
        raise ValueError(f"shares must have shape (m, t, limbs) with (m, t) = coefficients' shape {lam.shape}, "
                         f"got {s.shape}")
    _check_field(s)
    # each product is below 2^62; t reduced products sum below t·2^31 < 2^63 for t < 2^32
    return (lam[:, :, None] * s % PRIME).sum(axis=1) % PRIME


def _check_field(s: np.ndarray) -> None:
    """Raise unless every entry of ``s`` is a field element."""
    if s.size and (s.min() < 0 or s.max() >= PRIME):
        raise ValueError(f"shares must lie in [0, {PRIME}), got values outside")


def reconstruct(xs: np.ndarray, shares: np.ndarray, *, threshold: int) -> bytes:
    """The secret from the first ``threshold`` of the shares (k, limbs) taken at points ``xs``."""
    points = _check_points(xs)
    threshold = check_int(threshold, "threshold", minimum=1)
    s = np.asarray(shares)
    if s.ndim != 2 or s.shape[0] != points.size:
        raise ValueError(f"shares must have shape (len(xs), limbs) = ({points.size}, limbs), got {s.shape}")
    if points.size < threshold:
        raise ValueError(f"reconstruct needs at least threshold = {threshold} shares, got {points.size}")
    return limbs_to_secret(combine(lagrange_at_zero(points[:threshold]), s[:threshold]))


def share_to_bytes(share: np.ndarray) -> bytes:
    """A share (limbs,) as fixed-length bytes: one big-endian uint32 per field element."""
    arr = np.asarray(share)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer) or (arr.size and (arr.min() < 0 or arr.max() >= PRIME)):
        raise ValueError(f"share must be a 1-D integer array of field elements in [0, {PRIME}), got {arr!r}")
    return arr.astype(">u4").tobytes()


def shares_from_bytes(data: bytes, *, count: int, limbs: int) -> np.ndarray:
    """``count`` concatenated shares of ``limbs`` field elements each (:func:`share_to_bytes`): (count, limbs)."""
    count = check_int(count, "count", minimum=0)
    limbs = check_int(limbs, "limbs", minimum=1)
    size = count * limbs * SHARE_WORD_BYTES
    if not isinstance(data, (bytes, bytearray)) or len(data) != size:
        got = f"{len(data)} bytes" if isinstance(data, (bytes, bytearray)) else type(data).__name__
        what = f"{count} shares of {limbs}" if count != 1 else f"{limbs}"
        raise ValueError(f"share must be {size} bytes ({what} field elements), got {got}")
    arr = np.frombuffer(bytes(data), dtype=">u4").astype(np.int64).reshape(count, limbs)
    if arr.size and arr.max() >= PRIME:
        raise ValueError(f"share must hold field elements below p = {PRIME}, got {int(arr.max())}")
    return arr


def share_from_bytes(data: bytes, *, limbs: int) -> np.ndarray:
    """Inverse of :func:`share_to_bytes` for a share of ``limbs`` field elements; checks length and range."""
    return shares_from_bytes(data, count=1, limbs=limbs)[0]
