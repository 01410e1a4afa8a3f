"""DP Flajolet–Martin registers: parameters, the geometric map T, phantoms (docs/vertical_kmeans.md §5.1–5.4, §5.6).

Guarantees
----------
* :class:`DpfmParams` holds the per-repetition constants of the thesis's Algorithm 3 (after
  Smith–Song–Thakurta): ``ε' = ε/(4√(M ln(1/δ)))``, ``n_p = ⌈1/(e^{ε'} − 1)⌉`` (Ambiguity A3: the
  thesis's Algorithm 3 misprints ``⌈1/e^{ε'−1}⌉``) and ``α_min = ⌈log_{1+γ}(1/(1 − e^{−ε'}))⌉``; it
  refuses budgets outside Lemma 6's precondition ``ε ≤ 2 ln(1/δ)``. With M registers built from
  independent ideal hashes under a key unknown to the adversary, the registers are (ε, δ)-DP
  (Lemma 6); per repetition ε'-DP.
* :func:`dpfm_registers` turns per-(repetition, cluster) minima of the keyed uniforms into integer
  registers ``A = max(T(min(u_min, V)), α_min)`` with FRESH phantom minima V from the party's own
  generator (§5.4). This is exactly ``max(α_real, α_p, α_min)`` of §5.2 in distribution; only the
  integer registers are returned, never the continuous minima.
* ``epsilon=None`` is a non-private mode for tests and diagnostics: ``n_p = 0``, ``α_min = 0``, no
  phantoms, and an empty set has register 0 (§5.2, α_real of an empty set).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv._validation import (
    as_real_array,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_rng,
)

__all__ = [
    "DpfmParams",
    "dpfm_registers",
    "geometric_transform",
    "phantom_minima",
    "register_cap",
]

#: Bits behind every uniform (keyed hash values and phantom draws lie on the grid (k + 1/2)·2^-52).
_UNIFORM_BITS = 52


def register_cap(gamma: float) -> int:
    """``⌈54 ln2 / ln(1+γ)⌉``: the register bound behind the dtype rule of §5.4."""
    return math.ceil(54 * math.log(2.0) / math.log1p(gamma))


@dataclass(frozen=True)
class DpfmParams:
    """Per-repetition budget and DP constants of the sketch (§5.2, §6).

    Parameters
    ----------
    M : int (default: 4096)
        Repetitions (independent hash keys ζ_1..ζ_M), the rows of a partition sketch.
    gamma : float (default: 1.0)
        Base parameter γ > 0 of the geometric hash: registers are Geometric(γ/(1+γ)) on {1, 2, ...}.
    epsilon : float or None (default: None)
        ε_2 of MemEnc for all M repetitions together. ``None`` (with ``delta=None``): non-private
        mode, ``n_p = 0`` and ``α_min = 0`` (tests and diagnostics only).
    delta : float or None (default: None)
        δ_2 of MemEnc, in (0, 1).

    Notes
    -----
    Lemma 6 requires ``ε ≤ 2 ln(1/δ)``; construction raises otherwise (§19 item 1). The guarantee
    also assumes an ideal hash with a key secret from the server (A9: the ``"datasketch"`` backend
    does not give independent repetitions).

    Examples
    --------
    >>> p = DpfmParams(M=4096, gamma=1.0, epsilon=0.245, delta=2.5e-5)
    >>> p.n_p, p.alpha_min
    (3401, 12)
    """

    M: int = 4096
    gamma: float = 1.0
    epsilon: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "M", check_int(self.M, "M", minimum=1))
        object.__setattr__(self, "gamma", check_positive(self.gamma, "gamma"))
        if (self.epsilon is None) != (self.delta is None):
            raise ValueError(f"epsilon and delta must be given together (or both None for the non-private "
                             f"mode), got epsilon={self.epsilon!r}, delta={self.delta!r}")
        if self.epsilon is None:
            return
        eps = float(check_epsilon(self.epsilon, "epsilon"))
        delta = float(check_delta(self.delta, "delta"))
        bound = 2.0 * math.log(1.0 / delta)
        if eps > bound:  # Lemma 6 precondition (§5.2, §19 item 1)
            raise ValueError(f"epsilon must be <= 2*ln(1/delta) = {bound:.6g} (Lemma 6 precondition), "
                             f"got {eps!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)

    @property
    def private(self) -> bool:
        """True when ε and δ are set (phantoms and floor active)."""
        return self.epsilon is not None

    @property
    def eps_prime(self) -> float | None:
        """Per-repetition budget ``ε' = ε/(4√(M ln(1/δ)))`` (Lemma 6, §5.2); None in non-private mode."""
        if self.epsilon is None or self.delta is None:
            return None
        return self.epsilon / (4.0 * math.sqrt(self.M * math.log(1.0 / self.delta)))

    @property
    def n_p(self) -> int:
        """Phantom elements per register ``⌈1/(e^{ε'} − 1)⌉`` (§5.2, A3); 0 in non-private mode."""
        eps_prime = self.eps_prime
        return 0 if eps_prime is None else math.ceil(1.0 / math.expm1(eps_prime))

    @property
    def alpha_min(self) -> int:
        """Register floor ``⌈log_{1+γ}(1/(1 − e^{−ε'}))⌉`` (§5.2); 0 in non-private mode."""
        eps_prime = self.eps_prime
        if eps_prime is None:
            return 0
        return max(0, math.ceil(-math.log(-math.expm1(-eps_prime)) / math.log1p(self.gamma)))

    @property
    def register_dtype(self) -> np.dtype:
        """uint8 if ``⌈54 ln2/ln(1+γ)⌉ < 256`` (γ ≳ 0.16), else uint16 (§5.4)."""
        return np.dtype(np.uint8 if register_cap(self.gamma) < 256 else np.uint16)


def geometric_transform(u: np.ndarray, gamma: float) -> np.ndarray:
    """``T(u) = max(1, ⌈−ln u / ln(1+γ)⌉)`` as int64 (§5.4): Uniform(0, 1) becomes Geometric(γ/(1+γ))."""
    gamma = check_positive(gamma, "gamma")
    u = as_real_array(u, "u")
    outside = ~((u > 0) & (u <= 1))  # NaN counts as outside
    if np.any(outside):
        raise ValueError(f"u must lie in (0, 1], got {int(np.count_nonzero(outside))} value(s) outside")
    return np.maximum(1, np.ceil(-np.log(u) / math.log1p(gamma))).astype(np.int64)


def phantom_minima(shape: int | tuple[int, ...], n_p: int, rng: np.random.Generator) -> np.ndarray:
    """Minimum of ``n_p`` iid uniforms, ``V = −expm1(ln(U)/n_p)`` ~ Beta(1, n_p) (§5.4); all ones when n_p = 0."""
    n_p = check_int(n_p, "n_p", minimum=0)
    check_rng(rng)
    if n_p == 0:
        return np.ones(shape, dtype=np.float64)
    # U on the grid (k + 1/2)·2^-52: strictly inside (0, 1), so V is strictly inside (0, 1) too
    u = (rng.integers(0, 2**_UNIFORM_BITS, size=shape, dtype=np.int64) + 0.5) * 2.0**-_UNIFORM_BITS
    return -np.expm1(np.log(u) / n_p)


def dpfm_registers(u_min: np.ndarray, params: DpfmParams, rng: np.random.Generator) -> np.ndarray:
    """Integer registers ``max(T(min(u_min, V)), α_min)`` with fresh phantom minima V (§5.2, §5.4).

    ``u_min`` holds the minima of the keyed uniforms (1.0 where the set is empty), e.g. the output of
    :func:`fedpriv.sketch.hashing.cluster_minima`; ``rng`` is party-local randomness for the phantoms.
    Returns an array of ``params.register_dtype`` with the shape of ``u_min``.
    """
    if not isinstance(params, DpfmParams):
        raise TypeError(f"params must be a DpfmParams, got {type(params).__name__}")
    u_min = as_real_array(u_min, "u_min")
    m = np.minimum(u_min, phantom_minima(u_min.shape, params.n_p, rng))
    registers = geometric_transform(m, params.gamma)
    registers[m == 1.0] = 0  # no element and no phantom: α_real of an empty set is 0 (§5.2)
    registers = np.maximum(registers, params.alpha_min)
    # Above the dtype maximum needs min(u_min, V) < 2^-54: hash uniforms are >= 2^-53, so only a
    # phantom minimum gets there, with probability about n_p·2^-54. Saturate rather than wrap around.
    dtype = params.register_dtype
    return np.minimum(registers, np.iinfo(dtype).max).astype(dtype)
