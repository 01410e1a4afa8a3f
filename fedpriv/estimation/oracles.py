"""Categorical frequency oracles under ε-LDP: GRR, OLH and OUE (docs/square_wave_ems.md §7.1–§7.4, docs/vertical_kmeans.md §9.2).

Guarantees
----------
* :func:`grr_perturb` and :func:`olh_perturb` are ε-LDP per user for values in ``{0..k−1}``
  (any two inputs give output probabilities within a factor e^ε). Values outside the domain raise.
* :func:`grr_support` and :func:`olh_support` return, per user, the unbiased support vector
  ``e ∈ R^k`` with ``E[e(a)] = 1[v = a]`` (over the oracle's randomness; for OLH also over the
  user's random hash key). Summing them over users gives unbiased counts; averaging gives
  unbiased frequencies ``x̃_v = (C(v)/n − q)/(p − q)`` (§7.1, §7.2).
* :func:`oue_perturb` (Optimized Unary Encoding, §7.3) is ε-LDP per user: **an addition**, not in the
  thesis; it is kept out of the paper-faithful grid and out of :data:`ORACLES` / :func:`choose_oracle`.
* :func:`grr_frequencies`, :func:`olh_frequencies` and :func:`oue_frequencies` return the unbiased
  frequency vector directly from counts (chunked over users; no ``n × k`` matrix is kept).
* :func:`choose_oracle` applies the variance rule of §7.4: GRR iff ``k − 2 < 3·e^ε``.

Randomness contract. Every perturbation draws only ``rng.random((n, c))`` (c columns per user, the
leading axis is the user), so ``rng`` may be a numpy ``Generator`` or a :class:`fedpriv.rng.RowStreams`
(one keyed stream per user): row i of a batched report then equals user i's report made alone with
its own stream. Integers come from uniforms: ``⌊u·m⌋`` is uniform on ``{0..m−1}`` up to m/2^53 (the
53-bit resolution of a double); a 64-bit OLH key is two exact 32-bit halves ``⌊u·2^32⌋``.

OLH hash family [external; the sources leave it open]. Each user draws a uniform 64-bit key κ
(from the caller's ``rng``: the key is part of the public report, not a secret) and hashes a
value v as ``H_κ(v) = fmix64(κ ⊕ fmix64(v + 1)) mod g``, where ``fmix64`` is the 64-bit
finalizer of MurmurHash3 (two xor-shift-multiply rounds, full avalanche). For a uniform κ the
hashes of two different values behave as independent uniforms on ``{0..g−1}`` (the ``mod g``
bias is below g/2^64), which is what the unbiasedness of the OLH support needs. One key per user
is what docs/vertical_kmeans.md §18 sends as ``hash_keys: uint64[n]``.

Everything is vectorized over users; the ``*_support`` functions build the ``n × k`` support matrix,
the ``*_frequencies`` functions only counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_epsilon, check_int
from fedpriv.rng import Draws, check_draws

__all__ = [
    "FREQUENCY_ORACLES",
    "ORACLES",
    "OlhReports",
    "check_labels",
    "choose_oracle",
    "grr_frequencies",
    "grr_params",
    "grr_perturb",
    "grr_sample",
    "grr_support",
    "olh_frequencies",
    "olh_g",
    "olh_hash",
    "olh_keys",
    "olh_perturb",
    "olh_support",
    "oracle_variance",
    "oue_frequencies",
    "oue_params",
    "oue_perturb",
    "oue_support",
    "uniform_index",
]

#: The thesis's oracles (§7.4 chooses between them); the LDP-AGG baseline of vertical k-means uses these.
ORACLES: tuple[str, ...] = ("grr", "olh")
#: Every oracle with a variance formula in :func:`oracle_variance`: the thesis's two plus OUE (§7.3, an addition).
FREQUENCY_ORACLES: tuple[str, ...] = ("grr", "olh", "oue")

_M1 = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3 fmix64 constants
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_G_MAX = 2**62  # OLH hash range must stay far inside uint64
_CHUNK_CELLS = 4_000_000  # users per chunk · k kept at or below this in the count loops


def uniform_index(u: np.ndarray, m: Any) -> np.ndarray:
    """``⌊u·m⌋`` as int64 in ``{0..m−1}`` for uniforms ``u ∈ [0, 1)`` (m broadcasts; the guard stops rounding up to m)."""
    m = np.asarray(m, dtype=np.int64)
    return np.minimum(np.floor(u * m).astype(np.int64), np.maximum(m - 1, 0))


def _chunk_rows(k: int) -> int:
    """Rows per chunk so that a chunk of width k holds at most ``_CHUNK_CELLS`` cells."""
    return max(1, _CHUNK_CELLS // max(k, 1))


def check_labels(values: Any, k: int, name: str = "values") -> np.ndarray:
    """Return ``values`` as an int64 1-D array after checking every entry lies in ``{0..k−1}``."""
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):  # booleans, text and floats are not indices
        raise TypeError(f"{name} must hold integer category indices, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of category indices, got shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    outside = (arr < 0) | (arr >= k)
    if np.any(outside):
        raise ValueError(f"{name} must lie in the domain {{0..{k - 1}}}, got {int(outside.sum())} value(s) outside "
                         f"(e.g. {int(arr[outside][0])})")
    return arr


def _domain(k: Any, epsilon: Any) -> tuple[int, float]:
    """Validated (k ≥ 1, scalar ε > 0)."""
    k = check_int(k, "k", minimum=1)
    epsilon = check_epsilon(epsilon)
    if not isinstance(epsilon, float):
        raise TypeError(f"epsilon must be a scalar for a frequency oracle, got an array of shape {epsilon.shape}")
    return k, epsilon


def grr_params(k: int, epsilon: float) -> tuple[float, float]:
    """GRR's (p, q) on a domain of size k: p = e^ε/(e^ε + k − 1), q = 1/(e^ε + k − 1) (§7.1)."""
    k, epsilon = _domain(k, epsilon)
    # divide by e^ε: p = 1/(1 + (k−1)e^{−ε}), q = e^{−ε}/(1 + (k−1)e^{−ε}); no overflow for large ε
    inv = math.exp(-epsilon)
    den = 1.0 + (k - 1) * inv
    return 1.0 / den, inv / den


def grr_sample(true: np.ndarray, k: Any, p: Any, rng: Draws) -> np.ndarray:
    """Keep each user's ``true`` (n,) with probability p, else a uniform *other* value of {0..k−1} (§7.1 sampler).

    ``k`` and ``p`` may be per-user arrays (the hierarchical methods mix domains). Draws ``rng.random((n, 2))``:
    column 0 decides keep, column 1 picks ``u ∈ {0..k−2}`` and outputs ``u if u < v else u + 1``.
    """
    u = rng.random((true.shape[0], 2))
    other = uniform_index(u[:, 1], np.maximum(np.asarray(k) - 1, 1))
    other = other + (other >= true)  # u if u < v else u + 1
    return np.where(u[:, 0] < p, true, other)


def grr_perturb(values: Any, k: int, epsilon: float, rng: Draws) -> np.ndarray:
    """Each user's GRR report in ``{0..k−1}`` (ε-LDP, §7.1)."""
    k, epsilon = _domain(k, epsilon)
    v = check_labels(values, k)
    rng = check_draws(rng)
    p, _ = grr_params(k, epsilon)
    return grr_sample(v, k, p, rng)


def grr_support(reports: Any, k: int, epsilon: float) -> np.ndarray:
    """Per-user unbiased support vectors ``(1[y = a] − q)/(p − q)``, shape (n, k) (§7.1, §9.2)."""
    k, epsilon = _domain(k, epsilon)
    y = check_labels(reports, k, "reports")
    p, q = grr_params(k, epsilon)
    hit = y[:, None] == np.arange(k)[None, :]
    return (hit - q) / (p - q)


def grr_frequencies(reports: Any, k: int, epsilon: float) -> np.ndarray:
    """Unbiased frequencies ``x̃_v = (C(v)/n − q)/(p − q)`` from GRR reports, shape (k,) (§7.1)."""
    k, epsilon = _domain(k, epsilon)
    y = _nonempty(check_labels(reports, k, "reports"))
    p, q = grr_params(k, epsilon)
    return (np.bincount(y, minlength=k) / y.size - q) / (p - q)  # §7.1


def _nonempty(y: np.ndarray) -> np.ndarray:
    """``y`` after checking it holds at least one report (a frequency needs n ≥ 1)."""
    if y.shape[0] == 0:
        raise ValueError("reports must hold at least one user's report, got 0")
    return y


def olh_g(epsilon: float) -> int:
    """OLH hash range ``g = max(2, round(e^ε) + 1)`` (§7.2 [external], docs/vertical_kmeans.md §14)."""
    epsilon = _domain(1, epsilon)[1]
    if epsilon > math.log(_G_MAX - 1):
        raise ValueError(f"epsilon must be <= {math.log(_G_MAX - 1):.2f} for OLH (g = e^ε + 1 must fit 62 bits), "
                         f"got {epsilon!r}")
    return max(2, math.floor(math.exp(epsilon) + 0.5) + 1)


def _fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> _S33)
    x = x * _M1
    x = x ^ (x >> _S33)
    x = x * _M2
    return x ^ (x >> _S33)


def olh_hash(keys: Any, values: Any, g: int) -> np.ndarray:
    """``H_κ(v) = fmix64(κ ⊕ fmix64(v + 1)) mod g`` elementwise (broadcasting), as int64 in {0..g−1}."""
    g = check_int(g, "g", minimum=2, maximum=_G_MAX)
    keys = np.asarray(keys)
    if keys.size and keys.dtype != np.uint64:
        raise TypeError(f"keys must be a uint64 array, got dtype {keys.dtype}")
    vals = np.asarray(values)
    if vals.size and not np.issubdtype(vals.dtype, np.integer):
        raise TypeError(f"values must hold integers, got dtype {vals.dtype}")
    if np.any(vals < 0):
        raise ValueError(f"values must be >= 0, got {int((vals < 0).sum())} negative value(s)")
    with np.errstate(over="ignore"):
        h = _fmix64(keys ^ _fmix64(vals.astype(np.uint64) + np.uint64(1)))
    return (h % np.uint64(g)).astype(np.int64)


@dataclass(frozen=True)
class OlhReports:
    """One OLH report per user (§7.2): the public hash key and the GRR_g-perturbed hash value.

    Attributes
    ----------
    hashes : ndarray of uint64, shape (n,)
        Each user's random hash key κ_u; the user's hash is ``olh_hash(κ_u, ·, g)``.
    values : ndarray of int64, shape (n,)
        ``GRR_g(H_u(v_u))`` in ``{0..g−1}``.
    g : int
        Hash range.
    """

    hashes: np.ndarray
    values: np.ndarray
    g: int

    def __post_init__(self) -> None:
        g = check_int(self.g, "g", minimum=2, maximum=_G_MAX)
        hashes = np.asarray(self.hashes)
        if hashes.ndim != 1 or (hashes.size and hashes.dtype != np.uint64):
            raise TypeError(f"hashes must be a 1-D uint64 array, got shape {hashes.shape} dtype {hashes.dtype}")
        values = check_labels(self.values, g, "values")
        if values.shape != hashes.shape:
            raise ValueError(f"values must have the shape of hashes {hashes.shape}, got {values.shape}")
        object.__setattr__(self, "hashes", hashes.astype(np.uint64, copy=False))
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "g", g)


def olh_keys(rng: Draws, n: int) -> np.ndarray:
    """n uniform 64-bit hash keys from ``rng.random((n, 2))``: two exact 32-bit halves ``⌊u·2^32⌋``."""
    halves = np.floor(rng.random((n, 2)) * 2.0**32).astype(np.uint64)  # u = m/2^53: u·2^32 is exact
    return (halves[:, 0] << np.uint64(32)) | halves[:, 1]


def olh_perturb(values: Any, k: int, epsilon: float, rng: Draws) -> OlhReports:
    """Each user's OLH report: a random hash key and ``GRR_g`` of its hashed value (ε-LDP, §7.2)."""
    k, epsilon = _domain(k, epsilon)
    v = check_labels(values, k)
    rng = check_draws(rng)
    g = olh_g(epsilon)
    keys = olh_keys(rng, v.shape[0])
    p, _ = grr_params(g, epsilon)
    return OlhReports(hashes=keys, values=grr_sample(olh_hash(keys, v, g), g, p, rng), g=g)


def olh_support(reports: OlhReports, k: int, epsilon: float) -> np.ndarray:
    """Per-user unbiased support vectors ``(1[H_u(a) = y_u] − 1/g)/(p − 1/g)``, shape (n, k) (§7.2, §9.2)."""
    if not isinstance(reports, OlhReports):
        raise TypeError(f"reports must be an OlhReports, got {type(reports).__name__}")
    k, epsilon = _domain(k, epsilon)
    p, _ = grr_params(reports.g, epsilon)
    q = 1.0 / reports.g
    hit = olh_hash(reports.hashes[:, None], np.arange(k)[None, :], reports.g) == reports.values[:, None]
    return (hit - q) / (p - q)


def olh_frequencies(reports: OlhReports, k: int, epsilon: float) -> np.ndarray:
    """Unbiased frequencies ``x̃_v = (C(v)/n − 1/g)/(p − 1/g)``, ``C(v) = |{u : H_u(v) = y_u}|``, shape (k,) (§7.2)."""
    if not isinstance(reports, OlhReports):
        raise TypeError(f"reports must be an OlhReports, got {type(reports).__name__}")
    k, epsilon = _domain(k, epsilon)
    n = _nonempty(reports.values).shape[0]
    p, _ = grr_params(reports.g, epsilon)
    q = 1.0 / reports.g
    counts = np.zeros(k)
    values = np.arange(k)[None, :]
    step = _chunk_rows(k)
    for start in range(0, n, step):  # chunks of users: n·k hashes without an n × k matrix (§7.2 "Cost")
        rows = slice(start, start + step)
        counts += (olh_hash(reports.hashes[rows, None], values, reports.g) == reports.values[rows, None]).sum(axis=0)
    return (counts / n - q) / (p - q)  # §7.2


def oue_params(epsilon: float) -> tuple[float, float]:
    """OUE's (p, q) = (1/2, 1/(e^ε + 1)) (§7.3, an addition: Wang et al. 2017)."""
    epsilon = _domain(1, epsilon)[1]
    return 0.5, 1.0 / (1.0 + math.exp(min(epsilon, 700.0)))


def oue_perturb(values: Any, k: int, epsilon: float, rng: Draws) -> np.ndarray:
    """Each user's OUE bit vector, shape (n, k) uint8: its 1-bit kept w.p. 1/2, each 0-bit set w.p. q (ε-LDP, §7.3).

    Draws ``rng.random((n, k))`` (in row chunks when ``rng`` is a Generator: same bits as one draw).
    """
    k, epsilon = _domain(k, epsilon)
    v = check_labels(values, k)
    rng = check_draws(rng)
    p, q = oue_params(epsilon)
    n = v.shape[0]
    bits = np.empty((n, k), dtype=np.uint8)
    step = _chunk_rows(k) if isinstance(rng, np.random.Generator) else max(n, 1)  # RowStreams: one (n, k) draw
    for start in range(0, n, step):  # a Generator fills rows in C order, so chunking leaves the bits unchanged
        rows = slice(start, start + step)
        u = rng.random((v[rows].shape[0], k))
        one = v[rows, None] == np.arange(k)[None, :]
        bits[rows] = u < np.where(one, p, q)  # §7.3
    return bits


def _check_bits(bits: Any, k: int | None = None) -> np.ndarray:
    """OUE reports as a non-empty (n, k) uint8 0/1 array."""
    arr = np.asarray(bits)
    if arr.ndim != 2 or (k is not None and arr.shape[1] != k):
        raise ValueError(f"bits must be a 2-D array of shape (n, {'k' if k is None else k}), got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise TypeError(f"bits must hold 0/1 integers, got dtype {arr.dtype}")
    if np.any((arr != 0) & (arr != 1)):
        raise ValueError(f"bits must be 0 or 1, got {int(np.sum((arr != 0) & (arr != 1)))} other value(s)")
    return arr


def oue_support(bits: Any, epsilon: float) -> np.ndarray:
    """Per-user unbiased support vectors ``(b − q)/(p − q)``, shape (n, k) (§7.3)."""
    arr = _check_bits(bits)
    p, q = oue_params(epsilon)
    return (arr - q) / (p - q)


def oue_frequencies(bits: Any, epsilon: float) -> np.ndarray:
    """Unbiased frequencies ``x̃_v = (C(v)/n − q)/(p − q)`` with ``C(v) = Σ_u b_u[v]``, shape (k,) (§7.3)."""
    arr = _nonempty(_check_bits(bits))
    p, q = oue_params(epsilon)
    return (arr.sum(axis=0, dtype=np.int64) / arr.shape[0] - q) / (p - q)  # §7.3


def choose_oracle(k: int, epsilon: float) -> str:
    """``"grr"`` iff ``k − 2 < 3·e^ε`` (lower variance, §7.4), else ``"olh"``."""
    k, epsilon = _domain(k, epsilon)
    return "grr" if k - 2 < 3.0 * math.exp(min(epsilon, 700.0)) else "olh"


def oracle_variance(name: str, k: int, epsilon: float, n: int) -> float:
    """Per-entry variance of the frequency estimate from n users (§7.1–§7.3; the f-free forms).

    GRR: ``(k − 2 + e^ε)/((e^ε − 1)²·n)``; OLH and OUE: ``4e^ε/((e^ε − 1)²·n)``. Multiply by n² for counts.
    """
    name = check_choice(name, "name", FREQUENCY_ORACLES)
    k, epsilon = _domain(k, epsilon)
    n = check_int(n, "n", minimum=1)
    e = math.exp(epsilon)
    if name == "grr":
        return (k - 2 + e) / ((e - 1.0) ** 2 * n)  # §7.1
    return 4.0 * e / ((e - 1.0) ** 2 * n)  # §7.2 (OLH), §7.3 (OUE: exact at f = 0)
