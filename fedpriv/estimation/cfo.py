"""Categorical-oracle baselines on the d-grid: GRR, OLH, OUE histograms and CFO with binning (docs/square_wave_ems.md §7.1–§7.6).

Guarantee: every method here is ε-LDP per user, one report (the oracles of
:mod:`fedpriv.estimation.oracles`); the estimate is post-processing of the reports.

* ``"grr"``, ``"olh"``, ``"oue"``: the oracle run directly on the d buckets of [0, 1] (c = d).
  OUE is **an addition** (§7.3, §11 item 12), kept out of the paper-faithful grid.
* ``"cfo-16"``, ``"cfo-32"``, ``"cfo-64"``: CFO with binning (§7.6). Each user reports its bin among c
  equal bins of [0, 1] with GRR or OLH, chosen by the variance rule of §7.4 for domain size c.

Every method estimates the c unbiased bin frequencies (:meth:`CfoHistogram.frequencies`), applies
Norm-Sub (§7.5, :func:`fedpriv.estimation.consistency.norm_sub`) and spreads each bin's mass uniformly
over the part of [0, 1] it covers, onto the d-bucket grid (§7.6; when c divides d each bin covers
d/c buckets exactly, otherwise buckets receive mass in proportion to their overlap with each bin).

Values go to bucket ``min(⌊v·c⌋, c − 1)`` (§0's convention). Reports, one row per user:
GRR ``{"value"}`` (int64), OLH ``{"hash_key"`` (uint64), ``"value"}``, OUE ``{"bits"}`` ((n, c) uint8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_choice, check_int
from fedpriv.estimation.consistency import norm_sub
from fedpriv.estimation.distribution import (
    DistributionEstimate,
    DistributionMethod,
    check_reports,
    check_values,
)
from fedpriv.estimation.oracles import (
    OlhReports,
    choose_oracle,
    grr_frequencies,
    grr_perturb,
    olh_frequencies,
    olh_g,
    olh_perturb,
    oue_frequencies,
    oue_perturb,
)
from fedpriv.rng import Draws, check_draws

__all__ = [
    "CFO_ORACLES",
    "Cfo16",
    "Cfo32",
    "Cfo64",
    "CfoHistogram",
    "GrrHistogram",
    "OlhHistogram",
    "OueHistogram",
    "bin_index",
    "spread_bins",
]

#: Oracles a CFO histogram may use: ``"auto"`` applies §7.4 (GRR iff c − 2 < 3e^ε, else OLH).
CFO_ORACLES: tuple[str, ...] = ("auto", "grr", "olh", "oue")
_FIELDS: dict[str, tuple[str, ...]] = {"grr": ("value",), "olh": ("hash_key", "value"), "oue": ("bits",)}


def bin_index(values: Any, c: int) -> np.ndarray:
    """Each value's bin ``min(⌊v·c⌋, c − 1)`` among c equal bins of [0, 1] (§0); values outside [0, 1] raise."""
    v = check_values(values)
    c = check_int(c, "c", minimum=1)
    return np.minimum(np.floor(v * c).astype(np.int64), c - 1)


def spread_bins(bin_mass: Any, d: int) -> np.ndarray:
    """Spread c bin masses uniformly over [0, 1] onto d equal buckets (§7.6): bucket i gets its overlap's share."""
    mass = np.asarray(bin_mass, dtype=np.float64)
    d = check_int(d, "d", minimum=1)
    c = mass.shape[0]
    if c == d:
        return mass.copy()
    cdf = np.concatenate(([0.0], np.cumsum(mass)))  # the bins' CDF at t = j/c, linear in between (§9.1)
    return np.diff(np.interp(np.arange(d + 1) / d, np.arange(c + 1) / c, cdf))


class CfoHistogram(DistributionMethod):
    """A categorical frequency oracle over c equal bins of [0, 1], spread onto the d-bucket grid (§7.6).

    Parameters
    ----------
    epsilon : float
        Per-user LDP budget (> 0).
    d : int
        Histogram buckets on [0, 1].
    bins : int
        c, the oracle's domain size (c = d: the oracle runs on the grid itself).
    oracle : {"auto", "grr", "olh", "oue"} (default: "auto")
        ``"auto"`` picks GRR or OLH by §7.4 for domain size c; ``"oue"`` is an addition (§7.3).

    Attributes
    ----------
    oracle : str
        The resolved oracle (``"grr"``, ``"olh"`` or ``"oue"``).
    """

    name: ClassVar[str] = "cfo"

    def __init__(self, epsilon: float, d: int, *, bins: int, oracle: str = "auto") -> None:
        super().__init__(epsilon, d)
        self.bins = check_int(bins, "bins", minimum=2)
        oracle = check_choice(oracle, "oracle", CFO_ORACLES)
        self.oracle = choose_oracle(self.bins, self.epsilon) if oracle == "auto" else oracle

    @property
    def guarantee(self) -> str:
        """One line: the per-user guarantee."""
        return f"{self.epsilon:g}-LDP per user, one report ({self.oracle.upper()} over {self.bins} bins)"

    def perturb(self, values: np.ndarray, rng: Draws) -> dict[str, np.ndarray]:
        """Each user's oracle report of its bin (one row per user; see the module docstring for the fields)."""
        rng = check_draws(rng)
        b = bin_index(values, self.bins)
        if self.oracle == "grr":
            return {"value": grr_perturb(b, self.bins, self.epsilon, rng)}
        if self.oracle == "olh":
            rep = olh_perturb(b, self.bins, self.epsilon, rng)
            return {"hash_key": rep.hashes, "value": rep.values}
        return {"bits": oue_perturb(b, self.bins, self.epsilon, rng)}

    def frequencies(self, reports: Mapping[str, np.ndarray]) -> np.ndarray:
        """The unbiased bin frequencies x̃ (c,), before Norm-Sub (§7.1–§7.3); entries may be negative."""
        r = check_reports(reports, _FIELDS[self.oracle])
        if self.oracle == "grr":
            return grr_frequencies(r["value"], self.bins, self.epsilon)
        if self.oracle == "olh":
            olh = OlhReports(hashes=r["hash_key"], values=r["value"], g=olh_g(self.epsilon))  # g is a function of ε
            return olh_frequencies(olh, self.bins, self.epsilon)
        if r["bits"].ndim != 2 or r["bits"].shape[1] != self.bins:
            raise ValueError(f"bits must have shape (n, {self.bins}), got {r['bits'].shape}")
        return oue_frequencies(r["bits"], self.epsilon)

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Frequencies → Norm-Sub (§7.5) → uniform spread onto the d-grid (§7.6); moments from bucket centres (§9.5)."""
        hist = spread_bins(norm_sub(self.frequencies(reports), 1.0), self.d)
        return DistributionEstimate.from_histogram(hist, self.name, self.epsilon)


class GrrHistogram(CfoHistogram):
    """GRR directly on the d buckets (§7.1), then Norm-Sub."""

    name: ClassVar[str] = "grr"

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(epsilon, d, bins=d, oracle="grr")


class OlhHistogram(CfoHistogram):
    """OLH directly on the d buckets (§7.2), then Norm-Sub."""

    name: ClassVar[str] = "olh"

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(epsilon, d, bins=d, oracle="olh")


class OueHistogram(CfoHistogram):
    """OUE directly on the d buckets (§7.3, an addition: not in the thesis), then Norm-Sub."""

    name: ClassVar[str] = "oue"

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(epsilon, d, bins=d, oracle="oue")


class Cfo16(CfoHistogram):
    """CFO with binning, c = 16 bins, GRR/OLH by §7.4 (§7.6)."""

    name: ClassVar[str] = "cfo-16"

    def __init__(self, epsilon: float, d: int, *, oracle: str = "auto") -> None:
        super().__init__(epsilon, d, bins=16, oracle=oracle)


class Cfo32(CfoHistogram):
    """CFO with binning, c = 32 bins, GRR/OLH by §7.4 (§7.6)."""

    name: ClassVar[str] = "cfo-32"

    def __init__(self, epsilon: float, d: int, *, oracle: str = "auto") -> None:
        super().__init__(epsilon, d, bins=32, oracle=oracle)


class Cfo64(CfoHistogram):
    """CFO with binning, c = 64 bins, GRR/OLH by §7.4 (§7.6)."""

    name: ClassVar[str] = "cfo-64"

    def __init__(self, epsilon: float, d: int, *, oracle: str = "auto") -> None:
        super().__init__(epsilon, d, bins=64, oracle=oracle)
