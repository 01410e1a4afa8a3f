"""Central (ε, δ) of sums released with distributed Gaussian noise (docs/federated_mf.md §3.7.3, §6.4).

Each successful iteration of the two-round scheme (:mod:`fedpriv.secagg.noise`) is one Gaussian
mechanism on the aggregate with noise multiplier ``z_eff = σ_eff/Δ₂``; its ledger,
:class:`fedpriv.secagg.ledger.DistributedDpLedger`, lives beside the scheme and charges each
released sum with :func:`rdp_accountant_epsilon`. :func:`calibrate_sigma` finds the σ a run of such
releases needs (LFL matrix factorization, the secure sum).

:func:`rdp_accountant_epsilon` is the ``"rdp"`` accountant of :func:`fedpriv.accounting.accountant.compose`
by name — Rényi DP through dp-accounting's ``RdpAccountant`` (default orders, "improved"
conversion, §3.7.2) on ``GaussianRelease(z_eff)`` per iteration, Poisson-sampled at rate q when
``q < 1``; equal multipliers are grouped. :func:`calibrate_sigma` calibrates on it, so the σ it
returns meets the target under the tightest accountant too (whose ε is never larger). The neighbouring relation is
add/remove of one client's contribution, whose L2 norm is at most ``sensitivity``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from fedpriv._validation import (
    check_int,
    check_positive,
    check_probability,
    check_scalar_delta,
)
from fedpriv.accounting.accountant import compose
from fedpriv.accounting.events import GaussianRelease

__all__ = ["calibrate_sigma", "rdp_accountant_epsilon"]

#: Search range of the noise multiplier z = σ/Δ in :func:`calibrate_sigma`.
Z_BOUNDS: tuple[float, float] = (1e-3, 1e6)


def _rdp_epsilon(multipliers: dict[float, int], delta: float, q: float) -> float:
    """ε at δ of ``count`` (Poisson(q)-sampled) Gaussian releases at each multiplier z (the ``"rdp"`` accountant)."""
    events = [GaussianRelease(z, count, q) for z, count in multipliers.items()]
    return compose(events, delta, accountants=("rdp",)).epsilon


def rdp_accountant_epsilon(noise_multipliers: Any, delta: float, *, sampling_rate: float = 1.0) -> float:
    """ε at ``delta`` of one (Poisson-subsampled) Gaussian release per entry of ``noise_multipliers`` (dp-accounting's RDP)."""
    delta = check_scalar_delta(delta)
    q = check_probability(sampling_rate, "sampling_rate")
    counts = Counter(check_positive(float(z), "noise multiplier") for z in noise_multipliers)
    if not counts:
        return 0.0
    return _rdp_epsilon(counts, delta, q)


def calibrate_sigma(
    target_epsilon: float, delta: float, *, sensitivity: float, iterations: int, sampling_rate: float = 1.0
) -> float:
    """Smallest σ such that ``iterations`` Gaussian releases at z = σ/Δ meet (target_epsilon, delta); never overshoots.

    Bisection on log z (ε is decreasing in z) until the bracket is within a relative 1e-7; the
    upper end is returned, so ``ε(σ) <= target_epsilon`` always holds (toward more noise).
    """
    target = check_positive(target_epsilon, "target_epsilon")
    delta = check_scalar_delta(delta)
    sensitivity = check_positive(sensitivity, "sensitivity")
    iterations = check_int(iterations, "iterations", minimum=1)
    q = check_probability(sampling_rate, "sampling_rate")

    def eps(z: float) -> float:
        return _rdp_epsilon({z: iterations}, delta, q)

    z_min, z_max = Z_BOUNDS
    # bracket [lo, hi] with ε(lo) > target >= ε(hi), growing by factors of 4 from z = 1
    lo, hi = 1.0, 1.0
    while eps(hi) > target:
        if hi >= z_max:
            raise ValueError(
                f"target_epsilon={target!r} is unreachable with delta={delta!r}, iterations={iterations}, "
                f"sampling_rate={q!r}: even sigma = {z_max:g}·sensitivity gives epsilon = {eps(hi):.4g}"
            )
        lo, hi = hi, min(4.0 * hi, z_max)
    while lo == hi or eps(lo) <= target:
        if lo <= z_min:
            raise ValueError(
                f"target_epsilon={target!r} is so large (delta={delta!r}, iterations={iterations}, "
                f"sampling_rate={q!r}) that sigma = {z_min:g}·sensitivity already meets it "
                f"(epsilon = {eps(lo):.4g}); use a smaller target"
            )
        lo, hi = max(lo / 4.0, z_min), lo
    while hi / lo - 1.0 > 1e-7:
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi * sensitivity
