"""LDP manipulation of the distribution task (Cheu, Smith, Ullman, "Manipulation Attacks in Local Differential
Privacy", J. Privacy and Confidentiality 11(1), 2021; docs/attacks.md §7).

A manipulating user skips its method's perturbation and sends one report from the method's output
range, the one that moves the estimate most towards its target:

* **Square Wave** (``sw-ems``, ``sw-em``; reports in [−b, 1 + b], docs/square_wave_ems.md §2): the
  value V = 1 + b, the upper end (or ``attack-value`` inside [−b, 1 + b]);
* **the mean-only methods** (``sr``, ``pm``): the upper end of the mechanism's output range on
  [−1, 1], or ``attack-value`` inside it (:func:`fedpriv.attacks.manipulation.manipulation_value`);
* **frequency oracles** (``grr``, ``olh``, ``oue``, ``cfo-16/32/64``): the report that supports the
  target bin t = ``min(⌊v·c⌋, c − 1)`` of the value v = ``attack-value`` in [0, 1] (0: v = 1, the
  top bin): GRR reports t; OLH keeps its own hash key κ and reports ``H_κ(t)``; OUE reports the
  one-hot vector of t.

The hierarchical methods (``hh``, ``hh-admm``, ``haar-hrr``) are refused: no manipulation is built
for their layered reports. Honest users draw from their own keyed streams, so their reports are
unchanged bit for bit; an attacker's row is replaced after its honest draw (the OLH hash key is
that draw's).

For a frequency oracle the unbiased bin frequency x̃_t is an average of per-user supports
s_i(t) (docs/square_wave_ems.md §7.1–§7.3), so a_t attackers out of n move it by
(1/n) Σ (s(attacker report) − s_i(t)) over the attackers, with expectation
fraction · (s_max − E[s_i(t)]): s_max = (1 − q)/(p − q) for GRR and OUE, and E[s_i(t)] = 1 if
the attacker's own value lies in bin t, else 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.manipulation import manipulation_value
from fedpriv.attacks.selection import is_attacker
from fedpriv.estimation.cfo import CfoHistogram, bin_index
from fedpriv.estimation.distribution import DistributionMethod
from fedpriv.estimation.mean_mechanisms import MeanMechanismMethod
from fedpriv.estimation.oracles import olh_g, olh_hash
from fedpriv.estimation.sw_ems import SquareWaveEMS

__all__ = ["MANIPULABLE", "manipulate_distribution_reports", "manipulation_target"]

#: The ``dist-method`` values an ``ldp-manipulation`` attacker can manipulate (module docstring).
MANIPULABLE: tuple[str, ...] = ("sw-ems", "sw-em", "grr", "olh", "oue", "cfo-16", "cfo-32", "cfo-64", "sr", "pm")


def manipulation_target(config: AttackSettings, method: DistributionMethod) -> dict[str, float]:
    """The resolved attack: ``{"attack-value": V}`` (Square Wave, sr, pm) or the target value and its bin (oracles).

    Refuses a method without a manipulation and an ``attack-value`` outside the method's range.
    """
    value = float(config["attack-value"])
    if isinstance(method, SquareWaveEMS) and method.bucketize == "R-B":
        lo, hi = -method.b, 1.0 + method.b
        if value == 0.0:
            return {"attack-value": hi}
        if not lo <= value <= hi:
            raise ValueError(f"attack-value must lie in the Square Wave report range [{lo:.6g}, {hi:.6g}] of "
                             f"dist-method {method.label!r} at ε = {method.epsilon:g} (0 = its upper end), got "
                             f"{value!r}: a report outside it is one no honest user sends")
        return {"attack-value": value}
    if isinstance(method, MeanMechanismMethod):
        return {"attack-value": manipulation_value(config, method.mechanism)}
    if isinstance(method, CfoHistogram):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"attack-value must be a value in the domain [0, 1] for dist-method {method.name!r} "
                             f"(the attackers report its bin; 0 = the top bin), got {value!r}")
        v = 1.0 if value == 0.0 else value
        return {"attack-value": v, "attack-bin": float(bin_index(np.array([v]), method.bins)[0])}
    raise ValueError(f"attack 'ldp-manipulation' supports dist-method {', '.join(map(repr, MANIPULABLE))}, got "
                     f"{getattr(method, 'name', method)!r} (its layered reports have no manipulation here)")


def _attacker_rows(method: DistributionMethod, target: Mapping[str, float], rows: Mapping[str, np.ndarray]) \
        -> dict[str, np.ndarray]:
    """The manipulated reports replacing ``rows`` (the attackers' honest reports, one row each)."""
    n = next(iter(rows.values())).shape[0]
    if not isinstance(method, CfoHistogram):
        return {"report": np.full(n, target["attack-value"], dtype=np.float64)}
    t = int(target["attack-bin"])
    if method.oracle == "grr":
        return {"value": np.full(n, t, dtype=rows["value"].dtype)}
    if method.oracle == "olh":
        keys = rows["hash_key"]
        return {"hash_key": keys, "value": olh_hash(keys, np.full(n, t, dtype=np.int64), olh_g(method.epsilon))
                .astype(rows["value"].dtype)}
    bits = np.zeros_like(rows["bits"])
    bits[:, t] = 1
    return {"bits": bits}


def manipulate_distribution_reports(config: AttackSettings, method: DistributionMethod, client_ids: Any,
                                    reports: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reports (one row per client id) with every manipulating user's row replaced; the others' rows unchanged."""
    if config["attack"] != "ldp-manipulation":
        return dict(reports)
    rows = np.flatnonzero(is_attacker(config, np.asarray(client_ids, dtype=np.int64).reshape(-1)))
    if rows.size == 0:
        return dict(reports)
    forged = _attacker_rows(method, manipulation_target(config, method), {k: np.asarray(v)[rows]
                                                                            for k, v in reports.items()})
    out = {k: np.array(v, copy=True) for k, v in reports.items()}
    for k, v in forged.items():
        out[k][rows] = v
    return out
