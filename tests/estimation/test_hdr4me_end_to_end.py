"""End-to-end statistical checks of HDR4ME / HDR4ME* (docs/hdr4me.md §12 items 6 and 7).

Item 6 runs the real m-of-d protocol (m = d) on the Gaussian dataset of :mod:`fedpriv.data.mean_data`
with d = 100 and 20 repetitions per grid point. **n is scaled down from the spec's 1e5 to 1e4** to
keep the suite fast; at these budgets that only scales every σ_j² by 10, and the asserted
orderings hold with wide margins either way. The analyzer moments are computed here from the
mechanism (clt_utility_analyzer §3.3, sample form): δ_j = mean_i β(t_ij), σ_j² = mean_i v(t_ij) / r
with r = n·m/d. MSE(star) ≤ min(MSE(l1), MSE(l2)) is deliberately not asserted (docs/hdr4me.md §11).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.data.mean_data import make_mean_dataset, zipf_categories
from fedpriv.estimation.frequency import (
    analyze_frequencies,
    collect_frequencies,
    recalibrate_frequencies,
    true_frequencies,
)
from fedpriv.estimation.hdr4me import MODES, recalibrate
from fedpriv.mechanisms import get_mechanism
from fedpriv.mechanisms.protocol import collect_mean
from fedpriv.rng import stream

N, D, REPS, SEED = 10_000, 100, 20, 2024
GRIDS = {  # Set 2 budget grids (docs/hdr4me.md "Experiment settings")
    "laplace": (0.1, 0.2, 0.4, 0.8, 1.6, 3.2),
    "piecewise": (0.1, 0.2, 0.4, 0.8, 1.6, 3.2),
    "square_wave": (0.1, 10.0, 100.0, 500.0, 1000.0, 5000.0),
}


@pytest.fixture(scope="module")
def grid_mse():
    """MSE by mode at (mechanism, ε), computed once per grid point for the whole module."""
    data = make_mean_dataset("gaussian", N, D, SEED)
    cache: dict[tuple[str, float], dict[str, float]] = {}

    def mse(mechanism: str, epsilon: float) -> dict[str, float]:
        if (mechanism, epsilon) not in cache:
            cache[(mechanism, epsilon)] = _mse_by_mode(data, mechanism, epsilon)
        return cache[(mechanism, epsilon)]

    return mse


def _mse_by_mode(data, mechanism: str, epsilon: float) -> dict[str, float]:
    """MSE against the all-user mean of each mode, averaged over REPS protocol runs (m = d)."""
    x, truth = data.x, data.theta_bar
    mech = get_mechanism(mechanism, epsilon / D)  # ε' = ε/m with m = d
    delta = mech.bias(x).mean(axis=0)
    sigma = np.sqrt(mech.var(x).mean(axis=0) / (N * D / D))  # r = n·m/d
    sq = {mode: 0.0 for mode in MODES}
    for rep in range(REPS):
        est = collect_mean(x, mechanism, epsilon, D, stream(SEED, rep, 0, f"hdr4me-e2e/{mechanism}/{epsilon}"))
        rec = recalibrate(est.theta, delta=delta, sigma=sigma, mode="hdr4me*")  # carries every candidate
        candidates = {"none": est.theta, "l1": rec.theta_l1, "l2": rec.theta_l2, "hdr4me*": rec.theta}
        for mode, theta in candidates.items():
            sq[mode] += float(np.mean((theta - truth) ** 2)) / REPS
    return sq


@pytest.mark.parametrize("mechanism", ["laplace", "piecewise"])
def test_small_budget_every_regularizer_beats_naive(grid_mse, mechanism) -> None:
    mse = grid_mse(mechanism, 0.1)
    for mode in ("l1", "l2", "hdr4me*"):
        assert mse[mode] < mse["none"], (mode, mse)


def test_square_wave_large_budget_star_stays_naive(grid_mse) -> None:
    mse = grid_mse("square_wave", 1000.0)
    assert mse["hdr4me*"] == pytest.approx(mse["none"], rel=0.01), mse


@pytest.mark.parametrize("mechanism, epsilon", [(m, e) for m, grid in GRIDS.items() for e in grid])
def test_star_never_hurts_at_any_grid_point(grid_mse, mechanism, epsilon) -> None:
    mse = grid_mse(mechanism, epsilon)
    assert mse["hdr4me*"] <= 1.01 * mse["none"], mse


# ---------------------------------------------------------------- 7. frequency variant


K_ATTR, V_CAT, N_FREQ = 20, 10, 10_000


@pytest.fixture(scope="module")
def zipf_data():
    cats, _ = zipf_categories(N_FREQ, K_ATTR, V_CAT, seed=7)
    return cats, true_frequencies(cats, V_CAT)


@pytest.mark.parametrize("mechanism", ["laplace", "piecewise"])
def test_frequency_variant_lowers_mse_at_small_budget(zipf_data, mechanism) -> None:
    cats, truth = zipf_data
    mse = {"naive": 0.0, "star": 0.0}
    for rep in range(5):
        est = collect_frequencies(cats, V_CAT, mechanism, 0.5, K_ATTR, stream(7, rep, 0, f"freq-e2e/{mechanism}"))
        rec = recalibrate_frequencies(est, analyze_frequencies(est))
        mse["naive"] += float(np.mean((est.freq - truth) ** 2))
        mse["star"] += float(np.mean((rec.freq - truth) ** 2))
    assert mse["star"] < 0.8 * mse["naive"], mse  # observed ≈ 0.56 (PM) and lower (Laplace)
