"""SecAgg+ parameter bounds: exact tails against integer arithmetic, the reference table, minimality."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from fedpriv.secagg.bounds import harary_bounds, harary_parameters, search_degree


def exact_log2_tail(population: int, marked: int, k: int, lo: int, hi: int) -> float:
    """log2 P(lo <= X <= hi) for X ~ Hypergeometric(population, marked, k), in exact rational arithmetic."""
    total = Fraction(0)
    for x in range(max(lo, 0), min(hi, k) + 1):
        total += Fraction(math.comb(marked, x) * math.comb(population - marked, k - x), math.comb(population, k))
    return -math.inf if total == 0 else math.log2(total.numerator) - math.log2(total.denominator)


@pytest.mark.parametrize("n, gamma, omega, k, t", [(60, 0.05, 0.3, 22, 4), (200, 0.1, 0.2, 30, 9),
                                                   (500, 0.0, 0.3, 28, 2), (120, 0.2, 0.1, 40, 14)])
def test_tails_equal_exact_rational_sums(n: int, gamma: float, omega: float, k: int, t: int) -> None:
    # independent oracle: the same three events from exact binomial coefficients (Python integers)
    b = harary_bounds(n, k, t, corrupt_fraction=gamma, dropout_fraction=omega)
    a, d = math.floor(gamma * n + 1e-9), math.floor(omega * n + 1e-9)
    corrupt = exact_log2_tail(n - 1, a, k, t, k) + math.log2(n)
    short = exact_log2_tail(n - 1, n - d, k, 0, t - 1) + math.log2(n)
    falling = Fraction(math.perm(a + d, k), math.perm(n, k))
    pairs = Fraction(n * (n - k - 1), 2)
    disconnected = -math.inf if falling == 0 else math.log2(pairs * falling)
    for got, want in ((b.log2_corrupt_neighbourhood, corrupt), (b.log2_short_neighbourhood, short),
                      (b.log2_disconnected, disconnected)):
        want = min(want, 0.0)  # a union bound above 1 is reported as 1
        assert (got == want == -math.inf) or abs(got - want) < 1e-6


# (n, γ, ω) → (k, t) published by the authors' reference finder (Google federated-compute,
# graph_parameter_finder_test.cc, σ = 40, η = 20), reproduced with its population convention.
REFERENCE = [(100, 0.45, 0.45, 92, 46), (1000, 0.45, 0.45, 822, 417), (10, 0.33, 0.33, 8, 4),
             (100, 0.33, 0.33, 68, 34), (1000, 0.33, 0.33, 286, 150), (10000, 0.33, 0.33, 422, 221),
             (100, 0.05, 0.33, 28, 6), (1000, 0.05, 0.33, 72, 24), (10000, 0.05, 0.33, 86, 29),
             (100000, 0.05, 0.33, 96, 32), (10, 0.33, 0.05, 4, 4), (100, 0.33, 0.05, 34, 29),
             (1000, 0.33, 0.05, 78, 60), (10000, 0.33, 0.05, 92, 70)]


@pytest.mark.parametrize("n, gamma, omega, k, t", REFERENCE)
def test_reproduces_the_reference_table(n: int, gamma: float, omega: float, k: int, t: int) -> None:
    got = search_degree(n, corrupt_fraction=gamma, dropout_fraction=omega, security_bits=40, correctness_bits=20,
                        population="n")
    assert got is not None and got[0] == k and got[1] <= t  # the reference returns its smallest valid t


def test_the_one_reference_entry_we_do_not_reproduce() -> None:
    # for n = 10, γ = 0.05, ω = 0.33 the reference gives k = 4, t = 2: it returns t = max(t1 + 1, 2) without
    # rechecking correctness at t = 2. In its own convention (neighbours drawn from all n = 10 clients, 7 of
    # them surviving) a client keeps fewer than 2 surviving neighbours with probability 7/210, i.e. 1/3 after
    # the union bound over 10 clients: far from 2^-20. So we give (6, 2) in that convention ...
    assert exact_log2_tail(10, 7, 4, 0, 1) + math.log2(10) > -20
    assert search_degree(10, corrupt_fraction=0.05, dropout_fraction=0.33, population="n") == (6, 2)
    # ... and (4, 2) in ours: a dropped client's 4 neighbours come from the 9 others, of whom only 2 dropped
    assert search_degree(10, corrupt_fraction=0.05, dropout_fraction=0.33) == (4, 2)
    assert harary_bounds(10, 4, 2, corrupt_fraction=0.05, dropout_fraction=0.33).correctness_bits == math.inf


@pytest.mark.parametrize("n, gamma, omega", [(100, 0.05, 0.3), (1000, 0.05, 0.3), (943, 0.05, 0.3),
                                             (10000, 0.05, 0.3), (1000, 0.2, 0.1), (300, 0.0, 0.5)])
def test_parameters_meet_sigma_and_eta_and_are_minimal(n: int, gamma: float, omega: float) -> None:
    got = harary_parameters(n, corrupt_fraction=gamma, dropout_fraction=omega)
    assert got is not None and got.degree % 2 == 0 and got.degree < n - 1
    assert got.security_bits >= 40 and got.correctness_bits >= 20
    assert got.log2_disconnected < -41 and got.log2_corrupt_neighbourhood < -41  # σ split over the two events
    kw = {"corrupt_fraction": gamma, "dropout_fraction": omega}
    if got.share_threshold > 2:  # a smaller t breaks privacy
        assert harary_bounds(n, got.degree, got.share_threshold - 1, **kw).log2_corrupt_neighbourhood >= -41
    if got.degree > 2:  # no t works with a smaller degree
        k = got.degree - 2
        assert harary_bounds(n, k, 2, **kw).log2_disconnected >= -41 or not any(
            (b := harary_bounds(n, k, t, **kw)).log2_corrupt_neighbourhood < -41 and b.correctness_bits > 20
            for t in range(2, k + 2))


def test_more_corruption_needs_a_larger_degree() -> None:
    ks = [harary_parameters(1000, corrupt_fraction=g, dropout_fraction=0.3).degree for g in (0.0, 0.05, 0.1, 0.2)]
    assert ks == sorted(ks) and ks[0] < ks[-1]


def test_infeasible_instances_give_none() -> None:
    assert harary_parameters(20, corrupt_fraction=0.45, dropout_fraction=0.5) is None
    assert search_degree(3, corrupt_fraction=0.0, dropout_fraction=0.3) is None  # no k < n − 1 = 2


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: harary_bounds(10, 3, 2, corrupt_fraction=0, dropout_fraction=0.3), "degree must be even"),
        (lambda: harary_bounds(10, 10, 2, corrupt_fraction=0, dropout_fraction=0.3), "degree must be <= 9"),
        (lambda: harary_bounds(10, 4, 6, corrupt_fraction=0, dropout_fraction=0.3), "share_threshold must be <= 5"),
        (lambda: harary_bounds(10, 4, 2, corrupt_fraction=1.0, dropout_fraction=0.3), "corrupt_fraction must be in"),
        (lambda: harary_parameters(10, corrupt_fraction=0, dropout_fraction=0.3, security_bits=0),
         "security_bits must be > 0"),
        (lambda: search_degree(10, corrupt_fraction=0, dropout_fraction=0.3, population="all"),
         "population must be 'n-1' or 'n'"),
    ],
)
def test_errors(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call()
