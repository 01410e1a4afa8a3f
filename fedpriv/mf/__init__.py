"""Federated matrix factorization under differential privacy (docs/federated_mf.md): VFL, HFL and LFL-SGDMF.

The configuration (:class:`MfConfig`) and the result (:class:`MfResult`, :class:`RoundRecord`) are
imported eagerly; everything else (data, the algorithms, the accountant) loads on first use, so
``import fedpriv.mf`` (and ``fedpriv.config``, which reads the choices of :mod:`fedpriv.mf.config`)
stays light. Entry point: :func:`run_mf` (:mod:`fedpriv.mf.run`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from fedpriv.mf.config import ALGORITHMS, NOTIONS, SETTINGS, MfConfig
from fedpriv.mf.result import MfResult, RoundRecord, pooled_mse

__all__ = ["ALGORITHMS", "NOTIONS", "SETTINGS", "MfConfig", "MfData", "MfResult", "RoundRecord", "load_split",
           "mf_config_from_run", "party_groups", "pooled_mse", "run_central", "run_hfl", "run_lfl", "run_mf",
           "run_vfl"]

#: Lazily imported names → their module.
_LAZY: dict[str, str] = {
    "run_mf": "fedpriv.mf.run", "mf_config_from_run": "fedpriv.mf.run",
    "MfData": "fedpriv.mf.data_spec", "load_split": "fedpriv.mf.data_spec", "party_groups": "fedpriv.mf.data_spec",
    "run_vfl": "fedpriv.mf.vfl", "run_hfl": "fedpriv.mf.hfl", "run_lfl": "fedpriv.mf.lfl",
    "run_central": "fedpriv.mf.central",
}


def __getattr__(name: str) -> Any:
    """Import :data:`_LAZY` names on first access."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fedpriv.mf' has no attribute {name!r}")
