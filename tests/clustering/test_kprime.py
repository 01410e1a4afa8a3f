"""Auto k' and the bound calculator (docs/vertical_kmeans.md §8.2, §11; §19 item 8)."""

from __future__ import annotations

import math

import pytest

from fedpriv.clustering.kprime import (
    KPRIME_RULES,
    auto_kprime,
    cell_error_std,
    kprime_sigma,
    weight_error_term,
)


@pytest.mark.parametrize(
    "n, eps, parties, r1, r2",
    [(50000, 1.5, 3, 6, 6), (30000, 0.8, 2, 5, 5), (200000, 2.0, 4, 7, 7), (10000, 1.0, 2, 4, 5)],
)
def test_auto_kprime_spec_vectors(n: int, eps: float, parties: int, r1: int, r2: int) -> None:
    """§8.2 test vectors: k = 5, M = 4096, b = 0.98, δ = 1/n."""
    assert auto_kprime(n, eps, parties, 5, delta=1 / n, rule="R1") == r1
    assert auto_kprime(n, eps, parties, 5, delta=1 / n, rule="R2") == r2
    assert auto_kprime(n, eps, parties, 5, rule="R1") == r1  # δ defaults to 1/n̂
    assert auto_kprime(n, eps, parties, 5, rule="fixed") == 5


def test_auto_kprime_is_the_first_crossing() -> None:
    """k0 is the smallest integer with 2σ(k0) ≥ n̂/k0² (an independent scan of kprime_sigma)."""
    n, eps, parties = 10000, 1.0, 2
    eps2, delta2 = 0.98 * eps / (2 * parties), 1 / n / parties
    for rule in ("R1", "R2"):
        k0 = next(j for j in range(1, 100) if 2 * kprime_sigma(j, n, eps2, delta2, rule=rule) >= n / j**2)
        assert auto_kprime(n, eps, parties, 1, rule=rule) == k0


def test_auto_kprime_grid_has_at_least_k_nodes() -> None:
    # small n and ε: the phantom term makes k0 = 2, so ⌈k^{1/S}⌉ decides (integer root, no float round-up)
    assert auto_kprime(1000, 0.1, 2, 1, rule="R1") == 2
    assert auto_kprime(1000, 0.1, 2, 400) == 20
    assert auto_kprime(1000, 0.1, 3, 8) == 2
    assert auto_kprime(1000, 0.1, 3, 27) == 3
    assert auto_kprime(1000, 0.1, 3, 28) == 4


def test_r2_is_never_below_r1() -> None:
    for n in (5000, 20000, 100000):
        for eps in (0.5, 1.0, 2.0, 4.0):
            for parties in (2, 4):
                assert auto_kprime(n, eps, parties, 5, rule="R2") >= auto_kprime(n, eps, parties, 5, rule="R1")
                assert kprime_sigma(3, n, eps, 1e-5, rule="R2") <= kprime_sigma(3, n, eps, 1e-5, rule="R1")


def test_cell_error_std_hand_value() -> None:
    # ρ(n − w)/√M + 4ρ s (k'−1) √ln(1/δ_2)/ε_2
    expected = 0.649 * (20000 - 500) / 64 + 4 * 0.649 * 2 * 4 * math.sqrt(math.log(1 / 2.5e-5)) / 0.245
    assert cell_error_std(20000, 500, 5, 2, 4096, 0.245, 2.5e-5) == pytest.approx(expected, rel=1e-12)
    assert kprime_sigma(5, 20000, 0.245, 2.5e-5, rule="R2") == pytest.approx(
        cell_error_std(20000, 20000 / 25, 5, 2, 4096, 0.245, 2.5e-5), rel=1e-12)


def test_weight_error_term_hand_value() -> None:
    spread = 20000 / 64 + 2 * 4 * math.sqrt(math.log(1 / 2.5e-5)) / 0.245
    assert weight_error_term(20000, 2, 5, 4096, 0.245, 2.5e-5, m=8) == pytest.approx(
        64 * 5**3 / math.sqrt(0.05) * spread, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rule="R3"), "rule must be one of 'R1', 'R2', 'fixed'"),
        (dict(n_hat=-5.0), "n_hat must be > 0"),
        (dict(n_hat=0.5), "n_hat must be > 1 for the default delta"),
        (dict(epsilon=0.0), "epsilon must be > 0"),
        (dict(parties=0), "parties must be >= 1"),
        (dict(k=0), "k must be >= 1"),
        (dict(b=1.5), r"b must be in \(0, 1\]"),
        (dict(delta=1.0), r"delta must be in the open interval \(0, 1\)"),
    ],
)
def test_auto_kprime_errors(kwargs: dict, match: str) -> None:
    args = dict(n_hat=10000.0, epsilon=1.0, parties=2, k=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        auto_kprime(**args)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(w_true=30000.0), "w_true must be <= n"), (dict(kprime=0), "kprime must be >= 1"),
     (dict(delta2=0.0), "delta2 must be in the open interval"), (dict(rho=0.0), "rho must be > 0")],
)
def test_cell_error_std_errors(kwargs: dict, match: str) -> None:
    args = dict(n=20000.0, w_true=500.0, kprime=5, s=2, M=4096, epsilon2=0.245, delta2=2.5e-5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        cell_error_std(**args)


def test_rules_constant() -> None:
    assert KPRIME_RULES == ("R1", "R2", "fixed")
