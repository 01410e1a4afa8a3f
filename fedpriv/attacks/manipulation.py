"""LDP manipulation of the mean task (Cheu, Smith, Ullman, "Manipulation Attacks in Local Differential Privacy",
J. Privacy and Confidentiality 11(1), 2021; docs/attacks.md §6).

A manipulating user draws its m sampled dimensions as an honest user does (so the honest users'
reports, which share the repetition's stream, are unchanged) but skips the mechanism: it reports
the same value V for each of its dimensions. V is the upper end of the report mechanism's output
range for a bounded mechanism (Piecewise, Duchi, Square Wave: the value that moves the per-dimension
average up the most while it stays a value an honest user could send), or ``attack-value`` for an
unbounded one (Laplace, Gaussian: every real is a possible output, so the attacker picks how far).

The naive estimate of dimension j is the average of its c_j reports, so a_j manipulating reports
move it by (1/c_j) · Σ (V − y_ij) over those reports, whose expectation is
(a_j/c_j) · (V − E[y_ij]) with E[y_ij] = ``mech.mean(x_ij)``: with m = d every user reports every
dimension and the bias is ``attack-fraction`` · (V − E[honest report]).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.selection import is_attacker
from fedpriv.mechanisms.base import Mechanism

__all__ = ["manipulate_reports", "manipulation_value"]


def manipulation_value(config: AttackSettings, mech: Mechanism) -> float:
    """V, the value a manipulating user reports (module docstring); refuses a value no honest user could send."""
    value = float(config["attack-value"])
    lo, hi = (float(np.max(v)) if i else float(np.min(v)) for i, v in enumerate(mech.output_range))
    if not mech.bounded:
        if value == 0.0:
            raise ValueError(f"attack-value must be set (a finite number != 0) for attack 'ldp-manipulation' with the "
                             f"unbounded mechanism {mech.name!r}: every real is one of its outputs, so the attacker "
                             "chooses how far to push")
        return value
    if value == 0.0:
        return hi
    if not lo <= value <= hi:
        raise ValueError(f"attack-value must lie in the output range [{lo:.6g}, {hi:.6g}] of mechanism {mech.name!r} "
                         f"(0 = its upper end), got {value!r}: a report outside it is one no honest user sends")
    return value


def manipulate_reports(config: AttackSettings, mech: Mechanism, client_ids: Any, values: np.ndarray) -> np.ndarray:
    """The reports' values (users × m) with every manipulating user's row set to V; the others' rows unchanged."""
    if config["attack"] != "ldp-manipulation":
        return values
    rows = is_attacker(config, np.asarray(client_ids, dtype=np.int64).reshape(-1))
    if not rows.any():
        return values
    out = np.array(values, copy=True)
    out[rows] = manipulation_value(config, mech)
    return out
