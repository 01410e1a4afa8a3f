"""Every reproduction ``fedpriv reproduce`` knows, by name."""

from __future__ import annotations

from simulations.reproduce import geodp_direction, geodp_membership, hdr4me, li_thesis, online
from simulations.reproduce.entry import Entry

__all__ = ["ENTRIES", "get_entry"]

#: The entries in the order ``--list`` and the results page show them (by source and chapter).
ENTRIES: dict[str, Entry] = {e.name: e for e in (*hdr4me.ENTRIES, *online.ENTRIES, *li_thesis.ENTRIES,
                                                       *geodp_direction.ENTRIES, *geodp_membership.ENTRIES)}


def get_entry(name: str) -> Entry:
    """The entry called ``name``; an unknown name is refused listing the known ones."""
    if name not in ENTRIES:
        raise ValueError(f"no reproduction named {name!r}; known: {', '.join(ENTRIES)} (or 'all')")
    return ENTRIES[name]
