"""Discrete Laplace and Laplace noise (docs/vertical_kmeans.md §4.2): moments, pmf, e^ε ratio, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering.noise import discrete_laplace, laplace
from fedpriv.rng import stream

N = 200_000


def _pmf(z: np.ndarray, eps: float) -> np.ndarray:
    """Closed-form two-sided geometric pmf (an independent oracle)."""
    a = math.exp(-eps)
    return (1 - a) / (1 + a) * a ** np.abs(z)


@pytest.mark.parametrize("eps", [0.1, 0.7, 2.0])
def test_discrete_laplace_moments(eps: float) -> None:
    z = discrete_laplace(eps, N, stream(1, 0, 0, "test-dlap"))
    assert z.dtype == np.int64 and z.shape == (N,)
    a = math.exp(-eps)
    var = 2 * a / (1 - a) ** 2  # §4.2 variance of the difference of two geometrics
    assert abs(z.mean()) < 5 * math.sqrt(var / N)
    # Var of the sample variance: (μ4 − σ⁴)/N, with μ4 computed from the closed-form pmf
    support = np.arange(-int(60 / eps) - 10, int(60 / eps) + 11)
    mu4 = float(np.sum(_pmf(support, eps) * support.astype(float) ** 4))
    assert abs(z.var() - var) < 5 * math.sqrt((mu4 - var**2) / N)


@pytest.mark.parametrize("eps", [0.3, 1.0])
def test_discrete_laplace_pmf_matches_closed_form(eps: float) -> None:
    z = discrete_laplace(eps, N, stream(2, 0, 0, "test-dlap"))
    values = np.arange(-4, 5)
    p = _pmf(values, eps)
    freq = (z[:, None] == values[None, :]).mean(axis=0)
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / N))


@pytest.mark.parametrize("eps", [0.5, 1.5])
def test_discrete_laplace_likelihood_ratio_bounded_by_e_eps(eps: float) -> None:
    """Neighbouring counts c and c+1: P(c+Z = y)/P(c+1+Z = y) <= e^ε, with a CLT margin on log-ratios."""
    z0 = discrete_laplace(eps, N, stream(3, 0, 0, "test-dlap"))
    z1 = 1 + discrete_laplace(eps, N, stream(3, 0, 1, "test-dlap"))
    values = np.arange(-6, 8)
    c0 = (z0[:, None] == values).sum(axis=0).astype(float)
    c1 = (z1[:, None] == values).sum(axis=0).astype(float)
    ok = (c0 >= 100) & (c1 >= 100)
    log_ratio = np.abs(np.log(c0[ok] / c1[ok]))
    margin = 5 * np.sqrt(1 / c0[ok] + 1 / c1[ok])
    assert np.all(log_ratio <= eps + margin)
    assert np.any(log_ratio >= eps - margin)  # the bound is attained: the noise is not wasteful


def test_laplace_variance_and_determinism() -> None:
    x = laplace(2.5, N, stream(4, 0, 0, "test-lap"))
    var = 2 * 2.5**2
    assert abs(x.var() - var) < 5 * math.sqrt((24 * 2.5**4 - var**2) / N)  # μ4 of Laplace = 24 b⁴
    assert np.array_equal(laplace(2.5, (3, 2), stream(5, 0, 0, "l")), laplace(2.5, (3, 2), stream(5, 0, 0, "l")))
    assert np.array_equal(discrete_laplace(1.0, (3, 2), stream(5, 0, 0, "l")),
                          discrete_laplace(1.0, (3, 2), stream(5, 0, 0, "l")))


def test_shapes() -> None:
    rng = stream(0, 0, 0, "s")
    assert discrete_laplace(1.0, (2, 3), rng).shape == (2, 3)
    assert discrete_laplace(1.0, None, rng).shape == ()
    assert discrete_laplace(1.0, 0, rng).shape == (0,)


@pytest.mark.parametrize(
    "fn, kwargs, exc, match",
    [
        (discrete_laplace, dict(epsilon=0.0, size=3), ValueError, "epsilon must be > 0"),
        (discrete_laplace, dict(epsilon=float("nan"), size=3), ValueError, "epsilon must be > 0"),
        (discrete_laplace, dict(epsilon=[1.0, 2.0], size=3), TypeError, "epsilon must be a scalar"),
        (discrete_laplace, dict(epsilon=1.0, size=3, rng=None), TypeError, "rng must be a numpy.random.Generator"),
        (laplace, dict(scale=-1.0, size=3), ValueError, "scale must be > 0"),
        (laplace, dict(scale=1.0, size=3, rng=np.random.default_rng), TypeError, "rng must be"),
    ],
)
def test_validation(fn, kwargs, exc, match) -> None:
    kwargs = {"rng": stream(0, 0, 0, "v"), **kwargs}
    with pytest.raises(exc, match=match):
        fn(**kwargs)
