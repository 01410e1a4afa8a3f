"""Server-side aggregation of client updates: FedAvg and the robust rules (no Flower import).

One pure function, :func:`aggregate`, turns the stacked flat client updates of a round into the
new global parameter vector; the Flower strategy (``strategies/``) and the fast engine both call
it, so the two runtimes aggregate identically. Everything runs in float64, vectorized over the
``K`` clients (no Python loop over clients or coordinates).

The rules (``strategy``) are registered objects, one module each in :mod:`fedpriv.federated.rules`
(its package docstring lists them; docs/robust_aggregation.md has their math, sources and
assumptions); :data:`AGGREGATORS` is the live view of their names, and
:func:`fedpriv.federated.rules.register_rule` adds one. Each rule states its assumption on the
number ``f = num_malicious`` of attackers among the ``K`` updates of a round
(:func:`assumption_violation`); :func:`aggregate` refuses a round that breaks it.

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

from fedpriv._validation import check_int
from fedpriv.federated.rules.fedavg import FEDAVG_ROWS, check_finite
from fedpriv.federated.rules.krum import krum_scores
from fedpriv.federated.rules.registry import NEEDS_REFERENCE, RULES, get_rule, rule_parameters
from fedpriv.registry import Names

__all__ = ["AGGREGATORS", "FEDAVG_ROWS", "NEEDS_REFERENCE", "aggregate", "assumption_violation", "krum_scores",
           "validate_update"]

#: The aggregation rules :func:`aggregate` knows (the ``strategy`` config values): a live view of the registry.
AGGREGATORS: Names = RULES.names


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


def _check_updates(updates: Any, *, as_float64: bool = True) -> np.ndarray:
    """``updates`` checked (a real (K, d) array), converted to float64 and checked finite unless ``as_float64`` is False.

    ``as_float64=False`` is for a rule that takes the updates as given (:attr:`AggregationRule.raw_updates`)
    and checks their finiteness itself (FedAvg's weighted sum is finite only if every row is: 0·inf is NaN).
    """
    if not isinstance(updates, np.ndarray):
        raise TypeError(f"updates must be a numpy array of shape (K, d), got {type(updates).__name__}")
    if not (np.issubdtype(updates.dtype, np.floating) or np.issubdtype(updates.dtype, np.integer)):
        raise TypeError(f"updates must be a real numeric array, got dtype {updates.dtype}")
    if updates.ndim != 2 or updates.shape[0] < 1 or updates.shape[1] < 1:
        raise ValueError(f"updates must have shape (K, d) with K >= 1 and d >= 1, got {updates.shape}")
    return check_finite(updates.astype(np.float64, copy=False)) if as_float64 else updates


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


def _check_vector(value: Any, name: str, d: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.shape != (d,) or not np.issubdtype(value.dtype, np.number):
        got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
        raise ValueError(f"{name} must be a numpy array of shape ({d},), got {got}")
    v = value.astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"{name} must be finite, got NaN/inf")
    return v


def _rule_arguments(strategy: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every given parameter checked by the rule that declares it; the chosen rule's own, with defaults filled in."""
    declared = rule_parameters()
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise TypeError(f"aggregate() got unknown parameter(s) {', '.join(unknown)}; the registered rules take "
                        f"{', '.join(declared) or 'none'}")
    checked = {keyword: declared[keyword].check(value, keyword) for keyword, value in given.items()}
    own = get_rule(strategy).parameters
    return {keyword: checked[keyword] if keyword in checked else p.check(p.default, keyword)
            for keyword, p in own.items()}


def assumption_violation(strategy: str, k: int, num_malicious: int, trim_beta: float = 0.2,
                         **params: Any) -> str | None:
    """Why rule ``strategy`` cannot tolerate ``num_malicious`` attackers among ``k`` updates, or ``None``.

    ``trim_beta`` and ``params`` are the rules' parameters (those of other rules are ignored); each
    rule states its condition (docs/robust_aggregation.md): ``fedavg`` none; ``fedmedian``,
    ``normbound``, ``centeredclip``: ``2f < K``; ``fedtrimmedavg``: ``⌊trim_beta·K⌋ ≥ f``;
    ``krum``, ``multikrum``: ``K > 2f + 2``; ``bulyan``: ``K ≥ 4f + 3``.
    """
    rule = get_rule(strategy)
    k = check_int(k, "k", minimum=1)
    f = check_int(num_malicious, "num_malicious", minimum=0)
    given = {"trim_beta": trim_beta, **params}
    own = {keyword: given.get(keyword, p.default) for keyword, p in rule.parameters.items()}
    return rule.violation(k, f, own)


def aggregate(
    updates: np.ndarray,
    weights: np.ndarray,
    strategy: str,
    *,
    num_malicious: int = 0,
    reference: np.ndarray | None = None,
    state: np.ndarray | None = None,
    **params: Any,
) -> np.ndarray:
    """Aggregate ``K`` flat client updates into one vector with rule ``strategy``.

    Parameters
    ----------
    updates : np.ndarray, shape (K, d)
        One finite flat parameter vector per client, in a fixed client order (the strategy sorts
        by client id). Any real dtype; computed in float64.
    weights : np.ndarray, shape (K,)
        Non-negative client weights with a positive sum (``num-examples`` or all ones); used by
        the rules that weigh clients (``"fedavg"``, ``"multikrum"``, ``"normbound"``), ignored by the others.
    strategy : str
        One of :data:`AGGREGATORS` (:mod:`fedpriv.federated.rules`).
    num_malicious : int (default: 0)
        The assumed number ``f`` of Byzantine clients: Krum's, Multi-Krum's and Bulyan's ``f``,
        and the ``f`` every rule's assumption (:func:`assumption_violation`) is checked against.
    reference : np.ndarray of shape (d,) or None (default: None)
        The current global model ``w``; required by :data:`NEEDS_REFERENCE` (updates are ``w_k − w``).
    state : np.ndarray of shape (d,) or None (default: None)
        What the rule carried over from the previous round (``AggregationRule.carry``; centered
        clipping's start point in update space); ``None``: the rule's own start (zero).
    **params
        The rules' parameters by keyword (:func:`fedpriv.federated.rules.rule_parameters`), each
        checked by the rule that declares it; the chosen rule's missing ones take their declared
        defaults. Built-in: ``trim_beta`` (fedtrimmedavg, in [0, 0.5), default 0.2), ``clip_norm``
        (normbound, > 0, default 1.0), ``cc_tau`` (centeredclip, > 0, default 1.0) and ``cc_iters``
        (centeredclip, >= 1, default 1).

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
        Non-numeric inputs, or a parameter no registered rule declares.
    """
    rule = get_rule(strategy)
    u = _check_updates(updates, as_float64=not rule.raw_updates)
    k, d = u.shape
    w = _check_weights(weights, k)
    own = _rule_arguments(strategy, params)
    f = check_int(num_malicious, "num_malicious", minimum=0)
    violation = rule.violation(k, f, own)
    if violation is not None:
        raise ValueError(f"{violation} (lower num-malicious or raise min-clients)")
    ref = None
    if rule.needs_reference:
        if reference is None:
            raise ValueError(f"{strategy} needs reference, the current global model of shape ({d},), got None")
        ref = _check_vector(reference, "reference", d)
    start = None if state is None else _check_vector(state, "state", d)
    return rule.combine(u, w, f, ref, own, start)
