"""Distribution-task datasets, the CSV column loader and the true histogram (docs/square_wave_ems.md §10, §0)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedpriv.data.distributions import (
    DISTRIBUTION_DATASETS,
    DISTRIBUTION_RESOLUTIONS,
    load_column,
    make_distribution,
    true_histogram,
)


def test_beta_5_2_moments_within_clt_tolerance() -> None:
    """§10's Beta(5, 2): sample mean within 5 SE of 5/7, variance within 5 SE of 10/392, shape by KS."""
    n = 100_000
    v = make_distribution("beta-5-2", n, seed=0)
    mean, var = 5 / 7, 10 / (49 * 8)  # ab/((a+b)²(a+b+1))
    assert abs(v.mean() - mean) <= 5 * math.sqrt(var / n)
    fourth = stats.beta(5, 2).moment(4) - 4 * mean * stats.beta(5, 2).moment(3) + 6 * mean**2 * (var + mean**2) - 3 * mean**4
    assert abs(v.var() - var) <= 5 * math.sqrt((fourth - var**2) / n)
    assert stats.kstest(v, stats.beta(5, 2).cdf).pvalue > 1e-4


@pytest.mark.parametrize("name, mean, var", [("uniform", 0.5, 1 / 12), ("bimodal", 0.5, None)])
def test_smooth_shapes_mean(name: str, mean: float, var: float | None) -> None:
    """Uniform and the symmetric bimodal mixture have mean ½ (CLT, 5 SE on the sample sd)."""
    n = 50_000
    v = make_distribution(name, n, seed=1)
    assert abs(v.mean() - mean) <= 5 * v.std() / math.sqrt(n)
    if var is not None:
        assert abs(v.var() - var) <= 0.01 * var
    if name == "bimodal":  # two peaks at 0.3 and 0.7 with a trough between
        h = true_histogram(v, 10)
        assert h[2] > h[5] < h[7] and h[5] < 0.5 * min(h[2], h[7])


def test_income_like_is_spiky() -> None:
    """At least the 60% who round to $10 000 sit on that grid (§10: income data are spiky); all < 2¹⁹."""
    n = 50_000
    v = make_distribution("income-like", n, seed=2)
    dollars = np.round(v * 2**19)
    assert np.all(v < 1.0)
    on_grid = np.mean(dollars % 10_000 == 0)
    assert on_grid >= 0.6 - 5 * math.sqrt(0.24 / n)
    h = true_histogram(v, 1024)  # bucket width 512 dollars: a $10 000 spike towers over its neighbours
    spike = 50_000 // 512
    assert h[spike] > 10 * h[spike + 2]


@pytest.mark.parametrize("name", DISTRIBUTION_DATASETS)
def test_every_dataset_is_in_the_domain_and_keyed(name: str) -> None:
    v = make_distribution(name, 2_000, seed=3)
    assert v.shape == (2_000,) and v.dtype == np.float64
    assert v.min() >= 0.0 and v.max() <= 1.0
    np.testing.assert_array_equal(v, make_distribution(name, 2_000, seed=3))
    assert not np.array_equal(v, make_distribution(name, 2_000, seed=4))
    assert name in DISTRIBUTION_RESOLUTIONS


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "taxi"}, "name must be one of 'beta-5-2'"),
        ({"n": 0}, "n must be >= 1"),
        ({"seed": -1}, "seed must be >= 0"),
    ],
)
def test_make_distribution_bad_input(kwargs: dict, match: str) -> None:
    args = {"name": "beta-5-2", "n": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_distribution(args.pop("name"), args.pop("n"), **args)


def test_true_histogram_bucket_convention() -> None:
    """§0: v → bucket min(⌊v·d⌋, d − 1); 1.0 belongs to the last bucket."""
    h = true_histogram(np.array([0.0, 0.25, 0.5, 0.999, 1.0]), 4)
    np.testing.assert_array_equal(h, [0.2, 0.2, 0.2, 0.4])
    v = make_distribution("beta-5-2", 1_000, seed=5)
    np.testing.assert_allclose(true_histogram(v, 8), np.histogram(v, bins=8, range=(0, 1))[0] / 1_000)


@pytest.mark.parametrize(
    "values, d, match",
    [
        (np.array([0.5, 1.5, -0.2]), 4, r"2 value\(s\) outside"),
        (np.array([0.5]), 0, "d must be >= 1"),
        (np.zeros((2, 2)), 4, "1-D"),
        (np.array([0.5, np.nan]), 4, "finite"),
    ],
)
def test_true_histogram_bad_input(values: np.ndarray, d: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        true_histogram(values, d)


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(text)
    return path


def test_load_column_rescales_with_public_bounds(tmp_path: Path) -> None:
    path = _csv(tmp_path, "id,income\n1,0\n2,250\n3,1000\n")
    np.testing.assert_allclose(load_column(path, "income", lo=0, hi=1000), [0.0, 0.25, 1.0])
    np.testing.assert_allclose(load_column(path, "income", lo=-1000, hi=1000), [0.5, 0.625, 1.0])
    np.testing.assert_allclose(load_column(_csv(tmp_path, "x\n0.5\n1\n"), "x"), [0.5, 1.0])  # default [0, 1]


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("x\n5\n-1\n20\n", {"lo": 0, "hi": 10}, r"2 value\(s\) outside \(lines 3, 4"),
        ("x\n0.5\n2\n", {}, r"\[0, 1\], got 1 value\(s\) outside"),
        ("x\n0.5\nabc\n0.2\n", {}, r"non-numeric or empty value\(s\) \(first on line 3\)"),
        ("x\n0.5\n\n0.2\n", {}, "got 0 on line 3"),
        ("x\n0.5\nnan\n", {}, r"NaN/inf value\(s\) \(first on line 3\)"),
        ("x,y\n0.5,1\n0.2\n", {}, "fields like the header, got 1 on line 3"),
        ("y\n0.5\n", {}, "CSV columns"),
        ("x\n", {}, "header and at least one row"),
        ("x\n0.5\n", {"lo": 1, "hi": 1}, "hi must be > lo"),
        ("x\n0.5\n", {"lo": float("inf")}, "lo must be finite"),
    ],
)
def test_load_column_errors(tmp_path: Path, text: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        load_column(_csv(tmp_path, text), "x", **kwargs)


def test_load_column_bad_types(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x\n0.5\n")
    with pytest.raises(TypeError, match="lo must be a real number"):
        load_column(path, "x", lo="0")
    with pytest.raises(TypeError, match="column must be a non-empty column name"):
        load_column(path, "")
