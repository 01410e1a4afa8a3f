"""The run directory (DESIGN.md §6): re-exported from :mod:`fedpriv.rundir` and :mod:`fedpriv.results`.

The plain-file-IO code lives in ``fedpriv/`` so that the deployed ServerApp (``strategies/``, which
must not import ``simulations/``) writes the same directory; the names stay importable from here.
"""

from __future__ import annotations

from fedpriv.results import versions
from fedpriv.rundir import RunDirectory, json_safe

__all__ = ["RunDirectory", "json_safe", "versions"]
