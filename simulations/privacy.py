"""From a run's configuration to its privacy ledger and per-round spend: re-exported from :mod:`fedpriv.results`.

They moved to ``fedpriv/results.py`` so that the deployed ServerApp keeps the same ledger as the
simulation engines; the names stay importable from here.
"""

from __future__ import annotations

from fedpriv.results import make_ledger, round_spend

__all__ = ["make_ledger", "round_spend"]
