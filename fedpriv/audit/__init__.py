"""Empirical privacy audit: a lower bound on ε from a randomizer's outputs on two neighbouring inputs (docs/audit.md).

* :mod:`fedpriv.audit.bound` — Clopper–Pearson bounds, held-out event selection, the ε lower bound and verdict;
* :mod:`fedpriv.audit.targets` — what can be audited (every mechanism, every update perturbation, the
  LDP-SGD client upload), its worst-case neighbouring inputs and its 1-D output statistic.
"""

from fedpriv.audit.bound import AuditResult, clopper_pearson_lower, clopper_pearson_upper, epsilon_lower_bound
from fedpriv.audit.targets import TARGETS, AuditTarget, audit, get_target

__all__ = [
    "TARGETS",
    "AuditResult",
    "AuditTarget",
    "audit",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "get_target",
]
