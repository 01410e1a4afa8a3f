"""Server-side aggregation of client updates: FedAvg and the robust rules (no Flower import).

One pure function, :func:`aggregate`, turns the stacked flat client updates of a round into the
new global parameter vector; the Flower strategy (``strategies/``) and the fast engine both call
it, so the two runtimes aggregate identically. Everything runs in float64, vectorized over the
``K`` clients (no Python loop over clients or coordinates).

Rules (``strategy``, the ``strategy`` key of :class:`fedpriv.config.RunConfig`):

``"fedavg"``
    Weighted mean ``Σ_k p_k w_k`` with ``p_k = weights_k / Σ_j weights_j``
    (docs/federated_ldp_sgd.md §2 step 5; McMahan et al. 2017).
``"fedmedian"``
    Coordinate-wise median (Yin et al. 2018). Weights are ignored, as in Flower's ``FedMedian``.
``"fedtrimmedavg"``
    Coordinate-wise trimmed mean: per coordinate, drop the ``⌊trim_beta·K⌋`` smallest and
    largest values and average the rest (Yin et al. 2018; equal to
    ``scipy.stats.trim_mean(updates, trim_beta, axis=0)``). Weights are ignored.
``"krum"``
    Krum (Blanchard et al. 2017, "Machine Learning with Adversaries"): with ``f = num_malicious``,
    the score of update ``i`` is the sum of its squared L2 distances to its ``K − f − 2`` nearest
    other updates; the update with the lowest score is returned (ties: the lowest row index).
    Requires ``K > 2f + 2``.
``"multikrum"``
    Multi-Krum (same paper, §5): the ``K − f`` updates with the lowest Krum scores are averaged
    with their ``weights`` renormalised over the selection (uniform weights give Blanchard's plain
    mean; ``num_examples`` weights give FedAvg over the selection, as Flower's ``MultiKrum``).

:func:`validate_update` says why a single client vector must be rejected (wrong shape, NaN/inf)
before it is stacked; the strategy drops and reports such replies, never averages them in.

Examples
--------
>>> import numpy as np
>>> from fedpriv.federated.aggregate import aggregate
>>> u = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 50.0]])
>>> aggregate(u, np.array([1.0, 1.0, 2.0]), "fedavg")
array([ 2.5, 26. ])
>>> aggregate(u, np.ones(3), "fedmedian")
array([2., 3.])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int

__all__ = ["AGGREGATORS", "aggregate", "krum_scores", "validate_update"]

#: The aggregation rules :func:`aggregate` knows (the ``strategy`` config values).
AGGREGATORS: tuple[str, ...] = ("fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum")


def validate_update(vec: Any, expected_d: int) -> str | None:
    """Why a client's flat update must be rejected, or ``None`` when it is usable.

    Parameters
    ----------
    vec : array_like
        The client's update; must be a 1-D floating-point array of length ``expected_d``.
    expected_d : int
        Number of model parameters the server broadcast.

    Returns
    -------
    str or None
        A one-line reason (``"wrong shape: expected (d,), got (…)"``, ``"3 NaN/inf value(s)"``,
        ...) or ``None``.
    """
    expected_d = check_int(expected_d, "expected_d", minimum=1)
    if not isinstance(vec, np.ndarray):
        return f"not a numpy array: got {type(vec).__name__}"
    if not np.issubdtype(vec.dtype, np.floating):
        return f"wrong dtype: expected a floating-point array, got {vec.dtype}"
    if vec.shape != (expected_d,):
        return f"wrong shape: expected ({expected_d},), got {vec.shape}"
    finite = np.isfinite(vec)
    if not finite.all():
        n_nan = int(np.isnan(vec).sum())
        n_inf = int(vec.size - finite.sum() - n_nan)
        return f"non-finite values: {n_nan} NaN and {n_inf} inf of {vec.size}"
    return None


def _check_updates(updates: Any) -> np.ndarray:
    if not isinstance(updates, np.ndarray):
        raise TypeError(f"updates must be a numpy array of shape (K, d), got {type(updates).__name__}")
    if not (np.issubdtype(updates.dtype, np.floating) or np.issubdtype(updates.dtype, np.integer)):
        raise TypeError(f"updates must be a real numeric array, got dtype {updates.dtype}")
    if updates.ndim != 2 or updates.shape[0] < 1 or updates.shape[1] < 1:
        raise ValueError(f"updates must have shape (K, d) with K >= 1 and d >= 1, got {updates.shape}")
    u = updates.astype(np.float64, copy=False)
    if not np.isfinite(u).all():
        bad = np.unique(np.nonzero(~np.isfinite(u))[0])
        raise ValueError(
            f"updates must be finite, got NaN/inf in row(s) {bad.tolist()[:10]} "
            "(reject such clients first, e.g. with validate_update)"
        )
    return u


def _check_weights(weights: Any, k: int) -> np.ndarray:
    if not isinstance(weights, np.ndarray):
        weights = np.asarray(weights)
    if weights.dtype == bool or not (np.issubdtype(weights.dtype, np.floating) or np.issubdtype(weights.dtype, np.integer)):
        raise TypeError(f"weights must be a real numeric array, got dtype {weights.dtype}")
    if weights.shape != (k,):
        raise ValueError(f"weights must have shape ({k},) (one per update), got {weights.shape}")
    w = weights.astype(np.float64)
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"weights must be finite and >= 0, got {w[~(np.isfinite(w) & (w >= 0))][0]!r}")
    if w.sum() <= 0:
        raise ValueError("weights must have a positive sum, got all zeros")
    return w


def krum_scores(updates: np.ndarray, num_malicious: int) -> np.ndarray:
    """Krum score of each row: sum of its ``K − f − 2`` smallest squared distances to the other rows.

    Pairwise squared distances come from one Gram matrix, ``‖a‖² + ‖b‖² − 2a·b``, computed on
    the rows after subtracting their mean (distances are translation invariant; centring avoids
    cancellation when the rows are full model parameters far from the origin).

    Parameters
    ----------
    updates : np.ndarray, shape (K, d), float64, finite
    num_malicious : int
        ``f``; requires ``K > 2f + 2``.

    Returns
    -------
    np.ndarray, shape (K,), float64
    """
    k = updates.shape[0]
    m = k - num_malicious - 2
    centred = updates - updates.mean(axis=0)
    sq = np.einsum("ij,ij->i", centred, centred)
    dist = sq[:, None] + sq[None, :] - 2.0 * (centred @ centred.T)
    np.maximum(dist, 0.0, out=dist)  # rounding can make tiny distances negative
    np.fill_diagonal(dist, np.inf)  # a row is not its own neighbour
    return np.partition(dist, m - 1, axis=1)[:, :m].sum(axis=1)


def aggregate(
    updates: np.ndarray,
    weights: np.ndarray,
    strategy: str,
    *,
    trim_beta: float = 0.2,
    num_malicious: int = 0,
) -> np.ndarray:
    """Aggregate ``K`` flat client updates into one vector with rule ``strategy``.

    Parameters
    ----------
    updates : np.ndarray, shape (K, d)
        One finite flat parameter vector per client, in a fixed client order (the strategy sorts
        by client id). Any real dtype; computed in float64.
    weights : np.ndarray, shape (K,)
        Non-negative client weights with a positive sum (``num-examples`` or all ones); used by
        ``"fedavg"`` and ``"multikrum"``, ignored by the coordinate-wise rules and ``"krum"``.
    strategy : str
        One of :data:`AGGREGATORS` (see the module docstring for the math).
    trim_beta : float (default: 0.2)
        ``"fedtrimmedavg"``: fraction in [0, 0.5) cut at each end, ``⌊trim_beta·K⌋`` values.
    num_malicious : int (default: 0)
        ``"krum"``/``"multikrum"``: the assumed number ``f`` of Byzantine clients; ``K > 2f + 2``.

    Returns
    -------
    np.ndarray, shape (d,), float64
        The aggregate.

    Raises
    ------
    ValueError
        Unknown ``strategy``, mis-shaped or non-finite ``updates``/``weights``, ``trim_beta``
        outside [0, 0.5), or too few updates for Krum (``K <= 2f + 2``).
    TypeError
        Non-numeric inputs.
    """
    check_choice(strategy, "strategy", AGGREGATORS)
    u = _check_updates(updates)
    k = u.shape[0]
    w = _check_weights(weights, k)
    if isinstance(trim_beta, bool) or not isinstance(trim_beta, (int, float, np.floating)):
        raise TypeError(f"trim_beta must be a real number in [0, 0.5), got {trim_beta!r}")
    if not 0.0 <= float(trim_beta) < 0.5:
        raise ValueError(f"trim_beta must be in [0, 0.5), got {trim_beta!r}")
    f = check_int(num_malicious, "num_malicious", minimum=0)

    if strategy == "fedavg":
        return (w / w.sum()) @ u
    if strategy == "fedmedian":
        return np.median(u, axis=0)
    if strategy == "fedtrimmedavg":
        cut = int(np.floor(float(trim_beta) * k))
        if cut == 0:
            return u.mean(axis=0)
        kept = np.partition(u, (cut, k - cut - 1), axis=0)[cut : k - cut]
        return kept.mean(axis=0)
    # krum / multikrum
    if k <= 2 * f + 2:
        raise ValueError(
            f"{strategy} needs more than 2*num_malicious + 2 = {2 * f + 2} updates, got {k} "
            "(lower num-malicious or raise min-clients)"
        )
    scores = krum_scores(u, f)
    if strategy == "krum":
        return u[int(np.argmin(scores))].copy()
    chosen = np.sort(np.argsort(scores, kind="stable")[: k - f])
    wc = w[chosen]
    if wc.sum() <= 0:
        raise ValueError("multikrum selected only updates of weight 0; their weighted mean is undefined")
    return (wc / wc.sum()) @ u[chosen]
