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
``"normbound"``
    Norm bounding at the server (Sun et al. 2019, "Can You Really Backdoor Federated Learning?"):
    each update ``Δ_k = w_k − w`` relative to the current global model ``w`` (``reference``) is
    clipped to ``‖Δ_k‖₂ ≤ clip_norm``, then ``w + Σ_k p_k Δ_k`` with FedAvg's ``p_k``.
``"bulyan"``
    Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018, Algorithm 1): Krum picks ``θ = K − 2f``
    updates one by one (each pick removed before the next); per coordinate, the mean of the
    ``β = θ − 2f`` selected values closest to their median. Weights are ignored.
``"centeredclip"``
    Centered clipping (Karimireddy, He, Jaggi, ICML 2021, eq. (CC)): in update space,
    ``v ← v + (1/K) Σ_k (Δ_k − v)·min(1, τ/‖Δ_k − v‖)`` for ``L = cc_iters`` iterations from
    ``v = cc_start`` (the server passes the previous round's aggregated update); returns ``w + v``.
    Weights are ignored (the paper's 1/K).

Assumptions on the number ``f = num_malicious`` of attackers among the ``K`` updates of a round
(:func:`assumption_violation` states them; :func:`aggregate` refuses a round that breaks one):
``fedavg`` none (it is the undefended baseline and runs with any ``f``); ``fedmedian``,
``normbound`` and ``centeredclip`` an honest majority ``f < K/2``; ``fedtrimmedavg``
``⌊trim_beta·K⌋ ≥ f``; ``krum`` and ``multikrum`` ``K > 2f + 2``; ``bulyan`` ``K ≥ 4f + 3``
(docs/robust_aggregation.md).

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

from fedpriv._validation import check_choice, check_int, check_positive

__all__ = ["AGGREGATORS", "FEDAVG_ROWS", "NEEDS_REFERENCE", "aggregate", "assumption_violation", "krum_scores", "validate_update"]

#: The aggregation rules :func:`aggregate` knows (the ``strategy`` config values).
AGGREGATORS: tuple[str, ...] = ("fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum", "normbound", "bulyan",
                                "centeredclip")
#: The rules that work on updates relative to the current global model (they need ``reference``).
NEEDS_REFERENCE: tuple[str, ...] = ("normbound", "centeredclip")


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


#: Rows FedAvg sums per float64 block: float64 accumulation without a float64 copy of the whole (K, d) block.
FEDAVG_ROWS = 256


def _check_updates(updates: Any, *, as_float64: bool = True, finite: bool = True) -> np.ndarray:
    """``updates`` checked (a finite real (K, d) array), converted to float64 unless ``as_float64`` is False.

    ``finite=False`` skips the finiteness pass for a caller whose result shows it (FedAvg's weighted sum is
    finite only if every row is: 0·inf is NaN) and who then calls :func:`_check_finite` where it is not.
    """
    if not isinstance(updates, np.ndarray):
        raise TypeError(f"updates must be a numpy array of shape (K, d), got {type(updates).__name__}")
    if not (np.issubdtype(updates.dtype, np.floating) or np.issubdtype(updates.dtype, np.integer)):
        raise TypeError(f"updates must be a real numeric array, got dtype {updates.dtype}")
    if updates.ndim != 2 or updates.shape[0] < 1 or updates.shape[1] < 1:
        raise ValueError(f"updates must have shape (K, d) with K >= 1 and d >= 1, got {updates.shape}")
    u = updates.astype(np.float64, copy=False) if as_float64 else updates
    return _check_finite(u) if finite else u


def _check_finite(u: np.ndarray) -> np.ndarray:
    """``u`` unchanged when every value is finite; else the rows holding NaN/inf, named."""
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


def _pairwise_sq_distances(updates: np.ndarray) -> np.ndarray:
    """Squared L2 distances between the rows, ``inf`` on the diagonal (a row is not its own neighbour).

    One Gram matrix, ``‖a‖² + ‖b‖² − 2a·b``, computed on the rows after subtracting their mean
    (distances are translation invariant; centring avoids cancellation when the rows are full model
    parameters far from the origin).
    """
    centred = updates - updates.mean(axis=0)
    sq = np.einsum("ij,ij->i", centred, centred)
    dist = sq[:, None] + sq[None, :] - 2.0 * (centred @ centred.T)
    np.maximum(dist, 0.0, out=dist)  # rounding can make tiny distances negative
    np.fill_diagonal(dist, np.inf)
    return dist


def krum_scores(updates: np.ndarray, num_malicious: int) -> np.ndarray:
    """Krum score of each row: sum of its ``K − f − 2`` smallest squared distances to the other rows.

    Parameters
    ----------
    updates : np.ndarray, shape (K, d), float64, finite
    num_malicious : int
        ``f``; requires ``K > 2f + 2``.

    Returns
    -------
    np.ndarray, shape (K,), float64
    """
    m = updates.shape[0] - num_malicious - 2
    return np.partition(_pairwise_sq_distances(updates), m - 1, axis=1)[:, :m].sum(axis=1)


def assumption_violation(strategy: str, k: int, num_malicious: int, trim_beta: float = 0.2) -> str | None:
    """Why rule ``strategy`` cannot tolerate ``num_malicious`` attackers among ``k`` updates, or ``None``.

    The conditions (module docstring; docs/robust_aggregation.md): ``fedavg`` none; ``fedmedian``,
    ``normbound``, ``centeredclip``: ``2f < K``; ``fedtrimmedavg``: ``⌊trim_beta·K⌋ ≥ f``;
    ``krum``, ``multikrum``: ``K > 2f + 2``; ``bulyan``: ``K ≥ 4f + 3``.
    """
    check_choice(strategy, "strategy", AGGREGATORS)
    k = check_int(k, "k", minimum=1)
    f = check_int(num_malicious, "num_malicious", minimum=0)
    head = f"{strategy} with num-malicious={f}"
    if strategy in ("fedmedian", "normbound", "centeredclip") and not 2 * f < k:
        return f"{head} needs an honest majority, 2*num_malicious < updates, i.e. more than {2 * f} updates, got {k}"
    if strategy == "fedtrimmedavg" and int(np.floor(float(trim_beta) * k)) < f:
        return (f"{head} needs floor(trim-beta * updates) >= num-malicious, got floor({trim_beta:g} * {k}) = "
                f"{int(np.floor(float(trim_beta) * k))} (raise trim-beta to at least {f}/{k} or lower num-malicious)")
    if strategy in ("krum", "multikrum") and k <= 2 * f + 2:
        return f"{head} needs more than 2*num_malicious + 2 = {2 * f + 2} updates, got {k}"
    if strategy == "bulyan" and k < 4 * f + 3:
        return f"{head} needs at least 4*num_malicious + 3 = {4 * f + 3} updates, got {k}"
    return None


def _bulyan(u: np.ndarray, f: int) -> np.ndarray:
    """Bulyan (module docstring): Krum selection of θ = K − 2f rows, then the β = θ − 2f values nearest the median."""
    k = u.shape[0]
    theta, beta = k - 2 * f, k - 4 * f
    dist = _pairwise_sq_distances(u)
    remaining = np.ones(k, dtype=bool)
    chosen = np.empty(theta, dtype=np.int64)
    for step in range(theta):  # one Krum pick per step over the rows not picked yet (El Mhamdi et al., Alg. 1)
        n_left = k - step
        m = min(max(n_left - f - 2, 1), n_left - 1)  # Krum's K − f − 2 neighbours, at least 1 (documented)
        if m == 0:  # one row left
            chosen[step] = int(np.flatnonzero(remaining)[0])
            break
        sub = dist[np.ix_(remaining, remaining)]
        scores = np.partition(sub, m - 1, axis=1)[:, :m].sum(axis=1)
        pick = int(np.flatnonzero(remaining)[np.argmin(scores)])  # ties: the lowest row index
        chosen[step] = pick
        remaining[pick] = False
    selected = u[np.sort(chosen)]
    med = np.median(selected, axis=0)
    nearest = np.argsort(np.abs(selected - med), axis=0, kind="stable")[:beta]  # ties: the lower row
    return np.take_along_axis(selected, nearest, axis=0).mean(axis=0)


def _centered_clip(deltas: np.ndarray, start: np.ndarray, tau: float, iters: int) -> np.ndarray:
    """``iters`` steps of v ← v + (1/K) Σ (Δ_k − v)·min(1, τ/‖Δ_k − v‖) from ``start`` (Karimireddy et al. 2021)."""
    v = start.copy()
    for _ in range(iters):
        diff = deltas - v
        norms = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        scale = np.minimum(1.0, tau / np.maximum(norms, np.finfo(np.float64).tiny))  # a zero difference: scale 1
        v = v + (scale[:, None] * diff).mean(axis=0)
    return v


def _check_vector(value: Any, name: str, d: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.shape != (d,) or not np.issubdtype(value.dtype, np.number):
        got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
        raise ValueError(f"{name} must be a numpy array of shape ({d},), got {got}")
    v = value.astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"{name} must be finite, got NaN/inf")
    return v


def _check_rule_parameters(trim_beta: Any, clip_norm: Any, cc_tau: Any, cc_iters: Any) -> int:
    """Validate the rules' scalar parameters; returns ``cc_iters`` as an int."""
    if isinstance(trim_beta, bool) or not isinstance(trim_beta, (int, float, np.floating)):
        raise TypeError(f"trim_beta must be a real number in [0, 0.5), got {trim_beta!r}")
    if not 0.0 <= float(trim_beta) < 0.5:
        raise ValueError(f"trim_beta must be in [0, 0.5), got {trim_beta!r}")
    check_positive(clip_norm, "clip_norm")
    check_positive(cc_tau, "cc_tau")
    return check_int(cc_iters, "cc_iters", minimum=1)


def aggregate(
    updates: np.ndarray,
    weights: np.ndarray,
    strategy: str,
    *,
    trim_beta: float = 0.2,
    num_malicious: int = 0,
    reference: np.ndarray | None = None,
    clip_norm: float = 1.0,
    cc_tau: float = 1.0,
    cc_iters: int = 1,
    cc_start: np.ndarray | None = None,
) -> np.ndarray:
    """Aggregate ``K`` flat client updates into one vector with rule ``strategy``.

    Parameters
    ----------
    updates : np.ndarray, shape (K, d)
        One finite flat parameter vector per client, in a fixed client order (the strategy sorts
        by client id). Any real dtype; computed in float64.
    weights : np.ndarray, shape (K,)
        Non-negative client weights with a positive sum (``num-examples`` or all ones); used by
        ``"fedavg"``, ``"multikrum"`` and ``"normbound"``, ignored by the others.
    strategy : str
        One of :data:`AGGREGATORS` (see the module docstring for the math).
    trim_beta : float (default: 0.2)
        ``"fedtrimmedavg"``: fraction in [0, 0.5) cut at each end, ``⌊trim_beta·K⌋`` values.
    num_malicious : int (default: 0)
        The assumed number ``f`` of Byzantine clients: Krum's, Multi-Krum's and Bulyan's ``f``,
        and the ``f`` every rule's assumption (:func:`assumption_violation`) is checked against.
    reference : np.ndarray of shape (d,) or None (default: None)
        The current global model ``w``; required by :data:`NEEDS_REFERENCE` (updates are ``w_k − w``).
    clip_norm : float (default: 1.0)
        ``"normbound"``: the L2 bound on each ``w_k − w``; > 0.
    cc_tau : float (default: 1.0)
        ``"centeredclip"``: the clipping radius τ > 0.
    cc_iters : int (default: 1)
        ``"centeredclip"``: the number ``L`` ≥ 1 of iterations.
    cc_start : np.ndarray of shape (d,) or None (default: None)
        ``"centeredclip"``: the start point in update space (``None``: zero, i.e. the current model).

    Returns
    -------
    np.ndarray, shape (d,), float64
        The aggregate.

    Raises
    ------
    ValueError
        Unknown ``strategy``, mis-shaped or non-finite inputs, a parameter out of range, or a round
        that breaks the rule's assumption on ``num_malicious`` (:func:`assumption_violation`).
    TypeError
        Non-numeric inputs.
    """
    check_choice(strategy, "strategy", AGGREGATORS)
    fedavg = strategy == "fedavg"
    u = _check_updates(updates, as_float64=not fedavg, finite=not fedavg)  # FedAvg: by block, finiteness by its sum
    k, d = u.shape
    w = _check_weights(weights, k)
    iters = _check_rule_parameters(trim_beta, clip_norm, cc_tau, cc_iters)
    f = check_int(num_malicious, "num_malicious", minimum=0)
    violation = assumption_violation(strategy, k, f, float(trim_beta))
    if violation is not None:
        raise ValueError(f"{violation} (lower num-malicious or raise min-clients)")
    if strategy in NEEDS_REFERENCE:
        if reference is None:
            raise ValueError(f"{strategy} needs reference, the current global model of shape ({d},), got None")
        ref = _check_vector(reference, "reference", d)
        deltas = u - ref

    if strategy == "fedavg":
        share = w / w.sum()
        out = np.zeros(d)
        for first in range(0, k, FEDAVG_ROWS):  # blocks of rows (not clients one by one): float64 sums in cache
            out += share[first:first + FEDAVG_ROWS] @ u[first:first + FEDAVG_ROWS].astype(np.float64, copy=False)
        if not np.isfinite(out).all() or (share == 0).any():  # a NaN/inf row made it so (named here), finite
            _check_finite(u)  # float64 rows overflowed, or a weight-0 row's NaN might not reach the sum
        return out
    if strategy == "fedmedian":
        return np.median(u, axis=0)
    if strategy == "fedtrimmedavg":
        cut = int(np.floor(float(trim_beta) * k))
        if cut == 0:
            return u.mean(axis=0)
        kept = np.partition(u, (cut, k - cut - 1), axis=0)[cut : k - cut]
        return kept.mean(axis=0)
    if strategy == "normbound":
        norms = np.sqrt(np.einsum("ij,ij->i", deltas, deltas))
        scale = np.minimum(1.0, float(clip_norm) / np.maximum(norms, np.finfo(np.float64).tiny))
        return ref + (w / w.sum()) @ (scale[:, None] * deltas)
    if strategy == "centeredclip":
        start = np.zeros(d) if cc_start is None else _check_vector(cc_start, "cc_start", d)
        return ref + _centered_clip(deltas, start, float(cc_tau), iters)
    if strategy == "bulyan":
        return _bulyan(u, f)
    scores = krum_scores(u, f)
    if strategy == "krum":
        return u[int(np.argmin(scores))].copy()
    chosen = np.sort(np.argsort(scores, kind="stable")[: k - f])
    wc = w[chosen]
    if wc.sum() <= 0:
        raise ValueError("multikrum selected only updates of weight 0; their weighted mean is undefined")
    return (wc / wc.sum()) @ u[chosen]
