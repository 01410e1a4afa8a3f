"""The run directory (DESIGN.md §6): re-exported from :mod:`fedpriv.results`.

The plain-file-IO code moved to ``fedpriv/results.py`` so that the deployed ServerApp
(``strategies/``, which must not import ``simulations/``) writes the same directory; the names stay
importable from here.
"""

from __future__ import annotations

from fedpriv.results import RunDirectory, json_safe, versions

__all__ = ["RunDirectory", "json_safe", "versions"]
