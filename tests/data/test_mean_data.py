"""Mean-estimation datasets of the HDR4ME experiments (docs/hdr4me.md "Experiment settings")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from fedpriv.data.mean_data import (
    MEAN_DATASET_RESOLUTIONS,
    MEAN_DATASETS,
    make_mean_dataset,
    mean_dataset,
    zipf_categories,
)

N, D = 20_000, 60


@pytest.fixture(scope="module")
def datasets():
    return {name: make_mean_dataset(name, N, D, seed=3) for name in MEAN_DATASETS}


@pytest.mark.parametrize("name", MEAN_DATASETS)
def test_shape_range_and_record(datasets, name) -> None:
    ds = datasets[name]
    assert ds.x.shape == (N, D) and ds.x.dtype == np.float64
    assert ds.x.min() >= -1.0 and ds.x.max() <= 1.0
    assert ds.resolutions == MEAN_DATASET_RESOLUTIONS[name]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ds.resolutions.items())
    assert ds.surrogate == (name == "cov19-surrogate")
    np.testing.assert_allclose(ds.theta_bar, ds.x.mean(axis=0))


@pytest.mark.parametrize("name", MEAN_DATASETS)
def test_deterministic_per_seed_and_dtype_only_rounds(name) -> None:
    a = mean_dataset(name, 500, 7, seed=11)
    b = mean_dataset(name, 500, 7, seed=11)
    c = mean_dataset(name, 500, 7, seed=12)
    f32 = mean_dataset(name, 500, 7, seed=11, dtype=np.float32)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert f32.dtype == np.float32
    if name == "poisson":  # normalized after storage: compare in float32 arithmetic
        np.testing.assert_allclose(f32, a, rtol=0, atol=1e-6)
    else:
        np.testing.assert_array_equal(f32, a.astype(np.float32))


def test_uniform_moments(datasets) -> None:
    x = datasets["uniform"].x
    se_mean = np.sqrt(1 / 3 / N)
    assert np.all(np.abs(x.mean(axis=0)) < 5 * se_mean)
    np.testing.assert_allclose(x.var(axis=0), 1 / 3, atol=5 * np.sqrt(4 / 45 / N))  # Var(x²) = 4/45


def _clipped_normal_mean(mu: float, sd: float) -> float:
    """E[clip(X, −1, 1)], X ~ N(μ, sd²), by quadrature (oracle independent of the generator)."""
    inner = integrate.quad(lambda t: t * stats.norm.pdf(t, mu, sd), -1, 1, points=[mu])[0]
    return inner + stats.norm.sf(1, mu, sd) - stats.norm.cdf(-1, mu, sd)


def test_gaussian_means_and_spread(datasets) -> None:
    ds = datasets["gaussian"]
    mean = ds.params["mean"]
    high = mean == 0.9
    assert high.sum() == round(0.1 * D) and np.all(mean[~high] == 0.0)
    se = (1 / 16) / np.sqrt(N)
    cols = ds.x.mean(axis=0)
    assert np.all(np.abs(cols[high] - _clipped_normal_mean(0.9, 1 / 16)) < 5 * se)  # clipping lowers 0.9 by ~1.5e-3
    assert np.all(np.abs(cols[~high]) < 5 * se)
    np.testing.assert_allclose(ds.x[:, ~high].std(axis=0), 1 / 16, rtol=5 * np.sqrt(1 / (2 * N)))
    assert ds.x[:, high].max() == 1.0  # the clip is reached at mean 0.9, sd 1/16


def test_poisson_minmax_and_lambdas(datasets) -> None:
    ds = datasets["poisson"]
    np.testing.assert_array_equal(ds.x.min(axis=0), -1.0)
    np.testing.assert_array_equal(ds.x.max(axis=0), 1.0)
    lam = ds.params["lambda"]
    assert np.all(lam == np.round(lam)) and lam.min() >= 1 and lam.max() <= 99
    # an affine image of integer counts: every column's values lie on a lattice of step 2/(max − min)
    for col in ds.x.T[:10]:
        levels = np.unique(col)
        steps = (levels - levels[0]) / np.min(np.diff(levels))
        np.testing.assert_allclose(steps, np.round(steps), atol=1e-9)


def test_poisson_lambda_is_uniform_on_1_to_99() -> None:
    lam = make_mean_dataset("poisson", 2, 20_000, seed=1).params["lambda"]
    counts = np.bincount(lam.astype(int), minlength=100)[1:]
    assert stats.chisquare(counts).pvalue > 1e-3


def test_cov19_surrogate_is_correlated(datasets) -> None:
    ds = datasets["cov19-surrogate"]
    corr = np.corrcoef(ds.x.T)
    off = np.abs(corr[~np.eye(D, dtype=bool)])
    assert off.mean() > 0.1  # strongly correlated (independent columns would give ~0.006)
    assert np.linalg.eigvalsh(corr)[-16:].sum() > 0.7 * D  # 16 factors carry most of the variance
    assert "SURROGATE" in ds.resolutions["surrogate"]
    np.testing.assert_allclose(ds.x.mean(axis=0), ds.params["centre"], atol=0.02)


def test_large_setting_fits_in_float32() -> None:
    ds = make_mean_dataset("uniform", 100_000, 750, seed=0, dtype=np.float32)
    assert ds.x.dtype == np.float32 and ds.x.nbytes == 100_000 * 750 * 4
    assert ds.theta_bar.dtype == np.float64


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(name="cov19"), ValueError, "name must be one of"),
        (dict(n=0), ValueError, "n must be >= 1"),
        (dict(d=0), ValueError, "d must be >= 1"),
        (dict(seed=-1), ValueError, "seed must be >= 0"),
        (dict(dtype=np.int32), ValueError, "dtype must be float64 or float32"),
        (dict(n=2.5), TypeError, "n must be an integer"),
    ],
)
def test_bad_input(kwargs, exc, match) -> None:
    args = dict(name="uniform", n=10, d=3, seed=0)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        make_mean_dataset(**args)


def test_zipf_categories() -> None:
    cats, freqs = zipf_categories(50_000, 4, 6, seed=5, exponent=1.0)
    assert cats.shape == (50_000, 4) and cats.dtype == np.int64
    assert cats.min() >= 0 and cats.max() < 6
    np.testing.assert_allclose(freqs.sum(axis=1), 1.0)
    ranks = np.sort(freqs, axis=1)[:, ::-1]
    np.testing.assert_allclose(ranks / ranks[:, :1], np.tile(1 / np.arange(1, 7), (4, 1)))
    emp = np.stack([np.bincount(c, minlength=6) for c in cats.T]) / 50_000
    assert np.all(np.abs(emp - freqs) < 5 * np.sqrt(freqs * (1 - freqs) / 50_000))
    np.testing.assert_array_equal(cats, zipf_categories(50_000, 4, 6, seed=5)[0])
