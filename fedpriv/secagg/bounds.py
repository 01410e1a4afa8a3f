"""Degree ``k`` and threshold ``t`` of SecAgg+'s random Harary graph (Bell et al., CCS 2020), from exact tail bounds.

SecAgg+ replaces the complete masking graph of Bonawitz et al. 2017 by a random ``k``-regular
Harary graph: ring positions ``p`` and ``p ± 1, …, p ± k/2`` (mod ``n``) are neighbours, and a
uniform random permutation, drawn from public randomness, places the clients on the ring. Each
client shares its two secrets ``t``-of-``(k + 1)`` among itself and its ``k`` neighbours. With at
most ``A = ⌊γn⌋`` corrupted clients (colluding with an honest-but-curious server) and at most
``D = ⌊ωn⌋`` drop-outs, three bad events can occur (Bell et al. 2020, §3–4, semi-honest case):

1. **Disconnection** (privacy). The graph of honest survivors is disconnected, so the server
   could learn the partial sum of one component. Removing nodes disconnects the ring-shaped
   Harary graph only if two disjoint runs of ``k/2`` consecutive positions are all corrupted or
   dropped. There are ``n(n − k − 1)/2`` pairs of such runs and each is entirely bad with
   probability ``(B)_k / (n)_k`` (falling factorials, ``B = A + D`` bad clients placed uniformly),
   so ``P ≤ n(n − k − 1)/2 · (B)_k/(n)_k``, and 0 when ``k > B``.
2. **Corrupted neighbourhood** (privacy). Some honest client has ``t`` or more corrupted
   neighbours, who together with the server could rebuild its secrets. An honest client's
   neighbours are a uniform ``k``-subset of the other ``n − 1`` clients, among whom at most ``A``
   are corrupted: the count is hypergeometric ``H(n − 1, A, k)``; union bound over ``n`` clients.
3. **Short neighbourhood** (correctness). A client that dropped after sharing has fewer than
   ``t`` surviving neighbours, so its mask key cannot be rebuilt and the instance halts. Its
   neighbours are a uniform ``k``-subset of the other ``n − 1`` clients, among whom at least
   ``S = ⌈(1 − ω)n⌉`` survive: the count is ``H(n − 1, S, k)``; union bound over ``n`` clients.
   (A surviving client holds its own share too, so its case is no worse.)

:func:`harary_parameters` returns the smallest even ``k`` with ``P(1) < 2^−(σ+1)`` for which some
``t`` gives ``P(2) < 2^−(σ+1)`` and ``P(3) < 2^−η``, and the smallest such ``t`` (at least 2):
statistical security ``σ`` (the two privacy events share the budget ``2^−σ``) and correctness
``η``. Tails are computed exactly from the hypergeometric log-pmf, not from Chernoff bounds. The
search and the split of σ follow the authors' reference parameter finder (Google's
federated-compute ``graph_parameter_finder.cc``); with its population convention (``n`` instead of
``n − 1`` in events 2 and 3, :func:`search_degree` ``population="n"``) this module reproduces its
published table exactly, which the tests check.

Assumptions the bounds need: the corrupted and dropped clients are fixed independently of the
graph's permutation (the server is semi-honest: it draws the permutation from public randomness
and does not choose who drops after seeing it); at most ``⌊ωn⌋`` clients drop over the whole
instance (the protocol halts otherwise, :mod:`fedpriv.secagg.base`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_int, check_positive, check_probability

__all__ = [
    "CORRECTNESS_BITS",
    "SECURITY_BITS",
    "HararyBounds",
    "harary_bounds",
    "harary_parameters",
    "search_degree",
]

#: Default statistical security σ: each instance leaks beyond the sum with probability < 2^−40.
SECURITY_BITS = 40.0
#: Default correctness η: an instance halts for a thin neighbourhood with probability < 2^−20.
CORRECTNESS_BITS = 20.0
#: Guard against float rounding in ``⌊γn⌋`` and ``⌈(1−ω)n⌉`` (0.3·10 must count 3, not 2).
_SMALL = 1e-9
_LOG2 = math.log(2.0)


@dataclass(frozen=True)
class HararyBounds:
    """The three failure probabilities of a random Harary graph ``(n, k, t)`` (log2, ``-inf`` when impossible).

    Attributes
    ----------
    num_clients, degree, share_threshold : int
        ``n``, ``k`` and ``t``.
    corrupt_fraction, dropout_fraction : float
        ``γ`` and ``ω``.
    log2_disconnected : float
        Upper bound on log2 P(the honest survivors' graph is disconnected).
    log2_corrupt_neighbourhood : float
        Upper bound on log2 P(some honest client has ``≥ t`` corrupted neighbours).
    log2_short_neighbourhood : float
        Upper bound on log2 P(some dropped client has ``< t`` surviving neighbours).
    """

    num_clients: int
    degree: int
    share_threshold: int
    corrupt_fraction: float
    dropout_fraction: float
    log2_disconnected: float
    log2_corrupt_neighbourhood: float
    log2_short_neighbourhood: float

    @property
    def security_bits(self) -> float:
        """σ achieved: ``−log2`` of the privacy failure bound (events 1 and 2 together)."""
        return -float(np.logaddexp2(self.log2_disconnected, self.log2_corrupt_neighbourhood))

    @property
    def correctness_bits(self) -> float:
        """η achieved: ``−log2`` of the correctness failure bound (event 3)."""
        return -self.log2_short_neighbourhood


def _counts(n: int, corrupt_fraction: float, dropout_fraction: float) -> tuple[int, int, int]:
    """``A = ⌊γn⌋`` corrupted, ``D = ⌊ωn⌋`` dropped and ``S = n − D`` surviving clients."""
    a = math.floor(corrupt_fraction * n + _SMALL)
    d = math.floor(dropout_fraction * n + _SMALL)
    return a, d, n - d


def _log2_disconnected(n: int, k: int, bad: int) -> float:
    """Event 1: ``log2 [n(n − k − 1)/2 · (B)_k/(n)_k]`` (``-inf`` when fewer than ``k`` clients are bad)."""
    from scipy.special import gammaln  # imported here: key tables read this module's constants, without SciPy

    if k > bad or n - k - 1 <= 0:
        return -math.inf
    ln = (math.log(n) + math.log(n - k - 1) - _LOG2 + gammaln(bad + 1) + gammaln(n - k + 1)
          - gammaln(n + 1) - gammaln(bad - k + 1))
    return float(ln / _LOG2)


def _log2_tails(population: int, marked: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For ``X ~ H(population, marked, k)``: log2 P(X ≥ x) and log2 P(X ≤ x) for x = 0..k."""
    from scipy.stats import hypergeom

    x = np.arange(k + 1)
    lp = hypergeom.logpmf(x, population, min(marked, population), k) / _LOG2
    ge = np.logaddexp2.accumulate(lp[::-1])[::-1]
    le = np.logaddexp2.accumulate(lp)
    return ge, le


def _thresholds(n: int, k: int, a: int, s: int, population: int) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate ``t`` in 0..k+1: log2 bounds of events 2 (``≥ t`` corrupted) and 3 (``< t`` survivors)."""
    log2_n = math.log2(n)
    ge_a, _ = _log2_tails(population, a, k)
    _, le_s = _log2_tails(population, s, k)
    corrupt = np.append(ge_a, -np.inf) + log2_n  # index t: P(X_A ≥ t), t = k + 1 impossible
    short = np.concatenate([[-np.inf], le_s]) + log2_n  # index t: P(X_S ≤ t − 1)
    return np.minimum(corrupt, 0.0), np.minimum(short, 0.0)


def harary_bounds(num_clients: int, degree: int, share_threshold: int, *, corrupt_fraction: float,
                  dropout_fraction: float) -> HararyBounds:
    """The failure bounds of a given ``(n, k, t)`` under ``γ``, ``ω`` (population ``n − 1``, see the module docstring)."""
    n = check_int(num_clients, "num_clients", minimum=3)
    k = check_int(degree, "degree", minimum=2, maximum=n - 1)
    if k % 2:
        raise ValueError(f"degree must be even (a Harary graph joins k/2 ring neighbours on each side), got {k}")
    t = check_int(share_threshold, "share_threshold", minimum=1, maximum=k + 1)
    gamma = check_probability(corrupt_fraction, "corrupt_fraction", low_open=False, high_open=True)
    omega = check_probability(dropout_fraction, "dropout_fraction", low_open=False, high_open=True)
    a, d, s = _counts(n, gamma, omega)
    corrupt, short = _thresholds(n, k, a, s, n - 1)
    return HararyBounds(n, k, t, gamma, omega, min(_log2_disconnected(n, k, a + d), 0.0),
                        float(corrupt[t]), float(short[t]))


@functools.lru_cache(maxsize=256)
def search_degree(num_clients: int, *, corrupt_fraction: float, dropout_fraction: float,
                  security_bits: float = SECURITY_BITS, correctness_bits: float = CORRECTNESS_BITS,
                  population: str = "n-1") -> tuple[int, int] | None:
    """The smallest even ``k < n − 1`` and the smallest ``t ≥ 2`` meeting σ and η, or ``None`` if none does.

    ``population`` is ``"n-1"`` (the neighbours of a client are drawn from the other clients: the
    bound this module states) or ``"n"`` (the reference implementation's convention, for
    cross-checking its published table only).
    """
    n = check_int(num_clients, "num_clients", minimum=1)
    if population not in ("n-1", "n"):
        raise ValueError(f"population must be 'n-1' or 'n', got {population!r}")
    a, d, s = _counts(n, corrupt_fraction, dropout_fraction)
    per_event = -(float(security_bits) + 1.0)  # σ split evenly over events 1 and 2
    eta = -float(correctness_bits)
    pool = n - 1 if population == "n-1" else n
    for k in range(2, n - 1, 2):
        if _log2_disconnected(n, k, a + d) >= per_event:
            continue
        corrupt, short = _thresholds(n, k, a, s, pool)
        ok = np.flatnonzero((corrupt < per_event) & (short < eta))
        ok = ok[ok >= 2]
        if ok.size:
            return k, int(ok[0])
    return None


def harary_parameters(num_clients: int, *, corrupt_fraction: float, dropout_fraction: float,
                      security_bits: float = SECURITY_BITS,
                      correctness_bits: float = CORRECTNESS_BITS) -> HararyBounds | None:
    """The smallest ``(k, t)`` of :func:`search_degree` with its bounds, or ``None`` if no ``k < n − 1`` qualifies."""
    n = check_int(num_clients, "num_clients", minimum=1)
    gamma = check_probability(corrupt_fraction, "corrupt_fraction", low_open=False, high_open=True)
    omega = check_probability(dropout_fraction, "dropout_fraction", low_open=False, high_open=True)
    sigma = check_positive(security_bits, "security_bits")
    eta = check_positive(correctness_bits, "correctness_bits")
    found = search_degree(n, corrupt_fraction=gamma, dropout_fraction=omega, security_bits=sigma,
                          correctness_bits=eta)
    if found is None:
        return None
    return harary_bounds(n, found[0], found[1], corrupt_fraction=gamma, dropout_fraction=omega)
