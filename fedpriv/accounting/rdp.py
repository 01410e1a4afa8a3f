"""RDP of the Poisson-sub-sampled Gaussian at the integer orders 2…256 (docs/federated_mf.md §3.7).

Guarantee: :func:`epsilon` is an upper bound on the (ε, δ)-DP loss of ``steps`` adaptive
compositions of the Poisson-sub-sampled Gaussian mechanism (sampling rate q, noise multiplier z
= σ/Δ) under the add/remove relation the sensitivity Δ refers to, obtained from the Rényi DP
curve at the integer orders 2…256 (§3.7.2) and one of two conversions:

* ``"classic"`` (the source's Fact 2.2.2): ``ε = min_α τ(α) + log(1/δ)/(α−1)``;
* ``"improved"`` (default, as dp-accounting; Balle et al. 2020 Prop. 12):
  ``ε = min_α τ(α) + log((α−1)/α) − (log δ + log α)/(α−1)``.

τ(α; q, z) = (1/(α−1)) log Σ_k C(α,k)(1−q)^{α−k} q^k exp(k(k−1)/(2z²)) is the formula of
dp-accounting's ``_compute_log_a_int`` (Mironov–Talwar–Zhang), evaluated here vectorized over k and
α with log-sum-exp (dp-accounting's per-order Python loop costs ≈ 80 ms per curve, which makes
bisection and ledgers slow); the tests check it against dp-accounting's ``RdpAccountant`` with the
same orders. :func:`calibrate` returns the smallest z (to a relative 1e-6) whose ε does not exceed
the target — it never overshoots. :func:`integer_order_epsilon` composes one Gaussian release
(q = 1) per entry of a list of multipliers (LFL's cross-check of :mod:`~fedpriv.accounting.distributed`,
which uses dp-accounting's order grid). Composition across parties is :mod:`~fedpriv.accounting.parties`.
:func:`source_noise_multiplier` is the source's closed form (§3.7.1) with an unverified constant,
kept for reproduction only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_delta,
    check_int,
    check_positive,
    check_probability,
)

__all__ = [
    "CONVERSIONS",
    "ORDERS",
    "calibrate",
    "epsilon",
    "epsilon_from_rdp",
    "integer_order_epsilon",
    "rdp_curve",
    "smallest_epsilon",
    "source_noise_multiplier",
]

#: Integer Rényi orders α = 2…256 (§3.7.2; fractional orders are optional and not used).
ORDERS: tuple[int, ...] = tuple(range(2, 257))
#: RDP → (ε, δ) conversions (§3.7.2).
CONVERSIONS: tuple[str, ...] = ("improved", "classic")
#: Largest noise multiplier :func:`calibrate` tries before declaring the target unreachable.
_Z_MAX = 1e8
#: Relative precision of the calibrated z (bisection on log z stops when hi/lo ≤ 1 + this).
_Z_RTOL = 1e-6


def _check_orders(orders: Sequence[int]) -> tuple[int, ...]:
    """Return ``orders`` as a tuple of ints after checking they are integers ≥ 2."""
    try:
        out = tuple(int(a) for a in orders)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"orders must be a sequence of integers >= 2, got {orders!r}") from exc
    if not out or any(a < 2 or a != b for a, b in zip(out, orders)):
        raise ValueError(f"orders must be a non-empty sequence of integers >= 2, got {orders!r}")
    return out


@functools.lru_cache(maxsize=1024)
def _tau(q: float, z: float, orders: tuple[int, ...]) -> np.ndarray:
    """τ(α; q, z) of ONE step at every order (read-only, cached), §3.7.2."""
    from scipy.special import gammaln, logsumexp  # here: importing the accountant's types loads no SciPy

    a = np.asarray(orders, dtype=np.float64)[:, None]
    if q == 1.0:
        out = a[:, 0] / (2.0 * z * z)  # §3.7.2 special case q = 1: plain Gaussian, α/(2z²)
    else:
        k = np.arange(max(orders) + 1, dtype=np.float64)[None, :]
        valid = k <= a
        kk = np.where(valid, k, 0.0)
        # §3.7.2: log[C(α,k) (1−q)^{α−k} q^k exp(k(k−1)/(2z²))], summed over k = 0…α by log-sum-exp
        log_terms = (
            gammaln(a + 1.0) - gammaln(kk + 1.0) - gammaln(a - kk + 1.0)
            + (a - kk) * math.log1p(-q) + kk * math.log(q) + kk * (kk - 1.0) / (2.0 * z * z)
        )
        out = logsumexp(np.where(valid, log_terms, -np.inf), axis=1) / (a[:, 0] - 1.0)
    out = np.maximum(out, 0.0)  # τ ≥ 0; rounding can give −1e-17 when the mechanism is nearly silent
    out.setflags(write=False)
    return out


def rdp_curve(q: float, z: float, steps: int, orders: Sequence[int] = ORDERS) -> np.ndarray:
    """steps · τ(α; q, z) at every order (§3.7.2): the RDP of ``steps`` sub-sampled Gaussian steps."""
    q = check_probability(q, "q")
    z = check_positive(z, "z")
    steps = check_int(steps, "steps", minimum=0)
    return steps * _tau(q, z, _check_orders(orders))


def epsilon_from_rdp(
    rdp: np.ndarray, delta: float, *, orders: Sequence[int] = ORDERS, conversion: str = "improved"
) -> float:
    """ε at ``delta`` of an RDP curve, minimised over the orders (§3.7.2 ``classic`` / ``improved``)."""
    delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
    check_choice(conversion, "conversion", CONVERSIONS)
    a = np.asarray(_check_orders(orders), dtype=np.float64)
    rdp = np.asarray(rdp, dtype=np.float64)
    if rdp.shape != a.shape:
        raise ValueError(f"rdp must have one value per order ({a.size}), got shape {rdp.shape}")
    if np.any(np.isnan(rdp)) or np.any(rdp < 0):
        raise ValueError("rdp must be >= 0 at every order (a negative Rényi divergence is a numerical error), "
                         f"got min {np.nanmin(rdp) if np.any(~np.isnan(rdp)) else 'NaN'}")
    if conversion == "classic":
        eps = rdp + math.log(1.0 / delta) / (a - 1.0)  # Fact 2.2.2
    else:
        eps = rdp + np.log((a - 1.0) / a) - (math.log(delta) + np.log(a)) / (a - 1.0)  # Balle et al. Prop. 12
    return float(max(0.0, np.min(eps)))


@functools.lru_cache(maxsize=16384)
def _epsilon_cached(q: float, z: float, steps: int, delta: float, conversion: str) -> float:
    """Cached ε of ``steps`` sub-sampled Gaussian steps (arguments already checked)."""
    if steps == 0:
        return 0.0
    return epsilon_from_rdp(steps * _tau(q, z, ORDERS), delta, conversion=conversion)


def epsilon(q: float, z: float, steps: int, delta: float, *, conversion: str = "improved") -> float:
    """ε at ``delta`` of ``steps`` Poisson(q)-sub-sampled Gaussian steps with multiplier z (0 for no step)."""
    q = check_probability(q, "q")
    z = check_positive(z, "z")
    steps = check_int(steps, "steps", minimum=0)
    delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
    check_choice(conversion, "conversion", CONVERSIONS)
    return _epsilon_cached(q, z, steps, delta, conversion)


def smallest_epsilon(q: float, steps: int, delta: float, *, conversion: str = "improved") -> float:
    """The floor of ε as z → ∞ (τ → 0) with the orders 2…256 and this conversion (≈ 0.02 improved at δ = 1e-5).

    It depends on δ and the conversion only; ``q`` and ``steps`` are checked for a uniform signature.
    """
    check_probability(q, "q")
    check_int(steps, "steps", minimum=1)
    return epsilon_from_rdp(np.zeros(len(ORDERS)), delta, conversion=conversion)


def calibrate(target_epsilon: float, delta: float, q: float, steps: int, *, conversion: str = "improved") -> float:
    """Smallest z (relative precision 1e-6, rounded up) with ε(q, z, steps, δ) ≤ ``target_epsilon`` (§3.7.2).

    Bisection on log z keeps the upper end, so the returned z never overshoots the target. Raises
    ``ValueError`` naming the smallest reachable ε when the target is below the floor of the
    conversion (:func:`smallest_epsilon`).
    """
    target_epsilon = check_positive(target_epsilon, "target_epsilon")
    q = check_probability(q, "q")
    steps = check_int(steps, "steps", minimum=1)
    delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
    check_choice(conversion, "conversion", CONVERSIONS)
    floor = smallest_epsilon(q, steps, delta, conversion=conversion)
    if target_epsilon <= floor:
        raise ValueError(
            f"target_epsilon must be > {floor:.6g}, the smallest ε reachable with {steps} steps at δ = {delta:g} "
            f"and the {conversion!r} conversion over orders 2…256 (even as z → ∞), got {target_epsilon!r}"
        )

    def eps(z: float) -> float:
        return _epsilon_cached(q, z, steps, delta, conversion)

    lo = hi = 1.0
    while eps(hi) > target_epsilon:  # bracket: ε is non-increasing in z
        lo, hi = hi, hi * 2.0
        if hi > _Z_MAX:
            raise ValueError(
                f"target_epsilon must be reachable with z <= {_Z_MAX:g} ({steps} steps, q = {q:g}, δ = {delta:g}; "
                f"the floor is {floor:.6g}), got {target_epsilon!r}"
            )
    while eps(lo) <= target_epsilon:
        lo, hi = lo / 2.0, lo
    while hi / lo > 1.0 + _Z_RTOL:  # invariant: ε(lo) > target ≥ ε(hi)
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def source_noise_multiplier(
    target_epsilon: float, delta: float, q: float, steps: int, *, constant: float = 1.0
) -> float:
    """§3.7.1 (mode "source"): z = √(c · q² · steps · ln(1/δ)) / ε — NOT a verified DP bound.

    The source's Prop. 4.4.1 / 4.5.1 with an unknown constant c (default 1 [P]); the asymptotic
    moments-accountant bound it comes from also needs ε < c′ q² steps. Use :func:`calibrate` for a
    guarantee; report the guarantee of the returned z with :func:`epsilon`.
    """
    target_epsilon = check_positive(target_epsilon, "target_epsilon")
    delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
    q = check_probability(q, "q")
    steps = check_int(steps, "steps", minimum=1)
    constant = check_positive(constant, "constant")
    # §3.7.1: z² = c · η² · steps · ln(1/δ) / ε²
    return math.sqrt(constant * q * q * steps * math.log(1.0 / delta)) / target_epsilon


def integer_order_epsilon(z_effs: Sequence[float], delta: float, *, conversion: str = "improved") -> float:
    """ε of one Gaussian release (q = 1) per entry of ``z_effs``, τ = Σ_t α/(2 z_eff,t²) on the orders 2…256 (§3.7.3)."""
    delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
    check_choice(conversion, "conversion", CONVERSIONS)
    zs = [check_positive(z, "z_effs entries") for z in z_effs]
    if not zs:
        return 0.0
    total = sum((_tau(1.0, z, ORDERS) for z in zs), np.zeros(len(ORDERS)))  # 0.0 + x == x: the same bits
    return epsilon_from_rdp(total, delta, conversion=conversion)
