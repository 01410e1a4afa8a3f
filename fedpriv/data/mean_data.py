"""Synthetic datasets of the HDR4ME mean-estimation experiments (docs/hdr4me.md "Experiment settings").

Every dimension lies in [-1, 1]. The sources leave the generation details open (Ambiguity 13);
the choices made here are in :data:`MEAN_DATASET_RESOLUTIONS` and travel with every
:class:`MeanDataset` in its ``resolutions`` dict, to be written into result files.

* ``"uniform"``: U[-1, 1] in every dimension.
* ``"gaussian"``: sd 1/16; 10% of the dimensions (round(0.1·d), chosen at random) have mean 0.9,
  the rest mean 0; values clipped to [-1, 1].
* ``"poisson"``: dimension j is Poisson(λ_j), λ_j uniform on the integers 1..99, min-max
  normalized per dimension to [-1, 1].
* ``"cov19-surrogate"``: **a surrogate, not COV-19**: a correlated low-rank Gaussian factor model
  (rank 16, 80% of each dimension's variance shared), scaled into [-1, 1] around random centres
  and clipped.

Memory: values are generated in float64 in row chunks from one keyed stream
``fedpriv.rng.stream(seed, 0, 0, f"mean-data/{name}")`` and written into an array of the requested
``dtype``. The default is float64; pass ``dtype=np.float32`` for the large settings (n = 1.5e5,
d = 750 is 450 MB in float32 instead of 900 MB). The float32 array is the float64 one rounded, the
draws are the same, and :func:`fedpriv.mechanisms.protocol.collect_mean` accepts either. Compute
the ground truth from the array actually used (:attr:`MeanDataset.theta_bar`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int
from fedpriv.rng import stream

__all__ = [
    "MEAN_DATASETS",
    "MEAN_DATASET_RESOLUTIONS",
    "MeanDataset",
    "make_mean_dataset",
    "mean_dataset",
    "zipf_categories",
]

#: Names accepted by :func:`mean_dataset`.
MEAN_DATASETS: tuple[str, ...] = ("uniform", "gaussian", "poisson", "cov19-surrogate")

_GAUSS_SD = 1.0 / 16.0
_GAUSS_HIGH_MEAN = 0.9
_GAUSS_HIGH_FRACTION = 0.1
_POISSON_LAMBDA_MAX = 99
_COV_RANK = 16
_COV_SHARED = 0.8  # fraction of each standardized dimension's variance carried by the factors
_COV_CENTRE = 0.5  # centres c_j ~ U[-0.5, 0.5]
_COV_SDS = 3.0  # ±3 sd of the factor model map onto the interval [c_j − (1−|c_j|), c_j + (1−|c_j|)]
_CHUNK_CELLS = 2**21  # rows per chunk = max(1, 2²¹ // d): fixed by d, so the draws never depend on memory

#: Resolutions of the unstated generation details (docs/hdr4me.md Ambiguity 13), by dataset.
MEAN_DATASET_RESOLUTIONS: dict[str, dict[str, str]] = {
    "uniform": {
        "distribution": "U[-1, 1] i.i.d. in every dimension [resolution]",
    },
    "gaussian": {
        "distribution": f"N(mu_j, {_GAUSS_SD}^2) i.i.d. per dimension",
        "means": f"round({_GAUSS_HIGH_FRACTION}*d) dimensions chosen uniformly at random have mean "
        f"{_GAUSS_HIGH_MEAN}, the others 0",
        "range": "values outside [-1, 1] are clipped [resolution]",
    },
    "poisson": {
        "distribution": "Poisson(lambda_j) i.i.d. per dimension",
        "lambda": f"lambda_j uniform on the integers 1..{_POISSON_LAMBDA_MAX} [resolution]",
        "range": "min-max normalized per dimension to [-1, 1] over the n users (a constant column maps to 0)",
    },
    "cov19-surrogate": {
        "surrogate": "SURROGATE for COV-19 (CORD-19), not the original data; label results as surrogate results",
        "model": f"g_ij = sqrt({_COV_SHARED}) * (l_j . f_i) + sqrt({1 - _COV_SHARED:.1f}) * e_ij with f_i ~ "
        f"N(0, I_{_COV_RANK}), e_ij ~ N(0, 1), l_j uniform unit vectors in R^{_COV_RANK} (g_ij ~ N(0, 1))",
        "range": f"x_ij = clip(c_j + (1 - |c_j|) * g_ij / {_COV_SDS:g}, -1, 1), c_j ~ U[-{_COV_CENTRE}, "
        f"{_COV_CENTRE}]",
        "dimensions": "any d is generated directly (no re-sampling of columns for d > 750)",
    },
}


@dataclass(frozen=True)
class MeanDataset:
    """A generated mean-estimation dataset and the choices behind it.

    Attributes
    ----------
    name : str
        One of :data:`MEAN_DATASETS`.
    x : ndarray of shape (n, d)
        Users' values in [-1, 1], dtype as requested.
    seed : int
        The run seed of the keyed stream.
    resolutions : dict of str to str
        How unstated details were resolved (record in result files; docs/hdr4me.md Ambiguity 13).
    params : dict of str to ndarray
        Per-dimension generation parameters (``"mean"`` for gaussian, ``"lambda"`` for poisson,
        ``"centre"`` for cov19-surrogate; empty for uniform).
    surrogate : bool
        True for ``"cov19-surrogate"``: results must be labelled as surrogate results.
    """

    name: str
    x: np.ndarray
    seed: int
    resolutions: dict[str, str]
    params: dict[str, np.ndarray] = field(default_factory=dict)
    surrogate: bool = False

    @property
    def theta_bar(self) -> np.ndarray:
        """The all-user mean (d,), float64, of the values as stored: the experiments' ground truth."""
        return self.x.mean(axis=0, dtype=np.float64)


def mean_dataset(name: str, n: int, d: int, seed: int, *, dtype: Any = np.float64) -> np.ndarray:
    """Users' values (n, d) in [-1, 1] of dataset ``name`` (see :func:`make_mean_dataset`)."""
    return make_mean_dataset(name, n, d, seed, dtype=dtype).x


def make_mean_dataset(name: str, n: int, d: int, seed: int, *, dtype: Any = np.float64) -> MeanDataset:
    """Generate dataset ``name`` with n users and d dimensions from the keyed stream of ``seed``.

    Parameters
    ----------
    name : {"uniform", "gaussian", "poisson", "cov19-surrogate"}
    n, d : int
        Users and dimensions, ≥ 1.
    seed : int
        Run seed; draws come from ``fedpriv.rng.stream(seed, 0, 0, f"mean-data/{name}")``.
    dtype : {numpy.float64, numpy.float32} (default: float64)
        Storage dtype; generation is always float64 and float32 only rounds the result.

    Examples
    --------
    >>> ds = make_mean_dataset("gaussian", 1000, 20, seed=0)
    >>> ds.x.shape, bool(ds.x.min() >= -1 and ds.x.max() <= 1)
    ((1000, 20), True)
    """
    name = check_choice(name, "name", MEAN_DATASETS)
    n = check_int(n, "n", minimum=1)
    d = check_int(d, "d", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be float64 or float32, got {dt.name!r}")
    rng = stream(seed, 0, 0, f"mean-data/{name}")
    rows, params = _GENERATORS[name](rng, d)  # per-dimension parameters first, then the rows
    x = np.empty((n, d), dtype=dt)
    chunk = max(1, _CHUNK_CELLS // d)
    for start in range(0, n, chunk):  # loop over row chunks only; each chunk is vectorized
        stop = min(start + chunk, n)
        x[start:stop] = rows(rng, stop - start)
    if name == "poisson":
        _minmax_inplace(x)
    return MeanDataset(name=name, x=x, seed=seed, resolutions=dict(MEAN_DATASET_RESOLUTIONS[name]),
                       params=params, surrogate=name == "cov19-surrogate")


# --------------------------------------------------------------------------------------------
# generators: each returns (rows(rng, k) -> (k, d) float64, per-dimension params)
# --------------------------------------------------------------------------------------------

Rows = Callable[[np.random.Generator, int], np.ndarray]


def _uniform(rng: np.random.Generator, d: int) -> tuple[Rows, dict[str, np.ndarray]]:
    return (lambda g, k: g.uniform(-1.0, 1.0, (k, d))), {}


def _gaussian(rng: np.random.Generator, d: int) -> tuple[Rows, dict[str, np.ndarray]]:
    mean = np.zeros(d)
    mean[rng.permutation(d)[: int(round(_GAUSS_HIGH_FRACTION * d))]] = _GAUSS_HIGH_MEAN
    return (lambda g, k: np.clip(g.normal(mean, _GAUSS_SD, (k, d)), -1.0, 1.0)), {"mean": mean}


def _poisson(rng: np.random.Generator, d: int) -> tuple[Rows, dict[str, np.ndarray]]:
    lam = rng.integers(1, _POISSON_LAMBDA_MAX, size=d, endpoint=True).astype(np.float64)
    return (lambda g, k: g.poisson(lam, (k, d)).astype(np.float64)), {"lambda": lam}


def _cov19_surrogate(rng: np.random.Generator, d: int) -> tuple[Rows, dict[str, np.ndarray]]:
    loadings = rng.normal(size=(d, _COV_RANK))
    loadings /= np.linalg.norm(loadings, axis=1, keepdims=True)  # unit rows: l_j·f ~ N(0, 1)
    centre = rng.uniform(-_COV_CENTRE, _COV_CENTRE, d)
    half = (1.0 - np.abs(centre)) / _COV_SDS
    a, b = np.sqrt(_COV_SHARED), np.sqrt(1.0 - _COV_SHARED)

    def rows(g: np.random.Generator, k: int) -> np.ndarray:
        z = a * (g.normal(size=(k, _COV_RANK)) @ loadings.T) + b * g.normal(size=(k, d))
        return np.clip(centre + half * z, -1.0, 1.0)

    return rows, {"centre": centre}


_GENERATORS: dict[str, Callable[[np.random.Generator, int], tuple[Rows, dict[str, np.ndarray]]]] = {
    "uniform": _uniform,
    "gaussian": _gaussian,
    "poisson": _poisson,
    "cov19-surrogate": _cov19_surrogate,
}


def _minmax_inplace(x: np.ndarray) -> None:
    """Map each column's [min, max] onto [-1, 1] in place (a constant column becomes 0)."""
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = hi - lo
    chunk = max(1, _CHUNK_CELLS // x.shape[1])
    for start in range(0, x.shape[0], chunk):
        block = x[start:start + chunk]
        block -= lo
        np.divide(2.0 * block, span, out=block, where=span > 0)
        block -= np.where(span > 0, 1.0, 0.0).astype(x.dtype)


# --------------------------------------------------------------------------------------------
# categorical data for the frequency variant (docs/hdr4me.md §8)
# --------------------------------------------------------------------------------------------


def zipf_categories(
    n: int, n_attributes: int, n_categories: int, seed: int, *, exponent: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Categorical data with Zipf frequencies f_k ∝ k^(−exponent) (categories permuted per attribute).

    Returns ``(categories, frequencies)``: int64 (n, n_attributes) values in [0, n_categories) and the
    generating frequencies (n_attributes, n_categories). Draws come from
    ``fedpriv.rng.stream(seed, 0, 0, "mean-data/zipf")``.
    """
    n = check_int(n, "n", minimum=1)
    k = check_int(n_attributes, "n_attributes", minimum=1)
    v = check_int(n_categories, "n_categories", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    if not (np.isfinite(exponent) and exponent >= 0):
        raise ValueError(f"exponent must be >= 0 and finite, got {exponent!r}")
    rng = stream(seed, 0, 0, "mean-data/zipf")
    base = np.arange(1, v + 1, dtype=np.float64) ** -float(exponent)
    base /= base.sum()
    order = np.argsort(rng.random((k, v)), axis=1)  # a random permutation of the ranks per attribute
    freqs = base[order]
    cdf = np.cumsum(freqs, axis=1)
    u = rng.random((n, k))
    cats = (u[:, :, None] > cdf[None, :, :-1]).sum(axis=2)  # inverse cdf, vectorized over users and attributes
    return cats.astype(np.int64), freqs

