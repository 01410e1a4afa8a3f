"""Evaluation metrics of the vertical k-means experiments (docs/vertical_kmeans.md §16).

Guarantees: :func:`kmeans_cost` is ``Σ_x min_c ||x − c||²`` over all rows (exact squared
distances, evaluated offline on the full data, not part of the private protocol);
:func:`v_measure` is scikit-learn's ``v_measure_score`` (β = 1, natural log), in [0, 1];
:func:`relative_intersection_error` is ``(1/n) Σ_a |w(G_a) − w*(G_a)|``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_int
from fedpriv.clustering.kmeans import nearest

__all__ = ["kmeans_cost", "relative_intersection_error", "v_measure"]


def kmeans_cost(x: np.ndarray, centers: np.ndarray) -> float:
    """k-means loss ``Σ_{x∈X} min_{c∈C} ||x − c||²`` (§16)."""
    return float(nearest(x, centers)[1].sum())


def _check_labels(labels: Any, name: str) -> np.ndarray:
    """A non-empty 1-D label array."""
    if labels is None or isinstance(labels, (str, bytes)):
        raise TypeError(f"{name} must be a 1-D array of labels, got {type(labels).__name__}")
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of labels, got shape {arr.shape}")
    return arr


def v_measure(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """V-measure of a clustering against ground-truth classes (§16; scikit-learn, β = 1)."""
    from sklearn.metrics import v_measure_score  # here: the server's score; a party's node loads no scikit-learn

    t = _check_labels(labels_true, "labels_true")
    p = _check_labels(labels_pred, "labels_pred")
    if t.shape != p.shape:
        raise ValueError(f"labels_pred must have shape {t.shape} like labels_true, got {p.shape}")
    return float(v_measure_score(t, p, beta=1.0))


def relative_intersection_error(w: np.ndarray, w_true: np.ndarray, n: int) -> float:
    """Relative error of intersection sizes ``(1/n) Σ_a |w(G_a) − w*(G_a)|`` (§16)."""
    est = check_array(w, "w")
    true = check_array(w_true, "w_true")
    if est.shape != true.shape:
        raise ValueError(f"w must have the shape of w_true {true.shape}, got {est.shape}")
    n = check_int(n, "n", minimum=1)
    return float(np.abs(est - true).sum() / n)
