"""Release events and ``compose``: every accountant's answer, the tightest valid one reported and named."""

from __future__ import annotations

import math

import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant

from fedpriv.accounting import rdp
from fedpriv.accounting.accountant import ACCOUNTANTS, DEFAULT_ACCOUNTANTS, compose
from fedpriv.accounting.events import ApproxRelease, GaussianRelease, PureRelease
from tests.accounting._oracles import gaussian_delta as _gaussian_delta

DELTA = 1e-5


def test_pure_releases_compose_sequentially_and_only_sequential_answers_at_delta_zero() -> None:
    c = compose([PureRelease(1.5), PureRelease(1.5, count=2), PureRelease(0.5, count=0)], 0.0)
    assert c.epsilon == 4.5 and c.delta == 0.0 and c.accountant == "sequential"
    notes = {a.accountant: a.note for a in c.tried}
    assert {a.accountant for a in c.tried} == set(DEFAULT_ACCOUNTANTS)
    assert "needs δ in (0, 1)" in notes["rdp"] and "needs δ in (0, 1)" in notes["pld"]


def test_no_events_spend_nothing() -> None:
    c = compose([], DELTA)
    assert c.epsilon == 0.0 and c.accountant == "none"


@pytest.mark.parametrize("z, count", [(1.0, 1), (5.0, 3), (0.7, 40)])
def test_unsampled_gaussians_are_bounded_tightly_by_the_closed_form(z: float, count: int) -> None:
    c = compose([GaussianRelease(z, count)], DELTA)
    mu = math.sqrt(count) / z
    assert c.accountant == "pld"
    assert _gaussian_delta(mu, c.epsilon) <= DELTA  # valid: the bound holds at the δ asked
    assert _gaussian_delta(mu, c.epsilon * (1 - 1e-6)) > DELTA  # tight: a hair less would not
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(GaussianDpEvent(z), count))
    tried = {a.accountant: a.epsilon for a in c.tried}
    assert tried["rdp"] == pytest.approx(acc.get_epsilon(DELTA), rel=1e-12)
    assert c.epsilon == min(e for e in tried.values() if e is not None) < tried["rdp"]


def test_gaussians_with_different_multipliers_compose_as_one_gaussian() -> None:
    c = compose([GaussianRelease(2.0), GaussianRelease(3.0, count=2)], DELTA)
    mu = math.sqrt(1 / 4 + 2 / 9)
    assert _gaussian_delta(mu, c.epsilon) <= DELTA < _gaussian_delta(mu, c.epsilon * (1 - 1e-6))


def test_sampled_gaussians_are_rdp_and_pld_says_why_it_did_not_run() -> None:
    c = compose([GaussianRelease(1.1, count=300, sampling_rate=0.02)], DELTA)
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.1)), 300))
    assert c.accountant == "rdp" and c.epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=1e-12)
    assert "Poisson-sampled" in next(a.note for a in c.tried if a.accountant == "pld")
    assert "states no per-release" in next(a.note for a in c.tried if a.accountant == "sequential")


def test_stated_gaussian_takes_basic_composition_when_it_is_tighter() -> None:
    # one release at a large multiplier: its stated ε is below what the accountants prove at the summed δ
    c = compose([GaussianRelease(50.0, epsilon=0.001, delta=1e-6)], 1e-6)
    assert c.accountant == "sequential" and c.epsilon == 0.001


def test_basic_composition_does_not_answer_above_the_delta_asked() -> None:
    c = compose([ApproxRelease(1.0, 1e-5, count=10)], 1e-5)
    note = next(a.note for a in c.tried if a.accountant == "sequential")
    assert "spends δ = 0.0001, above the δ = 1e-05 asked" in note and c.accountant == "pld"


def test_approx_releases_pld_never_exceeds_basic_or_advanced_composition() -> None:
    eps, dlt, k, slack = 0.1, 1e-7, 200, 1e-5
    c = compose([ApproxRelease(eps, dlt, count=k)], k * dlt + slack)
    # Dwork, Rothblum and Vadhan 2010 (Dwork and Roth 2014, Theorem 3.20): an upper bound on the optimum
    advanced = math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * math.expm1(eps)
    assert c.accountant == "pld" and c.epsilon <= advanced < k * eps


def test_integer_order_rdp_is_a_named_option_equal_to_the_curve_of_rdp_py() -> None:
    events = [GaussianRelease(1.3, count=50, sampling_rate=0.05)]
    assert "rdp-integer" in ACCOUNTANTS and "rdp-integer" not in DEFAULT_ACCOUNTANTS
    c = compose(events, DELTA, accountants=["rdp-integer"])
    assert c.accountant == "rdp-integer"
    assert c.epsilon == pytest.approx(rdp.epsilon(0.05, 1.3, 50, DELTA), rel=1e-12)


def test_a_release_without_noise_has_no_guarantee() -> None:
    assert math.isinf(compose([GaussianRelease(0.0, count=3)], DELTA).epsilon)
    assert math.isinf(compose([PureRelease(math.inf)], 0.0).epsilon)


def test_summary_names_every_answer() -> None:
    c = compose([GaussianRelease(2.0, count=4, epsilon=2.0, delta=1e-6)], 4e-6)
    text = c.summary()
    assert text.startswith(f"{c.accountant} (tightest of sequential 8, rdp ") and "pld " in text
    assert c.as_dict()["tried"]["sequential"] == 8.0


def test_events_are_frozen_and_equal_releases_merge() -> None:
    e = GaussianRelease(1.0)
    with pytest.raises(AttributeError):
        e.count = 2  # type: ignore[misc]
    assert compose([e] * 5, DELTA) == compose([GaussianRelease(1.0, count=5)], DELTA)


@pytest.mark.parametrize("build, match", [
    (lambda: PureRelease(-1.0), r"epsilon must be >= 0"),
    (lambda: PureRelease(float("nan")), r"epsilon must be >= 0"),
    (lambda: ApproxRelease(1.0, 1.5), r"delta must be in \[0, 1\], got 1.5"),
    (lambda: GaussianRelease(-1.0), r"noise_multiplier must be >= 0"),
    (lambda: GaussianRelease(1.0, sampling_rate=0.0), r"sampling_rate must be in \(0, 1\]"),
    (lambda: GaussianRelease(1.0, count=-1), r"count must be >= 0"),
    (lambda: GaussianRelease(1.0, sampling_rate=0.5, epsilon=1.0), r"epsilon must be None for a Poisson-sampled"),
    (lambda: compose([PureRelease(1.0)], 2.0), r"delta must be a number in \[0, 1\], got 2.0"),
    (lambda: compose([PureRelease(1.0)], 0.1, accountants=["moments"]), r"accountants must be a non-empty"),
    (lambda: compose([GaussianRelease(1.0)], 0.0), r"no accountant of .* bounds these events at delta=0.0"),
])
def test_bad_input_is_refused_with_the_value_named(build, match) -> None:
    with pytest.raises(ValueError, match=match):
        build()


def test_a_non_event_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"events must hold .* got float at index 0"):
        compose([1.0], DELTA)  # type: ignore[list-item]
