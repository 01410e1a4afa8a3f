"""DPLSF private local clustering (docs/vertical_kmeans.md §4.2, §19 item 10)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedpriv.clustering.dplsf as dplsf_module
from fedpriv.clustering.dplsf import PRESETS, LocalClustering, dplsf, dplsf_budget
from fedpriv.clustering.kmeans import assign, kmeans
from fedpriv.clustering.metrics import kmeans_cost, v_measure
from fedpriv.data.vertical import mixed_gaussian
from fedpriv.rng import stream


@pytest.fixture(scope="module")
def blobs() -> tuple[np.ndarray, np.ndarray]:
    return mixed_gaussian(4000, 4, 5, seed=11)


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("eps", [0.05, 0.5, 3.0])
def test_centers_count_range_and_accounting(blobs, preset: str, eps: float) -> None:
    x, _ = blobs
    out = dplsf(x, 5, eps, stream(0, 0, 0, "test-dplsf"), preset=preset)
    assert isinstance(out, LocalClustering) and out.preset == preset
    assert 1 <= out.k <= 5 and out.centers.shape[1] == 4 and out.leaves >= out.k
    assert np.all(np.abs(out.centers) <= 1.0)
    assert np.unique(out.centers, axis=0).shape[0] == out.k
    assert out.epsilon == eps  # §19 item 10: the whole budget, no more
    assert out.eps_count + out.eps_sum == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize("depth, frac_sum", [(20, 0.8), (10, 0.5), (0, 0.3), (7, 0.99)])
def test_budget_split_adds_up(depth: int, frac_sum: float) -> None:
    b = dplsf_budget(1.7, 6, max_depth=depth, frac_sum=frac_sum)
    assert b.levels == depth + 1
    assert b.eps_count_level == pytest.approx((1 - frac_sum) * 1.7 / (depth + 1))  # ε_c of §4.2
    assert b.levels * b.eps_count_level + b.eps_sum == pytest.approx(1.7, rel=1e-12)
    assert b.beta_sum == pytest.approx(6 / (frac_sum * 1.7))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_noise_calls_spend_exactly_the_split(blobs, monkeypatch, preset: str) -> None:
    """Spy on the noise: every count draw uses ε_c, at most D+1 levels draw, one Laplace sum draw at β_sum."""
    x, _ = blobs
    calls: list[tuple[str, float, object]] = []
    real_dlap, real_lap = dplsf_module.discrete_laplace, dplsf_module.laplace

    def dlap(eps, size, rng):
        calls.append(("count", eps, size))
        return real_dlap(eps, size, rng)

    def lap(scale, size, rng):
        calls.append(("sum", scale, size))
        return real_lap(scale, size, rng)

    monkeypatch.setattr(dplsf_module, "discrete_laplace", dlap)
    monkeypatch.setattr(dplsf_module, "laplace", lap)
    out = dplsf(x, 5, 2.0, stream(2, 0, 0, "test-dplsf"), preset=preset)
    b = dplsf_budget(2.0, 4, **PRESETS[preset])
    counts = [c for c in calls if c[0] == "count"]
    sums = [c for c in calls if c[0] == "sum"]
    assert len(counts) == b.levels and all(c[1] == b.eps_count_level for c in counts)
    assert len(sums) == 1 and sums[0][1] == b.beta_sum and sums[0][2] == (out.leaves, 4)
    assert len(counts) * b.eps_count_level + d_eps(sums[0][1], 4) == pytest.approx(2.0)


def d_eps(beta: float, d: int) -> float:
    """ε of per-coordinate Laplace(β) on a sum of L1 sensitivity d."""
    return d / beta


def test_deterministic_for_a_fixed_rng(blobs) -> None:
    x, _ = blobs
    a = dplsf(x, 5, 1.0, stream(3, 0, 0, "test-dplsf"))
    b = dplsf(x, 5, 1.0, stream(3, 0, 0, "test-dplsf"))
    c = dplsf(x, 5, 1.0, stream(3, 0, 1, "test-dplsf"))
    assert np.array_equal(a.centers, b.centers) and a.leaves == b.leaves
    assert not np.array_equal(a.centers, c.centers)


def test_recovers_separated_clusters_at_large_epsilon(blobs) -> None:
    x, labels = blobs
    base = kmeans_cost(x, kmeans(x, 5, rng=stream(0, 0, 0, "test-central")))
    for preset in PRESETS:
        out = dplsf(x, 5, 200.0, stream(4, 0, 0, "test-dplsf"), preset=preset)
        assert kmeans_cost(x, out.centers) < 1.05 * base
        assert v_measure(labels, assign(x, out.centers)) > 0.99


def test_noiseless_tree_gives_exact_leaf_means() -> None:
    """At a huge ε the noise vanishes: leaves are exact prefix sets, coreset points exact means."""
    pts = np.array([[0.5, 0.25], [-0.75, 0.5], [0.125, -0.875]])
    y = np.repeat(pts, [10, 20, 30], axis=0)
    out = dplsf(y, 3, 1e9, stream(5, 0, 0, "test-dplsf"))
    got = out.centers[np.lexsort(out.centers.T[::-1])]
    assert np.allclose(got, pts[np.lexsort(pts.T[::-1])], atol=1e-6)


def test_root_only_tree_has_the_laplace_sum_scale() -> None:
    """max_depth=0: one leaf, center = clip((Σy + Lap(β)^d)/n_priv); y = 0 isolates the sum noise."""
    n, d, eps, fsum, reps = 1000, 2, 1.0, 0.5, 2000
    rng = stream(6, 0, 0, "test-dplsf")
    y = np.zeros((n, d))
    c = np.concatenate([dplsf(y, 3, eps, rng, max_depth=0, frac_sum=fsum).centers for _ in range(reps)])
    assert c.shape == (reps, d)
    beta = d / (fsum * eps)  # §4.2 β_sum
    var = 2 * beta**2 / n**2
    se = math.sqrt(5 * var**2 / c.size)  # Laplace kurtosis 6: Var(s²) ≈ 5σ⁴/N
    assert abs(np.mean(c**2) - var) < 5 * se + 0.01 * var  # + 1%: the count noise in the divisor


def test_custom_overrides_are_labelled(blobs) -> None:
    x, _ = blobs
    assert dplsf(x, 5, 1.0, stream(0, 0, 0, "t"), max_depth=5).preset == "custom"
    assert dplsf(x, 5, 1.0, stream(0, 0, 0, "t"), preset="tuned", max_depth=10).preset == "tuned"


def test_input_outside_the_box_is_rejected() -> None:
    y = np.zeros((10, 2))
    y[[1, 4], 0] = [1.5, -1.01]
    with pytest.raises(ValueError, match=r"y must lie in the domain \[-1, 1\], got 2 value\(s\) outside"):
        dplsf(y, 2, 1.0, stream(0, 0, 0, "t"))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(k=0), ValueError, "k must be >= 1, got 0"),
        (dict(epsilon=0.0), ValueError, "epsilon must be > 0"),
        (dict(epsilon=-1.0), ValueError, "epsilon must be > 0"),
        (dict(preset="google"), ValueError, "preset must be one of 'library', 'tuned', got 'google'"),
        (dict(max_depth=-1), ValueError, "max_depth must be >= 0, got -1"),
        (dict(max_depth=61), ValueError, "max_depth must be <= 60"),
        (dict(frac_sum=1.0), ValueError, r"frac_sum must be in \(0, 1\), got 1.0"),
        (dict(frac_sum=0.0), ValueError, r"frac_sum must be in \(0, 1\)"),
        (dict(y=np.zeros(5)), ValueError, "y must be a 2-D array"),
        (dict(y=np.full((5, 2), np.nan)), ValueError, "y must be finite"),
        (dict(rng=None), TypeError, "rng must be a numpy.random.Generator"),
    ],
)
def test_validation(kwargs, exc, match) -> None:
    args = {**dict(y=np.zeros((5, 2)), k=2, epsilon=1.0, rng=stream(0, 0, 0, "v")), **kwargs}
    with pytest.raises(exc, match=match):
        dplsf(args.pop("y"), args.pop("k"), args.pop("epsilon"), args.pop("rng"), **args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(centers=np.full((2, 2), 2.0)), r"centers must lie in the domain \[-1, 1\]"),
        (dict(centers=np.zeros((0, 2))), "centers must be a 2-D array with at least one row"),
        (dict(epsilon=-0.5), "epsilon must be >= 0"),
        (dict(leaves=-1), "leaves must be >= 0"),
    ],
)
def test_local_clustering_validation(kwargs, match) -> None:
    args = {**dict(centers=np.zeros((2, 2)), epsilon=1.0, leaves=2, preset="library"), **kwargs}
    with pytest.raises(ValueError, match=match):
        LocalClustering(**args)


def test_local_clustering_is_frozen() -> None:
    src = np.zeros((2, 2))
    lc = LocalClustering(centers=src, epsilon=math.inf, leaves=0, preset="nonprivate")
    src[0, 0] = 0.5
    assert lc.centers[0, 0] == 0.0 and not lc.centers.flags.writeable
