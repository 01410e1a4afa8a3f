"""Vertically partitioned data for the k-means experiments (docs/vertical_kmeans.md §3.3, §15.1, A10, A11).

Guarantees:

* :class:`VerticalData` holds S column blocks of the same n users (rows aligned by ``ids``),
  every value in ``[−1, 1]``; :attr:`VerticalData.x` is the virtual global data, for
  simulation and evaluation only (no party ever sees it).
* :func:`normalize` is the per-attribute min–max map ``x' = 2(x − lo)/(hi − lo) − 1`` (§3.3),
  exact at the bounds, never clipping: a value outside ``[lo, hi]`` raises.
* :func:`split_columns` cuts contiguous blocks in column order (§15.1), evenly or by ratios.
* :func:`mixed_gaussian` is the §15.1 synthetic generator; it draws only from
  ``fedpriv.rng.stream(seed, 0, 0, "kmeans-data/mixed-gaussian")``.
* :func:`load_vertical` loads a named set (offline: the generator, scikit-learn's bundled sets, or
  a local CSV), normalizes and splits it. Nothing is downloaded.

Assumption [proposal, §3.3]: the bounds lo/hi are public. By default they are each column's
observed min/max, which is what the thesis's experiments do; a deployment that needs the
bounds to be data-independent passes them explicitly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_choice, check_int, check_positive
from fedpriv.data.files import read_user_text
from fedpriv.rng import stream

__all__ = [
    "VERTICAL_DATASETS",
    "VerticalData",
    "check_unit_box",
    "load_vertical",
    "mixed_gaussian",
    "normalize",
    "read_csv",
    "split_columns",
]

#: Names accepted by :func:`load_vertical`.
VERTICAL_DATASETS: tuple[str, ...] = ("mixed-gaussian", "digits", "wine", "breast_cancer", "iris", "csv")

#: Purpose of the keyed stream behind :func:`mixed_gaussian`.
MIXED_GAUSSIAN_PURPOSE = "kmeans-data/mixed-gaussian"


def check_unit_box(y: Any, name: str = "y") -> np.ndarray:
    """Return ``y`` as a finite non-empty 2-D float64 array after checking every value is in [−1, 1]."""
    arr = check_array(y, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows, attributes), got shape {arr.shape}")
    outside = int(np.count_nonzero(np.abs(arr) > 1.0))
    if outside:
        raise ValueError(
            f"{name} must lie in the domain [-1, 1], got {outside} value(s) outside it "
            f"(map the data first with fedpriv.data.vertical.normalize)"
        )
    return arr


@dataclass(frozen=True)
class VerticalData:
    """The same n users' attributes, held by S parties as column blocks.

    Parameters
    ----------
    blocks : tuple of ndarray, each of shape (n, m_l), float64
        Party l's columns, in global column order, values in ``[−1, 1]``.
    ids : ndarray of shape (n,), int64
        User ids, unique, in the same row order at every party.
    labels : ndarray of shape (n,), int64, or None
        Ground truth for the V-measure (generating component or the dataset's target).
    name : str
        Where the data came from.
    """

    blocks: tuple[np.ndarray, ...]
    ids: np.ndarray
    labels: np.ndarray | None
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, tuple) or not self.blocks:
            raise TypeError(f"blocks must be a non-empty tuple of 2-D arrays, got {type(self.blocks).__name__}")
        blocks = tuple(check_unit_box(b, f"blocks[{i}]") for i, b in enumerate(self.blocks))
        n = blocks[0].shape[0]
        for i, b in enumerate(blocks):
            if b.shape[0] != n:
                raise ValueError(f"blocks[{i}] must have {n} rows like blocks[0], got {b.shape[0]}")
        ids = np.asarray(self.ids)
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be an integer array of shape ({n},), got {ids.dtype} of shape {ids.shape}")
        if np.unique(ids).size != n:
            raise ValueError(f"ids must be unique, got {n - np.unique(ids).size} duplicate(s)")
        labels = self.labels
        if labels is not None:
            labels = np.asarray(labels)
            if labels.shape != (n,):
                raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
        for arr in (*blocks, ids, *(() if labels is None else (labels,))):
            arr.setflags(write=False)
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "ids", ids.astype(np.int64, copy=False))
        object.__setattr__(self, "labels", labels)

    @property
    def n(self) -> int:
        """Number of users."""
        return int(self.ids.shape[0])

    @property
    def parties(self) -> int:
        """Number of parties S."""
        return len(self.blocks)

    @property
    def widths(self) -> tuple[int, ...]:
        """Columns per party ``(m_1, ..., m_S)``."""
        return tuple(int(b.shape[1]) for b in self.blocks)

    @property
    def x(self) -> np.ndarray:
        """The virtual global data (n, m): simulation and evaluation only."""
        return np.hstack(self.blocks)


def _bounds(value: Any, default: np.ndarray, name: str) -> np.ndarray:
    """Per-column bound (m,) from a scalar, an (m,) array or None (the default)."""
    if value is None:
        return default
    arr = check_array(value, name)
    if arr.ndim > 1 or arr.size not in (1, default.size):
        raise ValueError(f"{name} must be a scalar or have shape ({default.size},), got shape {arr.shape}")
    return np.broadcast_to(arr, default.shape).astype(np.float64)


def normalize(x: np.ndarray, lo: Any = None, hi: Any = None) -> np.ndarray:
    """Per-attribute min–max map to [−1, 1] (§3.3); constant columns map to 0."""
    x = check_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D array (rows, attributes), got shape {x.shape}")
    lo_ = _bounds(lo, x.min(axis=0), "lo")
    hi_ = _bounds(hi, x.max(axis=0), "hi")
    if np.any(lo_ > hi_):
        j = int(np.argmax(lo_ > hi_))
        raise ValueError(f"lo must be <= hi in every column, got lo={lo_[j]!r} > hi={hi_[j]!r} in column {j}")
    outside = (x < lo_) | (x > hi_)
    if np.any(outside):
        raise ValueError(
            f"x must lie within the bounds [lo, hi], got {int(outside.sum())} value(s) outside them "
            f"(in {int(outside.any(axis=0).sum())} column(s))"
        )
    span = hi_ - lo_
    safe = np.where(span > 0, span, 1.0)
    return np.where(span > 0, 2.0 * (x - lo_) / safe - 1.0, 0.0)  # §3.3 map; constant column → 0


def split_columns(x: np.ndarray, parties: int, *, ratios: Sequence[int] | None = None) -> tuple[np.ndarray, ...]:
    """Contiguous column blocks in column order (§15.1): even, or ``m_l ∝ ratios[l]`` exactly."""
    x = check_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D array (rows, attributes), got shape {x.shape}")
    m = x.shape[1]
    parties = check_int(parties, "parties", minimum=1, maximum=m)
    if ratios is None:
        return tuple(np.array_split(x, parties, axis=1))  # the first m mod S blocks get one more column
    r = list(ratios) if isinstance(ratios, Sequence) and not isinstance(ratios, str) else None
    if r is None or len(r) != parties or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in r):
        raise ValueError(f"ratios must be {parties} positive integers (one per party), got {ratios!r}")
    total = int(sum(r))
    if any(m * int(v) % total for v in r):
        raise ValueError(
            f"ratios must divide the {m} columns exactly (m*ratio/sum(ratios) an integer for every party), "
            f"got {tuple(r)!r}"
        )
    widths = [m * int(v) // total for v in r]
    return tuple(np.split(x, np.cumsum(widths)[:-1], axis=1))


def mixed_gaussian(n: int = 20000, m: int = 8, k: int = 5, *, seed: int, r: float = 8.0) -> tuple[np.ndarray, np.ndarray]:
    """§15.1 synthetic data (n, m) in [−1, 1] and its generating-component labels (n,) int64.

    Centers uniform in ``[−(1−1/r), 1−1/r]^m``; per-coordinate std ``1/(r·√m)``; n/k points per
    center (the first ``n mod k`` components get one more); rows shuffled; then clipped to [−1, 1].
    """
    n = check_int(n, "n", minimum=1)
    m = check_int(m, "m", minimum=1)
    k = check_int(k, "k", minimum=1, maximum=n)
    seed = check_int(seed, "seed", minimum=0)
    r = check_positive(r, "r")
    if r <= 1:
        raise ValueError(f"r must be > 1 (centers lie in [-(1-1/r), 1-1/r]), got {r!r}")
    rng = stream(seed, 0, 0, MIXED_GAUSSIAN_PURPOSE)
    half = 1.0 - 1.0 / r
    centers = rng.uniform(-half, half, size=(k, m))
    labels = np.repeat(np.arange(k, dtype=np.int64), [len(a) for a in np.array_split(np.arange(n), k)])
    labels = labels[rng.permutation(n)]
    x = centers[labels] + rng.normal(0.0, 1.0 / (r * np.sqrt(m)), size=(n, m))
    return np.clip(x, -1.0, 1.0), labels  # A10: range forced to the box


def _sklearn_loader(name: str) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """The bundled scikit-learn loader for ``name`` (no download)."""
    import sklearn.datasets as skd

    fn = {"digits": skd.load_digits, "wine": skd.load_wine, "breast_cancer": skd.load_breast_cancer,
          "iris": skd.load_iris}[name]
    return lambda: fn(return_X_y=True)


def _parse_column(cells: np.ndarray, name: str, path: str) -> np.ndarray:
    """A CSV column as float64; non-numeric or missing cells raise with their count and first line."""
    try:
        values = cells.astype(np.float64)
    except ValueError:
        def bad(s: str) -> bool:
            try:
                float(s)
            except ValueError:
                return True
            return False

        mask = np.frompyfunc(bad, 1, 1)(cells).astype(bool)  # error path only
        raise ValueError(
            f"column {name!r} of {path} must be numeric, got {int(mask.sum())} non-numeric or empty "
            f"value(s) (first on line {int(np.argmax(mask)) + 2})"
        ) from None
    missing = ~np.isfinite(values)
    if np.any(missing):
        raise ValueError(
            f"column {name!r} of {path} must be finite, got {int(missing.sum())} NaN/inf value(s) "
            f"(first on line {int(np.argmax(missing)) + 2}); impute or drop them first"
        )
    return values


def read_csv(
    path: str | Path, *, columns: Sequence[str] | None = None, label_column: str | None = None, n: int | None = None
) -> tuple[np.ndarray, np.ndarray | None, tuple[str, ...]]:
    """Numeric attributes (n, m), optional labels (n,) int64 and column names from a headed CSV file."""
    path = str(path)
    reader = csv.reader(io.StringIO(read_user_text(path, "a CSV file with a header row", encoding="utf-8-sig"),
                                    newline=""))
    try:
        rows = list(reader)
    except csv.Error as exc:  # e.g. a field longer than the csv module's limit
        raise ValueError(f"{path}:{reader.line_num}: must be a CSV file with a header row, got a line the csv "
                         f"module cannot parse ({exc}); fix that line") from None
    if len(rows) < 2:
        raise ValueError(f"csv_path must name a CSV file with a header and at least one row, got {len(rows)} line(s)")
    header, body = rows[0], rows[1:]
    lengths = np.array([len(row) for row in body])
    if np.any(lengths != len(header)):
        first = int(np.argmax(lengths != len(header)))
        raise ValueError(
            f"every row of {path} must have {len(header)} fields like the header, got {lengths[first]} on line {first + 2}"
        )
    if n is not None:
        n = check_int(n, "n", minimum=1, maximum=len(body))
        body = body[:n]
    table = np.array(body, dtype=str).reshape(len(body), len(header))
    known = {c: i for i, c in enumerate(header)}
    if label_column is not None and label_column not in known:
        raise ValueError(f"label_column must be one of the CSV columns {header!r}, got {label_column!r}")
    names = tuple(c for c in header if c != label_column) if columns is None else tuple(columns)
    unknown = [c for c in names if c not in known]
    if unknown or not names or (label_column is not None and label_column in names):
        raise ValueError(
            f"columns must be a non-empty list of CSV columns other than the label column, from {header!r}, "
            f"got {list(names)!r}"
        )
    x = np.stack([_parse_column(table[:, known[c]], c, path) for c in names], axis=1)  # per column, not per cell
    labels = None
    if label_column is not None:
        raw = table[:, known[label_column]]
        empty = np.char.strip(raw) == ""
        if np.any(empty):
            raise ValueError(
                f"label column {label_column!r} of {path} must have no empty values, got {int(empty.sum())} "
                f"(first on line {int(np.argmax(empty)) + 2})"
            )
        labels = np.unique(raw, return_inverse=True)[1].astype(np.int64)
    return x, labels, names


def load_vertical(
    name: str,
    parties: int,
    *,
    seed: int = 0,
    n: int | None = None,
    ratios: Sequence[int] | None = None,
    csv_path: str | None = None,
    columns: Sequence[str] | None = None,
    label_column: str | None = None,
    m: int = 8,
    k: int = 5,
) -> VerticalData:
    """Load, normalize (§3.3, column min/max) and split by columns (§15.1) one vertical dataset.

    ``n`` keeps the first n rows (the generator draws exactly n; default 20,000 there).
    ``seed``, ``m`` (dimensions) and ``k`` (components) only affect ``"mixed-gaussian"``;
    ``csv_path``/``columns``/``label_column`` only ``"csv"``.
    """
    check_choice(name, "name", VERTICAL_DATASETS)
    if name != "csv" and (csv_path is not None or columns is not None or label_column is not None):
        raise ValueError(f"csv_path, columns and label_column apply only to name='csv', got name={name!r}")
    labels: np.ndarray | None
    if name == "mixed-gaussian":
        x, labels = mixed_gaussian(20000 if n is None else n, m, k, seed=seed)
    elif name == "csv":
        if csv_path is None:
            raise ValueError("csv_path must be given for name='csv', got None")
        x, labels, _ = read_csv(csv_path, columns=columns, label_column=label_column, n=n)
    else:
        x, labels = _sklearn_loader(name)()
        if n is not None:
            n = check_int(n, "n", minimum=1, maximum=x.shape[0])
            x, labels = x[:n], labels[:n]
        labels = np.asarray(labels, dtype=np.int64)
    m = x.shape[1]
    parties = check_int(parties, "parties", minimum=2, maximum=m)
    blocks = split_columns(normalize(x), parties, ratios=ratios)
    return VerticalData(blocks=blocks, ids=np.arange(x.shape[0], dtype=np.int64), labels=labels, name=name)
