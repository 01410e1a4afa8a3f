"""The party's message of vertical k-means (docs/vertical_kmeans.md §6, §9, §18 round 1) and its flat array form.

A :class:`PartyMessage` holds only what a party may send the untrusted server: its DP local
centers and, by method, the integer sketch registers, the noisy histogram, the LDP reports, or
(non-private baselines only) the exact labels. It has no field for the hash key (§5.5 R3, §19
item 12). ``to_arrays``/``from_arrays`` give the flat ``{name: ndarray}`` form a Flower
``ArrayRecord`` carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_int
from fedpriv.clustering.baselines import LdpReports
from fedpriv.estimation.oracles import ORACLES

__all__ = ["PartyMessage", "labels_array"]


def labels_array(labels: Any, k: int, name: str) -> np.ndarray:
    """1-D int64 labels in [0, k − 1]."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    outside = (arr < 0) | (arr >= k)
    if np.any(outside):
        raise ValueError(f"{name} must lie in [0, {k - 1}], got {int(outside.sum())} value(s) outside")
    return arr


def _frozen(arr: np.ndarray) -> np.ndarray:
    out = np.array(arr)  # a private copy
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class PartyMessage:
    """What party ℓ sends the server in the encode round (§6, §9, §18 round 1): never the hash key.

    Parameters
    ----------
    party : int
        The party's index ℓ (0-based, global column order).
    centers : ndarray of shape (k_l, m_l), float64
        Local centers (DP for the private methods).
    sketch : ndarray of shape (M, k_l), unsigned int, or None
        DPFMPS partition sketch (§6).
    histogram : ndarray of shape (k_l,), float64, or None
        IND-LAP noisy histogram (§9.1).
    reports : LdpReports or None
        LDP-AGG per-user reports (§9.2).
    labels : ndarray of shape (n,), int64, or None
        Exact memberships in increasing id order: non-private baselines and ablation only.
    """

    party: int
    centers: np.ndarray
    sketch: np.ndarray | None = None
    histogram: np.ndarray | None = None
    reports: Any | None = None
    labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "party", check_int(self.party, "party", minimum=0))
        centers = check_array(self.centers, "centers")
        if centers.ndim != 2:
            raise ValueError(f"centers must be a 2-D array (k_l, m_l), got shape {centers.shape}")
        object.__setattr__(self, "centers", _frozen(centers))
        k = centers.shape[0]
        if self.sketch is not None:
            sketch = np.asarray(self.sketch)
            if sketch.ndim != 2 or sketch.shape[1] != k or sketch.dtype.kind != "u":
                raise ValueError(f"sketch must be an unsigned-integer (M, {k}) array, got {sketch.dtype} of "
                                 f"shape {sketch.shape}")
            object.__setattr__(self, "sketch", _frozen(sketch))
        if self.histogram is not None:
            hist = check_array(self.histogram, "histogram")
            if hist.shape != (k,):
                raise ValueError(f"histogram must have shape ({k},), got {hist.shape}")
            object.__setattr__(self, "histogram", _frozen(hist))
        if self.reports is not None:
            if not isinstance(self.reports, LdpReports):
                raise TypeError(f"reports must be an LdpReports, got {type(self.reports).__name__}")
            if self.reports.k != k:
                raise ValueError(f"reports must cover the {k} local clusters, got k={self.reports.k}")
        if self.labels is not None:
            object.__setattr__(self, "labels", _frozen(labels_array(self.labels, k, "labels")))

    @property
    def k(self) -> int:
        """Number of local centers k_ℓ."""
        return int(self.centers.shape[0])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat numpy dict for a Flower ``ArrayRecord`` (§18); scalars are arrays of shape (1,)."""
        out: dict[str, np.ndarray] = {"centers": np.array(self.centers)}
        if self.sketch is not None:
            out["sketch"] = np.array(self.sketch)
        if self.histogram is not None:
            out["histogram"] = np.array(self.histogram)
        if self.labels is not None:
            out["labels"] = np.array(self.labels)
        if self.reports is not None:
            rep = self.reports
            out["ldp_ids"] = np.array(rep.ids, dtype=np.int64)
            out["ldp_values"] = np.array(rep.values, dtype=np.int64)
            out["ldp_oracle"] = np.array([ORACLES.index(rep.oracle)], dtype=np.int64)
            out["ldp_epsilon"] = np.array([rep.epsilon], dtype=np.float64)
            if rep.oracle == "olh":
                out["ldp_hash_keys"] = np.array(rep.hash_keys, dtype=np.uint64)
                out["ldp_g"] = np.array([rep.g], dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, party: int, arrays: Mapping[str, np.ndarray]) -> PartyMessage:
        """Rebuild a message from :meth:`to_arrays`' dict (unknown keys raise)."""
        known = {"centers", "sketch", "histogram", "labels", "ldp_ids", "ldp_values", "ldp_oracle",
                 "ldp_epsilon", "ldp_hash_keys", "ldp_g"}
        unknown = sorted(set(arrays) - known)
        if unknown or "centers" not in arrays:
            raise ValueError(f"arrays must hold 'centers' and only keys from {sorted(known)}, got {sorted(arrays)}")
        centers = np.asarray(arrays["centers"])
        reports = None
        if "ldp_ids" in arrays:
            oracle = ORACLES[int(np.asarray(arrays["ldp_oracle"]).ravel()[0])]
            olh = oracle == "olh"
            reports = LdpReports(
                ids=np.asarray(arrays["ldp_ids"]), oracle=oracle, k=int(centers.shape[0]),
                epsilon=float(np.asarray(arrays["ldp_epsilon"]).ravel()[0]), values=np.asarray(arrays["ldp_values"]),
                hash_keys=np.asarray(arrays["ldp_hash_keys"]) if olh else None,
                g=int(np.asarray(arrays["ldp_g"]).ravel()[0]) if olh else None)
        return cls(party=party, centers=centers, sketch=arrays.get("sketch"), histogram=arrays.get("histogram"),
                   reports=reports, labels=arrays.get("labels"))
