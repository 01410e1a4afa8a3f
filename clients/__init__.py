"""Flower ClientApps and mods (thin adapters over fedpriv/); filled by the [ldp-sgd] issue."""
