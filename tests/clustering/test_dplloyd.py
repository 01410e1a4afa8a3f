"""DPLloyd local clustering (docs/vertical_kmeans.md §4.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering.dplloyd import dplloyd
from fedpriv.data.vertical import mixed_gaussian
from fedpriv.rng import stream


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return mixed_gaussian(3000, 3, 4, seed=5)[0]


@pytest.mark.parametrize("eps", [0.05, 1.0, 10.0])
def test_centers_count_range_and_accounting(data, eps: float) -> None:
    out = dplloyd(data, 4, eps, stream(0, 0, 0, "test-dplloyd"), iterations=3)
    assert 1 <= out.k <= 4 and out.centers.shape[1] == 3 and np.all(np.abs(out.centers) <= 1.0)
    assert out.epsilon == eps and out.preset == "dplloyd" and out.leaves == 4
    assert out.eps_count == pytest.approx(eps / 2) and out.eps_sum == pytest.approx(eps / 2)


def test_huge_epsilon_is_plain_lloyd_from_the_same_start(data) -> None:
    """With negligible noise DPLloyd is T Lloyd steps from k uniform box points (an explicit loop oracle)."""
    k, t = 4, 5
    out = dplloyd(data, k, 1e12, stream(1, 0, 0, "test-dplloyd"), iterations=t)
    c = stream(1, 0, 0, "test-dplloyd").uniform(-1.0, 1.0, size=(k, 3))
    for _ in range(t):
        lab = np.argmin(((data[:, None, :] - c[None]) ** 2).sum(-1), axis=1)
        for j in range(k):
            if np.any(lab == j):
                c[j] = data[lab == j].mean(axis=0)
    assert np.allclose(np.unique(c, axis=0), np.unique(out.centers, axis=0), atol=1e-6)


def test_sum_noise_scale() -> None:
    """k=1, T=1, y=0: the center is Lap(d/ε_sum)/(n + Lap(1/ε_cnt)) with ε_sum = ε_cnt = ε/2 (§4.3)."""
    n, d, eps, reps = 1000, 2, 1.0, 2000
    rng = stream(3, 0, 0, "test-dplloyd")
    c = np.concatenate([dplloyd(np.zeros((n, d)), 1, eps, rng, iterations=1).centers for _ in range(reps)])
    var = 2 * (d / (eps / 2)) ** 2 / n**2
    se = math.sqrt(5 * var**2 / c.size)  # Laplace kurtosis 6
    assert abs(np.mean(c**2) - var) < 5 * se + 0.01 * var  # + 1%: the count noise in the divisor


def test_deterministic_for_a_fixed_rng(data) -> None:
    a = dplloyd(data, 4, 1.0, stream(2, 0, 0, "test-dplloyd"))
    b = dplloyd(data, 4, 1.0, stream(2, 0, 0, "test-dplloyd"))
    assert np.array_equal(a.centers, b.centers)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(k=0), ValueError, "k must be >= 1, got 0"),
        (dict(epsilon=0.0), ValueError, "epsilon must be > 0"),
        (dict(iterations=0), ValueError, "iterations must be >= 1, got 0"),
        (dict(y=np.full((4, 2), 1.5)), ValueError, r"y must lie in the domain \[-1, 1\], got 8 value\(s\)"),
        (dict(rng=None), TypeError, "rng must be a numpy.random.Generator"),
    ],
)
def test_validation(kwargs, exc, match) -> None:
    args = {**dict(y=np.zeros((4, 2)), k=2, epsilon=1.0, rng=stream(0, 0, 0, "v")), **kwargs}
    with pytest.raises(exc, match=match):
        dplloyd(args.pop("y"), args.pop("k"), args.pop("epsilon"), args.pop("rng"), **args)
