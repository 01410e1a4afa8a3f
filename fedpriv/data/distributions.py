"""Datasets of the numerical-distribution task: one value in [0, 1] per user (docs/square_wave_ems.md §10).

Guarantees
----------
* Every generated value lies in [0, 1] and the same ``(name, n, seed)`` gives the same bits in any
  process: draws come from the keyed stream ``fedpriv.rng.stream(seed, 0, 0,
  f"distribution-data/{name}")`` only (docs/design.md §4).
* :func:`load_column` rescales a user's CSV column with **public** bounds ``[lo, hi]`` given by the
  caller, never with the data's own min/max (bounds read off the data would leak through every
  report); values outside the bounds raise, naming how many, and are never clipped or dropped.

Datasets (:data:`DISTRIBUTION_DATASETS`; the choices are in :data:`DISTRIBUTION_RESOLUTIONS`)
------------------------------------------------------------------------------------------------
* ``"beta-5-2"``: Beta(5, 2), the synthetic dataset of §10 (n = 100 000, d = 256 there).
* ``"uniform"``: U[0, 1]; the flat shape, where the smoothing of EMS is exact and every method's
  error is noise alone (a sanity baseline).
* ``"bimodal"``: ½·Beta(6, 14) + ½·Beta(14, 6), two smooth peaks at 0.3 and 0.7 with a trough
  between them; a smooth multi-peaked shape standing in for §10's Taxi pick-up times (morning and
  evening peaks), which cannot be downloaded here. **Not** the Taxi data.
* ``"income-like"``: a spiky surrogate for §10's Income data (ACS, **not** the ACS data): a
  log-normal income (median $40 000, σ_log = 0.8) truncated to [0, 2¹⁹) by inverse-CDF sampling;
  60% of users round it to the nearest $10 000, 20% to the nearest $1 000, 20% report it to the
  dollar, then it is divided by 2¹⁹ as §10 prescribes. The round amounts make the histogram spiky,
  which is what §10 says distinguishes Income from the smooth datasets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_choice, check_int
from fedpriv.data.vertical import read_csv
from fedpriv.rng import stream

__all__ = [
    "DISTRIBUTION_DATASETS",
    "DISTRIBUTION_RESOLUTIONS",
    "load_column",
    "make_distribution",
    "true_histogram",
]

#: Names accepted by :func:`make_distribution`.
DISTRIBUTION_DATASETS: tuple[str, ...] = ("beta-5-2", "uniform", "bimodal", "income-like")

_INCOME_CAP = 2.0**19  # §10: keep incomes < 524 288 = 2^19 and divide by 2^19
_INCOME_MEDIAN = 40_000.0
_INCOME_SIGMA = 0.8
_INCOME_ROUNDING = ((0.6, 10_000.0), (0.2, 1_000.0), (0.2, 1.0))  # (share of users, rounding unit)

#: How the details §10 leaves open (or cannot ship) were resolved, by dataset.
DISTRIBUTION_RESOLUTIONS: dict[str, dict[str, str]] = {
    "beta-5-2": {"distribution": "Beta(5, 2) on [0, 1] (docs/square_wave_ems.md §10)"},
    "uniform": {"distribution": "U[0, 1] [resolution: flat sanity baseline]"},
    "bimodal": {
        "distribution": "0.5 Beta(6, 14) + 0.5 Beta(14, 6), component chosen per user with probability 1/2",
        "surrogate": "smooth two-peaked stand-in for the Taxi pick-up times of docs/square_wave_ems.md §10, NOT the "
                     "Taxi data",
    },
    "income-like": {
        "distribution": f"LogNormal(log {_INCOME_MEDIAN:g}, {_INCOME_SIGMA}) dollars truncated to "
        f"[0, 2^19) by inverse-CDF sampling",
        "rounding": "60% of users round to the nearest 10000, 20% to the nearest 1000, 20% keep the dollar "
        "amount (a rounded 2^19 - 1 stays below 2^19)",
        "scale": "divided by 2^19 (docs/square_wave_ems.md §10)",
        "surrogate": "spiky stand-in for the ACS Income data of docs/square_wave_ems.md §10, NOT the ACS data",
    },
}


def make_distribution(name: str, n: int, *, seed: int = 0) -> np.ndarray:
    """Users' values (n,) in [0, 1] of dataset ``name``, from ``stream(seed, 0, 0, "distribution-data/<name>")``.

    Examples
    --------
    >>> v = make_distribution("beta-5-2", 1000, seed=0)
    >>> v.shape, bool(v.min() >= 0.0 and v.max() <= 1.0)
    ((1000,), True)
    """
    name = check_choice(name, "name", DISTRIBUTION_DATASETS)
    n = check_int(n, "n", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    return _GENERATORS[name](stream(seed, 0, 0, f"distribution-data/{name}"), n)


def _beta_5_2(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.beta(5.0, 2.0, n)


def _uniform(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n)


def _bimodal(rng: np.random.Generator, n: int) -> np.ndarray:
    low = rng.random(n) < 0.5
    return np.where(low, rng.beta(6.0, 14.0, n), rng.beta(14.0, 6.0, n))


def _income_like(rng: np.random.Generator, n: int) -> np.ndarray:
    from scipy.stats import lognorm  # here: only income-like data need SciPy

    dist = lognorm(s=_INCOME_SIGMA, scale=_INCOME_MEDIAN)
    dollars = dist.ppf(rng.random(n) * dist.cdf(_INCOME_CAP))  # truncated to [0, 2^19) without rejection
    shares = np.cumsum([share for share, _ in _INCOME_ROUNDING])
    unit = np.array([u for _, u in _INCOME_ROUNDING])[np.searchsorted(shares, rng.random(n) * shares[-1], "right")]
    rounded = np.round(dollars / unit) * unit
    rounded = np.where(rounded >= _INCOME_CAP, rounded - unit, rounded)  # 2^19 itself is outside §10's range
    return rounded / _INCOME_CAP


_GENERATORS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "beta-5-2": _beta_5_2,
    "uniform": _uniform,
    "bimodal": _bimodal,
    "income-like": _income_like,
}


def load_column(csv_path: str | Path, column: str, *, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """One numeric column of a headed CSV file rescaled to [0, 1] as ``(v − lo)/(hi − lo)``.

    ``lo`` and ``hi`` are the attribute's public bounds (default 0 and 1: the column is already in
    [0, 1]). Values outside ``[lo, hi]`` raise with their count; missing, non-numeric, NaN or
    infinite cells raise with their count and first line number (header = line 1). Filter the file
    first where §10 keeps a sub-range (e.g. incomes < 2¹⁹).
    """
    lo_f = 0.0 if lo is None else _finite(lo, "lo")
    hi_f = 1.0 if hi is None else _finite(hi, "hi")
    if not hi_f > lo_f:
        raise ValueError(f"hi must be > lo (public bounds of the column), got lo={lo_f!r}, hi={hi_f!r}")
    if not isinstance(column, str) or not column:
        raise TypeError(f"column must be a non-empty column name, got {column!r}")
    values = read_csv(csv_path, columns=[column])[0][:, 0]
    outside = (values < lo_f) | (values > hi_f)
    if np.any(outside):
        lines = np.flatnonzero(outside)[:5] + 2
        raise ValueError(
            f"column {column!r} of {csv_path} must lie in the public bounds [lo, hi] = [{lo_f:g}, {hi_f:g}], got "
            f"{int(outside.sum())} value(s) outside (lines {', '.join(map(str, lines))}"
            f"{', ...' if outside.sum() > 5 else ''}; min {values.min():g}, max {values.max():g}); pass wider "
            f"public bounds or filter the file first (values are never clipped)"
        )
    return (values - lo_f) / (hi_f - lo_f)


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number (a public bound of the column), got {value!r}")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def true_histogram(values: Any, d: int) -> np.ndarray:
    """The normalized d-bucket histogram of values in [0, 1]: value v goes to bucket min(⌊v·d⌋, d − 1) (§0)."""
    d = check_int(d, "d", minimum=1)
    v = check_array(values, "values")
    if v.ndim != 1:
        raise ValueError(f"values must be a 1-D array (one value per user), got shape {v.shape}")
    outside = (v < 0.0) | (v > 1.0)
    if np.any(outside):
        raise ValueError(
            f"values must lie in [0, 1], got {int(outside.sum())} value(s) outside (min {v.min():g}, max {v.max():g}); "
            f"rescale with public bounds first (load_column)"
        )
    idx = np.minimum((v * d).astype(np.int64), d - 1)  # §0 bucket convention
    return np.bincount(idx, minlength=d) / v.size
