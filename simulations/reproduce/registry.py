"""Every reproduction ``fedpriv reproduce`` knows, by name."""

from __future__ import annotations

from simulations.reproduce import (
    geodp_direction,
    geodp_membership,
    geodp_training,
    hdr4me,
    ldp_sgd,
    ldpvec,
    li_thesis,
    mf,
    online,
    square_wave,
    vertical_kmeans,
)
from simulations.reproduce.entry import Entry

__all__ = ["ENTRIES", "get_entry"]

#: The entries in the order ``--list`` and the results page show them: by source, then chapter (the module order
#: within a chapter).
ENTRIES: dict[str, Entry] = {e.name: e for e in sorted((
    *hdr4me.ENTRIES, *ldp_sgd.ENTRIES, *ldpvec.ENTRIES,  # Duan thesis ch. 4 (HDR4ME), ch. 6 (federated LDP-SGD)
    *geodp_direction.ENTRIES, *geodp_training.ENTRIES, *geodp_membership.ENTRIES,  # Duan thesis ch. 5 (GeoDP)
    *online.ENTRIES,  # Shi et al.
    *li_thesis.ENTRIES, *square_wave.ENTRIES, *mf.ENTRIES, *vertical_kmeans.ENTRIES,  # Zitao Li thesis ch. 3-5
), key=lambda e: e.chapter.split(" §")[0])}


def get_entry(name: str) -> Entry:
    """The entry called ``name``; an unknown name is refused listing the known ones."""
    if name not in ENTRIES:
        raise ValueError(f"no reproduction named {name!r}; known: {', '.join(ENTRIES)} (or 'all')")
    return ENTRIES[name]
