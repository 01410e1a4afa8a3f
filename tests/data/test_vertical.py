"""Vertical data: normalization, column split, the mixed-Gaussian generator, loaders (docs/vertical_kmeans.md §3.3,
§15.1)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedpriv.data.vertical import (
    VerticalData,
    check_unit_box,
    load_vertical,
    mixed_gaussian,
    normalize,
    read_csv,
    split_columns,
)


def test_normalize_maps_column_range_to_the_box() -> None:
    x = np.array([[1.0, -5.0, 7.0], [3.0, 5.0, 7.0], [2.0, 0.0, 7.0]])
    out = normalize(x)
    assert np.array_equal(out[:, 0], [-1.0, 1.0, 0.0]) and np.array_equal(out[:, 1], [-1.0, 1.0, 0.0])
    assert np.array_equal(out[:, 2], [0.0, 0.0, 0.0])  # constant column → 0


def test_normalize_with_public_bounds() -> None:
    x = np.array([[0.0, 2.0], [5.0, 4.0]])
    out = normalize(x, lo=np.array([0.0, 0.0]), hi=10.0)
    assert np.allclose(out, 2 * x / 10 - 1)  # §3.3 map
    with pytest.raises(ValueError, match=r"x must lie within the bounds \[lo, hi\], got 2 value\(s\) outside"):
        normalize(x, lo=1.0, hi=4.5)
    with pytest.raises(ValueError, match="lo must be <= hi in every column"):
        normalize(x, lo=3.0, hi=np.array([10.0, 2.0]))
    with pytest.raises(ValueError, match=r"lo must be a scalar or have shape \(2,\)"):
        normalize(x, lo=np.zeros(3))


def test_split_columns_even_and_by_ratio() -> None:
    x = np.arange(24.0).reshape(3, 8)
    assert [b.shape for b in split_columns(x, 2)] == [(3, 4), (3, 4)]
    assert [b.shape[1] for b in split_columns(x[:, :7], 3)] == [3, 2, 2]
    assert [b.shape[1] for b in split_columns(x, 2, ratios=(3, 5))] == [3, 5]
    assert [b.shape[1] for b in split_columns(x, 2, ratios=(1, 3))] == [2, 6]
    assert np.array_equal(np.hstack(split_columns(x, 4)), x)  # contiguous blocks in column order


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(parties=0), "parties must be >= 1, got 0"),
        (dict(parties=9), "parties must be <= 8, got 9"),
        (dict(parties=2, ratios=(1, 2, 3)), "ratios must be 2 positive integers"),
        (dict(parties=2, ratios=(0, 8)), "ratios must be 2 positive integers"),
        (dict(parties=2, ratios=(1.5, 2)), "ratios must be 2 positive integers"),
        (dict(parties=2, ratios=(1, 2)), "ratios must divide the 8 columns exactly"),
    ],
)
def test_split_columns_validation(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        split_columns(np.zeros((2, 8)), **kwargs)


def test_mixed_gaussian_shape_labels_range_and_seed() -> None:
    x, labels = mixed_gaussian(1003, 8, 5, seed=3)
    assert x.shape == (1003, 8) and labels.shape == (1003,) and labels.dtype == np.int64
    assert np.bincount(labels).tolist() == [201, 201, 201, 200, 200]
    assert np.all(np.abs(x) <= 1.0)
    x2, l2 = mixed_gaussian(1003, 8, 5, seed=3)
    assert np.array_equal(x, x2) and np.array_equal(labels, l2)
    assert not np.array_equal(x, mixed_gaussian(1003, 8, 5, seed=4)[0])


def test_mixed_gaussian_spread() -> None:
    """Within-component variance is 1/(r²m) (§15.1); m=32 puts the box 5.7 s.d. away, so clipping is negligible."""
    n, m, k, r = 20000, 32, 5, 8.0
    x, labels = mixed_gaussian(n, m, k, seed=1, r=r)
    means = np.stack([x[labels == j].mean(axis=0) for j in range(k)])
    resid = x - means[labels]
    var = 1 / (r**2 * m)
    dof = (n - k) * m
    assert abs(np.sum(resid**2) / dof - var) < 5 * var * math.sqrt(2 / dof)
    assert np.all(np.abs(means) <= 1 - 1 / r + 5 * math.sqrt(var * k / n))


@pytest.mark.parametrize(
    "name, shape, classes", [("digits", (1797, 64), 10), ("wine", (178, 13), 3),
                             ("breast_cancer", (569, 30), 2), ("iris", (150, 4), 3)],
)
def test_sklearn_loaders(name: str, shape: tuple[int, int], classes: int) -> None:
    v = load_vertical(name, 2)
    assert v.x.shape == shape and v.parties == 2 and sum(v.widths) == shape[1]
    assert np.array_equal(v.ids, np.arange(shape[0])) and np.unique(v.labels).size == classes
    assert v.x.min() == -1.0 and v.x.max() == 1.0
    assert load_vertical(name, 2, n=50).n == 50


def test_mixed_gaussian_loader_with_uneven_split() -> None:
    v = load_vertical("mixed-gaussian", 2, n=500, ratios=(3, 5), seed=2)
    assert v.widths == (3, 5) and v.n == 500 and v.labels is not None
    assert np.all(np.abs(v.x) <= 1.0)


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "data.csv"
    p.write_text(text)
    return str(p)


def test_csv_loader(tmp_path: Path) -> None:
    path = _write(tmp_path, "a,b,kind,c\n1,2,x,0\n3,4,y,1\n5,8,x,2\n")
    v = load_vertical("csv", 2, csv_path=path, label_column="kind")
    assert v.widths == (2, 1) and v.labels.tolist() == [0, 1, 0]
    assert np.array_equal(v.x[:, 0], [-1.0, 0.0, 1.0])
    v2 = load_vertical("csv", 2, csv_path=path, columns=["c", "a"], n=2)
    assert v2.n == 2 and v2.labels is None and np.array_equal(v2.x, [[-1.0, -1.0], [1.0, 1.0]])
    x, labels, names = read_csv(path, label_column="kind")
    assert names == ("a", "b", "c") and x.shape == (3, 3)


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("a,b\n1,2\nnan,3\n4,NaN\n5,\n", {}, r"column 'a' of .* must be finite, got 1 NaN/inf value\(s\) \(first on line 3\)"),
        ("a,b\n1,2\n2,x\n3,\n4,5\n", {}, r"column 'b' of .* must be numeric, got 2 non-numeric or empty value\(s\) \(first on line 3\)"),
        ("a,b\n1,2\n3,4\n", dict(label_column="y"), "label_column must be one of the CSV columns"),
        ("a,b\n1,2\n3,4\n", dict(columns=["a", "z"]), "columns must be a non-empty list of CSV columns"),
        ("a,b,y\n1,2,0\n3,4,1\n", dict(columns=["a", "y"], label_column="y"), "other than the label column"),
        ("a,b,y\n1,2,0\n3,4,\n", dict(label_column="y"), r"label column 'y' .* must have no empty values, got 1"),
        ("a,b\n1,2\n3\n", {}, "every row of .* must have 2 fields like the header, got 1 on line 3"),
        ("a,b\n", {}, "at least one row"),
        ("a,b\n1,2\n3,4\n", dict(n=3), "n must be <= 2, got 3"),
    ],
)
def test_csv_errors(tmp_path: Path, text: str, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        load_vertical("csv", 2, csv_path=_write(tmp_path, text), **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="letter"), "name must be one of 'mixed-gaussian', .*'csv', got 'letter'"),
        (dict(parties=1), "parties must be >= 2, got 1"),
        (dict(name="iris", parties=5), "parties must be <= 4, got 5"),
        (dict(name="csv"), "csv_path must be given for name='csv'"),
        (dict(label_column="y"), "apply only to name='csv'"),
        (dict(name="iris", n=151), "n must be <= 150, got 151"),
        (dict(n=0), "n must be >= 1, got 0"),
        (dict(ratios=(1, 2)), "ratios must divide the 8 columns exactly"),
        (dict(seed=-1), "seed must be >= 0"),
    ],
)
def test_load_vertical_validation(kwargs, match) -> None:
    args = {**dict(name="mixed-gaussian", parties=2, n=100), **kwargs}
    with pytest.raises(ValueError, match=match):
        load_vertical(args.pop("name"), args.pop("parties"), **args)


def test_vertical_data_container() -> None:
    a, b = np.zeros((3, 2)), np.full((3, 1), 0.5)
    v = VerticalData(blocks=(a, b), ids=np.array([7, 8, 9]), labels=None, name="t")
    assert v.x.shape == (3, 3) and v.widths == (2, 1) and v.n == 3 and not v.blocks[0].flags.writeable
    with pytest.raises(ValueError, match="blocks\\[1\\] must have 3 rows"):
        VerticalData(blocks=(a, np.zeros((2, 1))), ids=np.arange(3), labels=None, name="t")
    with pytest.raises(ValueError, match="ids must be unique, got 1 duplicate"):
        VerticalData(blocks=(a,), ids=np.array([1, 1, 2]), labels=None, name="t")
    with pytest.raises(ValueError, match=r"blocks\[0\] must lie in the domain \[-1, 1\], got 1 value"):
        VerticalData(blocks=(np.array([[2.0], [0.0], [0.0]]),), ids=np.arange(3), labels=None, name="t")
    with pytest.raises(ValueError, match=r"labels must have shape \(3,\)"):
        VerticalData(blocks=(a,), ids=np.arange(3), labels=np.zeros(2), name="t")


def test_check_unit_box() -> None:
    assert check_unit_box([[1.0, -1.0]]).shape == (1, 2)
    with pytest.raises(ValueError, match=r"y must lie in the domain \[-1, 1\], got 1 value\(s\) outside"):
        check_unit_box([[1.0, -1.0000001]])
