"""RDP accountant of the sub-sampled Gaussian, conversions, calibration, composition (docs/federated_mf.md §3.7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent
from dp_accounting.rdp import RdpAccountant

from fedpriv.accounting.parties import PartyAccount, global_epsilon, party_epsilon
from fedpriv.accounting.rdp import (
    ORDERS,
    calibrate,
    epsilon,
    epsilon_from_rdp,
    integer_order_epsilon,
    rdp_curve,
    smallest_epsilon,
    source_noise_multiplier,
)

DELTA = 1e-5

# §3.7.2 test vectors (δ = 1e-5, integer orders 2…256): (q, z, steps, ε classic, ε improved)
SPEC_TABLE = [
    (0.01, 1.0, 1000, 2.5383, 2.1078),
    (0.01, 0.8, 1000, 4.3507, 3.7252),
    (0.01, 2.0, 1000, 0.8594, 0.6862),
    (0.01, 1.0, 1100, 2.6277, 2.1971),
    (1.0, 5.0, 10, 3.2391, 2.8141),
    (1.0, 2.0, 10, 8.8376, 8.0879),
]


@pytest.mark.parametrize("q, z, steps, classic, improved", SPEC_TABLE)
def test_spec_table(q, z, steps, classic, improved):
    assert round(epsilon(q, z, steps, DELTA, conversion="classic"), 4) == classic
    assert round(epsilon(q, z, steps, DELTA, conversion="improved"), 4) == improved


@pytest.mark.parametrize("q", [0.001, 0.01, 0.2, 0.9, 1.0])
@pytest.mark.parametrize("z", [0.5, 1.0, 4.0])
def test_rdp_curve_matches_dp_accounting(q, z):
    acc = RdpAccountant(orders=list(ORDERS))
    acc.compose(PoissonSampledDpEvent(q, GaussianDpEvent(z)), 37)
    np.testing.assert_allclose(rdp_curve(q, z, 37), acc.rdp, rtol=1e-9, atol=1e-15)
    assert epsilon(q, z, 37, DELTA) == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


def test_conversions_follow_their_formulas():
    rdp = rdp_curve(0.05, 1.3, 200)
    a = np.asarray(ORDERS, dtype=float)
    classic = min(r + math.log(1 / DELTA) / (o - 1) for r, o in zip(rdp, a))
    improved = min(r + math.log((o - 1) / o) - (math.log(DELTA) + math.log(o)) / (o - 1) for r, o in zip(rdp, a))
    assert epsilon_from_rdp(rdp, DELTA, conversion="classic") == pytest.approx(classic, rel=1e-14)
    assert epsilon_from_rdp(rdp, DELTA, conversion="improved") == pytest.approx(improved, rel=1e-14)


def test_q_one_is_the_plain_gaussian():
    # §3.7.2 special case: τ = α/(2z²)
    np.testing.assert_allclose(rdp_curve(1.0, 3.0, 4), 4 * np.asarray(ORDERS) / 18.0, rtol=1e-15)


def test_epsilon_is_monotone_and_zero_without_steps():
    zs = [0.6, 0.8, 1.0, 1.5, 3.0, 10.0]
    eps = [epsilon(0.01, z, 1000, DELTA) for z in zs]
    assert all(a > b for a, b in zip(eps, eps[1:]))
    steps = [epsilon(0.01, 1.0, s, DELTA) for s in (1, 10, 100, 1000)]
    assert all(a < b for a, b in zip(steps, steps[1:]))
    assert epsilon(0.01, 1.0, 0, DELTA) == 0.0


@pytest.mark.parametrize("target, q, steps, expected", [(1.0, 0.01, 1000, 1.513), (1.0, 1.0, 10, 12.79)])
def test_calibration_checks(target, q, steps, expected):
    z = calibrate(target, DELTA, q, steps)
    assert z == pytest.approx(expected, abs=0.0015 if expected < 2 else 0.015)
    assert epsilon(q, z, steps, DELTA) <= target  # never overshoots
    assert epsilon(q, z * (1 - 1e-5), steps, DELTA) > target  # and is the smallest such z (to 1e-5)


@pytest.mark.parametrize("target", [0.06, 0.5, 2.0, 8.0, 50.0])
@pytest.mark.parametrize("conversion", ["improved", "classic"])
def test_calibration_never_overshoots(target, conversion):
    z = calibrate(target, DELTA, 0.02, 300, conversion=conversion)
    assert epsilon(0.02, z, 300, DELTA, conversion=conversion) <= target
    assert epsilon(0.02, z * (1 - 1e-5), 300, DELTA, conversion=conversion) > target


def test_floor_and_calibration_below_it():
    floor = smallest_epsilon(0.01, 1000, DELTA)
    a = 256.0  # the floor is attained at the largest order as τ → 0
    assert floor == pytest.approx(math.log((a - 1) / a) - (math.log(DELTA) + math.log(a)) / (a - 1), rel=1e-12)
    assert 0.015 < floor < 0.025
    assert smallest_epsilon(0.01, 1000, DELTA, conversion="classic") == pytest.approx(math.log(1 / DELTA) / 255)
    assert epsilon(0.01, 1e6, 1000, DELTA) == pytest.approx(floor, rel=1e-6)
    with pytest.raises(ValueError, match=r"target_epsilon must be > 0\.0194.*got 0\.01"):
        calibrate(0.01, DELTA, 0.01, 1000)


def test_per_user_vfl_composition_example():
    # §3.7.3: q = 0.01, z = 1, 1000 steps per party, δ = 1e-5, improved conversion
    acc = PartyAccount(q=0.01, z=1.0, steps=1000)
    assert round(party_epsilon(acc, DELTA), 3) == 2.108
    assert round(global_epsilon([acc] * 2, DELTA, rule="sqrt-sum"), 3) == 2.981
    assert round(global_epsilon([acc] * 2, DELTA, rule="rdp-sum"), 3) == 2.868
    assert round(global_epsilon([acc] * 10, DELTA, rule="sqrt-sum"), 3) == 6.665
    assert round(global_epsilon([acc] * 10, DELTA, rule="rdp-sum"), 3) == 6.719


def test_rdp_sum_equals_one_account_with_all_steps_and_max_is_parallel():
    a, b = PartyAccount(0.02, 1.2, 300), PartyAccount(0.02, 1.2, 500)
    assert global_epsilon([a, b], DELTA, rule="rdp-sum") == pytest.approx(epsilon(0.02, 1.2, 800, DELTA), rel=1e-12)
    c = PartyAccount(0.05, 0.9, 100)
    assert global_epsilon([a, b, c], DELTA, rule="max") == max(party_epsilon(x, DELTA) for x in (a, b, c))
    assert global_epsilon([PartyAccount(0.1, 1.0, 0)], DELTA, rule="rdp-sum") == 0.0


def test_integer_order_epsilon_adds_rdp_per_release():
    # two Gaussian releases with z1, z2 have the RDP of one with 1/z² = 1/z1² + 1/z2²
    z1, z2 = 3.0, 4.0
    z_eq = 1.0 / math.sqrt(1 / z1**2 + 1 / z2**2)
    assert integer_order_epsilon([z1, z2], DELTA) == pytest.approx(epsilon(1.0, z_eq, 1, DELTA), rel=1e-12)
    assert integer_order_epsilon([5.0] * 10, DELTA, conversion="classic") == pytest.approx(3.2391, abs=5e-5)
    assert integer_order_epsilon([], DELTA) == 0.0


def test_source_noise_multiplier_closed_form():
    q, steps, eps, c = 0.01, 1000, 2.0, 3.0
    z = source_noise_multiplier(eps, DELTA, q, steps, constant=c)
    # §3.7.1: z² = c · η² · steps · ln(1/δ) / ε²
    assert z**2 * eps**2 / (q**2 * steps * math.log(1 / DELTA)) == pytest.approx(c, rel=1e-12)


@pytest.mark.parametrize(
    "fn, kwargs, match",
    [
        (epsilon, {"q": 0.0, "z": 1.0, "steps": 1, "delta": DELTA}, r"q must be in \(0, 1\]"),
        (epsilon, {"q": 0.1, "z": 0.0, "steps": 1, "delta": DELTA}, "z must be > 0"),
        (epsilon, {"q": 0.1, "z": 1.0, "steps": -1, "delta": DELTA}, "steps must be >= 0"),
        (epsilon, {"q": 0.1, "z": 1.0, "steps": 1, "delta": 1.0}, "delta must be in the open interval"),
        (epsilon, {"q": 0.1, "z": 1.0, "steps": 1, "delta": DELTA, "conversion": "pld"}, "conversion must be one"),
        (rdp_curve, {"q": 0.1, "z": 1.0, "steps": 1, "orders": [1.5, 2]}, "orders must be"),
        (epsilon_from_rdp, {"rdp": np.zeros(3), "delta": DELTA}, "one value per order"),
        (epsilon_from_rdp, {"rdp": -np.ones(len(ORDERS)), "delta": DELTA}, "rdp must be >= 0"),
        (calibrate, {"target_epsilon": 0.0, "delta": DELTA, "q": 0.1, "steps": 10}, "target_epsilon must be > 0"),
        (calibrate, {"target_epsilon": 1.0, "delta": DELTA, "q": 0.1, "steps": 0}, "steps must be >= 1"),
        (source_noise_multiplier, {"target_epsilon": 1.0, "delta": DELTA, "q": 0.1, "steps": 10, "constant": 0.0},
         "constant must be > 0"),
        (global_epsilon, {"accounts": [], "delta": DELTA, "rule": "max"}, "at least one PartyAccount"),
        (global_epsilon, {"accounts": [PartyAccount(0.1, 1.0, 1)], "delta": DELTA, "rule": "sum"},
         "rule must be one of"),
        (integer_order_epsilon, {"z_effs": [1.0, -2.0], "delta": DELTA}, "z_effs entries must be > 0"),
        (PartyAccount, {"q": 1.5, "z": 1.0, "steps": 1}, r"q must be in \(0, 1\]"),
        (PartyAccount, {"q": 0.1, "z": math.inf, "steps": 1}, "z must be > 0 and finite"),
        (PartyAccount, {"q": 0.1, "z": 1.0, "steps": -2}, "steps must be >= 0"),
    ],
)
def test_errors(fn, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(**kwargs)


def test_party_epsilon_needs_an_account():
    with pytest.raises(TypeError, match="PartyAccount"):
        party_epsilon((0.1, 1.0, 10), DELTA)
