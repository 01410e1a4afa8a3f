"""Frequency estimation with histogram encoding and HDR4ME per entry (docs/hdr4me.md §8, docs/ldp_mechanisms.md §8).

1. Attribute j with v_j categories is one-hot encoded; each user reports m of the k attributes
   (uniform without replacement) and perturbs **every** entry of each reported one-hot vector
   with budget ε/(2m) (two categories differ in two entries, so each attribute is ε/m-LDP and
   the report ε-LDP). Entries live in [0, 1]: SW runs natively there, the other mechanisms through
   the affine adapter x ↦ 2x − 1 (for Laplace this is Lap(2m/ε) added to the 0/1 entry).
2. The naive estimate f̂_jk is the mean of the perturbed entry over the r_j reporters of j.
3. Each entry is a Bernoulli(f_jk) "dimension"; its normal model uses the two value groups
   {0, 1} of clt_utility_analyzer §3.3 (equivalently the moment path with E[x] = E[x²] = f):
   δ = f·β(1) + (1 − f)·β(0), s² = f·v(1) + (1 − f)·v(0), σ² = s²/r_j.
4. HDR4ME / HDR4ME* is applied per entry with w = 1 (§5.3).
5. **Not in the sources, off by default:** projection of each attribute's estimate onto the
   probability simplex, or clipping to [0, 1] and renormalizing (``postprocess``).

Entries of all attributes are stored flat, attribute by attribute: entry ``offsets[j] + c`` is
category c of attribute j, ``V = Σ_j v_j`` entries in all. Everything is vectorized over users
(in chunks), attributes and entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_epsilon, check_int
from fedpriv.estimation.hdr4me import Recalibration, recalibrate
from fedpriv.mechanisms.adapter import AffineAdapter
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.mechanisms.protocol import sample_dimensions
from fedpriv.mechanisms.registry import get_mechanism

__all__ = [
    "FREQUENCY_MECHANISMS",
    "POSTPROCESS",
    "FrequencyAnalysis",
    "FrequencyEstimate",
    "FrequencyRecalibration",
    "analyze_frequencies",
    "clip_renormalize",
    "collect_frequencies",
    "entry_mechanism",
    "histogram_encode",
    "project_simplex",
    "recalibrate_frequencies",
    "true_frequencies",
]

#: Mechanisms usable per entry (pure ε-LDP; the Gaussian mechanism's (ε, δ) split over entries is not defined here).
FREQUENCY_MECHANISMS: tuple[str, ...] = ("laplace", "piecewise", "duchi", "square_wave")
#: Optional post-processing of each attribute's estimate (not in the sources; docs/hdr4me.md §8 item 4).
POSTPROCESS: tuple[str, ...] = ("none", "simplex", "clip-renormalize")

_CHUNK_CELLS = 20_000_000  # users per chunk · m · max v_j kept at or below ~2e7


# --------------------------------------------------------------------------------------------
# encoding and ground truth
# --------------------------------------------------------------------------------------------


def _layout(categories: Any, n_categories: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate (n, k) category ids against v_j; return (ids int64, v (k,), offsets (k+1,))."""
    cats = np.asarray(categories)
    if cats.ndim != 2 or cats.size == 0:
        raise ValueError(f"categories must be a non-empty 2-D array of shape (n, k), got shape {cats.shape}")
    if not np.issubdtype(cats.dtype, np.integer):
        raise TypeError(f"categories must hold integer category ids, got dtype {cats.dtype}")
    v, offsets = _sizes(n_categories, cats.shape[1])
    if np.any(cats < 0) or np.any(cats >= v[None, :]):
        raise ValueError("categories must lie in [0, n_categories[j]) for every attribute j")
    return cats.astype(np.int64), v, offsets


def _sizes(n_categories: Any, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """v_j (k,) from an int or a sequence, and the entry offsets (k+1,)."""
    arr = np.asarray(n_categories)
    if not np.issubdtype(arr.dtype, np.integer) or arr.ndim > 1 or np.any(arr < 1):
        raise ValueError(f"n_categories must be an int >= 1 or a 1-D sequence of them, got {n_categories!r}")
    if arr.ndim == 0:
        if k is None:
            raise ValueError("n_categories must be a sequence (one count per attribute) here")
        arr = np.full(k, int(arr))
    elif k is not None and arr.shape != (k,):
        raise ValueError(f"n_categories must have one entry per attribute ({k}), got {arr.shape[0]}")
    v = arr.astype(np.int64)
    return v, np.concatenate([[0], np.cumsum(v)])


def histogram_encode(categories: Any, n_categories: Any) -> np.ndarray:
    """One-hot encoding (n, Σv_j) float64 of (n, k) category ids, attribute blocks side by side (§8 item 1)."""
    cats, v, offsets = _layout(categories, n_categories)
    out = np.zeros((cats.shape[0], int(offsets[-1])))
    np.put_along_axis(out, cats + offsets[None, :-1], 1.0, axis=1)
    return out


def true_frequencies(categories: Any, n_categories: Any) -> np.ndarray:
    """Empirical frequency (Σv_j,) of every category over all users: the ground truth."""
    cats, v, offsets = _layout(categories, n_categories)
    return np.bincount((cats + offsets[None, :-1]).ravel(), minlength=int(offsets[-1])) / cats.shape[0]


# --------------------------------------------------------------------------------------------
# collection
# --------------------------------------------------------------------------------------------


def entry_mechanism(name: str, epsilon: float, m: int, **params: Any) -> Mechanism:
    """The per-entry mechanism on [0, 1] with budget ε/(2m) (docs/ldp_mechanisms.md §8 items 2–3)."""
    check_choice(name, "mechanism", FREQUENCY_MECHANISMS)
    m = check_int(m, "m", minimum=1)
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise ValueError("epsilon must be a scalar for frequency estimation (per-user budgets are not supported)")
    if name == "square_wave":
        params.setdefault("domain", "unit")  # SW runs natively on [0, 1]
    mech = get_mechanism(name, eps / (2.0 * m), **params)
    lo, hi = mech.input_domain
    if np.all(np.asarray(lo) == 0.0) and np.all(np.asarray(hi) == 1.0):
        return mech
    return AffineAdapter(mech, (0.0, 1.0))  # x ↦ 2x − 1 before, y ↦ (y + 1)/2 after


@dataclass(frozen=True)
class FrequencyEstimate:
    """Naive frequency estimates f̂ (V,), flat by attribute, with counts and the mechanism used.

    Attributes
    ----------
    freq : ndarray of shape (V,)
        f̂ per entry; an attribute nobody reported gets 1/v_j and is flagged in ``empty``.
    counts : ndarray of shape (k,)
        Reporters r_j per attribute.
    n_categories, offsets : ndarray of shape (k,), (k+1,)
        v_j and the entry offsets (entry ``offsets[j] + c`` is category c of attribute j).
    empty : ndarray of shape (k,)
        True where r_j = 0.
    mechanism : Mechanism
        The per-entry mechanism on [0, 1] (budget ε/(2m)).
    guarantee : Guarantee
        ε-LDP for one user's whole report.
    """

    freq: np.ndarray
    counts: np.ndarray
    n_categories: np.ndarray
    offsets: np.ndarray
    empty: np.ndarray
    mechanism: Mechanism
    guarantee: Guarantee

    @property
    def attribute(self) -> np.ndarray:
        """Attribute index (V,) of every entry."""
        return np.repeat(np.arange(self.n_categories.size), self.n_categories)


def collect_frequencies(
    categories: Any,
    n_categories: Any,
    mechanism: str,
    epsilon: float,
    m: int,
    rng: np.random.Generator,
    *,
    chunk_size: int | None = None,
    **params: Any,
) -> FrequencyEstimate:
    """Run histogram-encoded collection over all users and return the naive frequencies (§8 items 1–2).

    Parameters
    ----------
    categories : int ndarray of shape (n, k)
        Each user's category id per attribute.
    n_categories : int or sequence of k ints
        v_j per attribute.
    mechanism : {"laplace", "piecewise", "duchi", "square_wave"}
        Numeric mechanism applied to every entry; ``params`` are passed on to it.
    epsilon : float
        Each user's total budget ε; each entry gets ε/(2m).
    m : int
        Attributes each user reports, 1 ≤ m ≤ k.
    rng : numpy.random.Generator
        The stream all draws come from (attribute sampling and noise).
    chunk_size : int, optional
        Users per chunk (default: ⌊2e7 / (m · max v_j)⌋).
    """
    cats, v, offsets = _layout(categories, n_categories)
    n, k = cats.shape
    m = check_int(m, "m", minimum=1, maximum=k)
    mech = entry_mechanism(mechanism, epsilon, m, **params)
    vmax = int(v.max())
    c = check_int(chunk_size, "chunk_size", minimum=1) if chunk_size is not None else max(1, _CHUNK_CELLS // (m * vmax))
    slot = np.arange(vmax)
    sums = np.zeros(int(offsets[-1]))
    counts = np.zeros(k, dtype=np.int64)
    for start in range(0, n, c):  # loop over chunks of users; each chunk is vectorized
        stop = min(start + c, n)
        attrs = sample_dimensions(stop - start, k, m, rng)  # (c, m) reported attributes
        values = np.take_along_axis(cats[start:stop], attrs, axis=1)
        valid = slot[None, None, :] < v[attrs][:, :, None]  # (c, m, vmax): entries that exist
        onehot = (slot[None, None, :] == values[:, :, None])[valid].astype(np.float64)
        y = mech.perturb(onehot, rng)  # every entry of every reported vector, budget ε/(2m)
        entry = (offsets[attrs][:, :, None] + slot)[valid]
        sums += np.bincount(entry, weights=y, minlength=sums.size)
        counts += np.bincount(attrs.ravel(), minlength=k)
    empty = counts == 0
    r_entry = np.repeat(counts, v)
    freq = np.where(r_entry > 0, sums / np.maximum(r_entry, 1), 1.0 / np.repeat(v, v))
    eps = float(check_epsilon(epsilon))
    guarantee = Guarantee(
        epsilon=eps,
        scope=f"one user's histogram-encoded report of {m} of {k} attributes "
        f"(each entry ε/(2m); two categories differ in two entries)",
        holds=mech.guarantee.holds,
        note=mech.guarantee.note,
    )
    return FrequencyEstimate(freq=freq, counts=counts, n_categories=v, offsets=offsets, empty=empty,
                             mechanism=mech, guarantee=guarantee)


# --------------------------------------------------------------------------------------------
# analyzer moments (§8 item 3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrequencyAnalysis:
    """Normal model of every entry's deviation D = f̂ − f ~ N(δ, σ²), duck-compatible with ``AnalysisResult``.

    Attributes
    ----------
    delta, s2, sigma2, r : ndarray of shape (V,)
        Bias δ, average per-report variance s², σ² = s²/r and the reporters r used.
    prior : ndarray of shape (V,)
        The Bernoulli frequencies the moments were evaluated at.
    """

    delta: np.ndarray
    s2: np.ndarray
    sigma2: np.ndarray
    r: np.ndarray
    prior: np.ndarray

    @property
    def sigma(self) -> np.ndarray:
        """Standard deviation σ (V,)."""
        return np.sqrt(self.sigma2)


def analyze_frequencies(estimate: FrequencyEstimate, *, prior: Any = "uniform") -> FrequencyAnalysis:
    """Per-entry δ and σ² from the Bernoulli value groups {0, 1} (docs/hdr4me.md §8 item 3).

    ``prior`` gives the assumed frequencies: ``"uniform"`` (1/v_j, data-free, default),
    ``"estimate"`` (the naive f̂ clipped to [0, 1]) or an array (V,) in [0, 1]. Laplace and PM
    moments do not depend on it; SW's do. r_j is the observed count (at least 1 for empty attributes).
    """
    v = estimate.n_categories
    if isinstance(prior, str):
        check_choice(prior, "prior", ("uniform", "estimate"))
        f = 1.0 / np.repeat(v, v).astype(np.float64) if prior == "uniform" else np.clip(estimate.freq, 0.0, 1.0)
    else:
        f = np.asarray(prior, dtype=np.float64)
        if f.shape != estimate.freq.shape or not np.all((f >= 0) & (f <= 1)):
            raise ValueError(f"prior must be 'uniform', 'estimate' or an array of shape {estimate.freq.shape} "
                             f"in [0, 1], got {prior!r}")
    mech = estimate.mechanism
    ends = np.array([0.0, 1.0])
    beta0, beta1 = np.broadcast_to(mech.bias(ends), (2,))
    var0, var1 = np.broadcast_to(mech.var(ends), (2,))
    delta = f * beta1 + (1.0 - f) * beta0  # Lemma 3 with value groups {0, 1}: E[x] = E[x²] = f
    s2 = f * var1 + (1.0 - f) * var0
    r = np.repeat(np.maximum(estimate.counts, 1), v).astype(np.float64)
    return FrequencyAnalysis(delta=delta, s2=s2, sigma2=s2 / r, r=r, prior=f)


# --------------------------------------------------------------------------------------------
# re-calibration and optional post-processing
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrequencyRecalibration:
    """Re-calibrated frequencies (V,) and the per-entry HDR4ME diagnostics.

    ``postprocess`` names the optional, non-source step applied after HDR4ME (``"none"`` by default).
    """

    freq: np.ndarray
    recalibration: Recalibration
    postprocess: str


def recalibrate_frequencies(
    estimate: FrequencyEstimate,
    analysis: Any,
    *,
    mode: str = "hdr4me*",
    alpha: float = 0.95,
    l2_proxy: str = "domain",
    theta_bar: Any = None,
    postprocess: str = "none",
) -> FrequencyRecalibration:
    """HDR4ME / HDR4ME* per entry with w = 1 (§8 item 3), then optional ``postprocess`` (§8 item 4).

    ``postprocess``: ``"none"`` (default, as in the sources), ``"simplex"`` (Euclidean projection of
    each attribute onto the probability simplex) or ``"clip-renormalize"``; both are extensions.
    """
    check_choice(postprocess, "postprocess", POSTPROCESS)
    rec = recalibrate(estimate.freq, analysis, mode=mode, alpha=alpha, l2_proxy=l2_proxy, w=1.0,
                      theta_bar=theta_bar)
    if postprocess == "simplex":
        freq = project_simplex(rec.theta, estimate.n_categories)
    elif postprocess == "clip-renormalize":
        freq = clip_renormalize(rec.theta, estimate.n_categories)
    else:
        freq = np.array(rec.theta)
    return FrequencyRecalibration(freq=freq, recalibration=rec, postprocess=postprocess)


def _blocks(values: Any, n_categories: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Values (V,) laid out as a padded (k, max v) array: (values, v, offsets, mask of real entries)."""
    v, offsets = _sizes(n_categories)
    x = np.asarray(values, dtype=np.float64)
    if x.shape != (int(offsets[-1]),):
        raise ValueError(f"values must have shape ({int(offsets[-1])},) (one entry per category), got {x.shape}")
    mask = np.arange(int(v.max()))[None, :] < v[:, None]
    return x, v, offsets, mask


def project_simplex(values: Any, n_categories: Any) -> np.ndarray:
    """Euclidean projection of every attribute's block onto the probability simplex (extension, §8 item 4)."""
    x, v, offsets, mask = _blocks(values, n_categories)
    padded = np.full(mask.shape, -np.inf)
    padded[mask] = x
    u = -np.sort(-padded, axis=1)  # descending; padding (−∞) last
    css = np.cumsum(np.where(mask, u, 0.0), axis=1)  # mask works here too: the first v_j sorted slots are real
    rank = np.arange(1, mask.shape[1] + 1)
    positive = mask & (u - (css - 1.0) / rank > 0)  # sort-based projection (Duchi et al. 2008)
    rho = mask.shape[1] - 1 - np.argmax(positive[:, ::-1], axis=1)  # last index where it holds
    tau = (css[np.arange(v.size), rho] - 1.0) / (rho + 1)
    return np.maximum(padded - tau[:, None], 0.0)[mask]


def clip_renormalize(values: Any, n_categories: Any) -> np.ndarray:
    """Clip to [0, 1] and rescale every attribute to sum 1; an all-zero block becomes uniform (extension)."""
    x, v, offsets, _ = _blocks(values, n_categories)
    clipped = np.clip(x, 0.0, 1.0)
    totals = np.repeat(np.add.reduceat(clipped, offsets[:-1]), v)
    return np.where(totals > 0, clipped / np.where(totals > 0, totals, 1.0), 1.0 / np.repeat(v, v))
