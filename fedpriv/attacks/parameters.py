"""The model-poisoning parameters a run resolves from its configuration (docs/attacks.md §2)."""

from __future__ import annotations

from fedpriv.attacks.keys import AttackSettings
from fedpriv.participation import round_size

__all__ = ["attack_scale"]


def attack_scale(config: AttackSettings) -> float:
    """s of ``sign-flip`` or γ of ``scaling``: ``attack-scale``, or the attack's default when it is 0."""
    scale = float(config["attack-scale"])
    if scale != 0.0:
        return scale
    if config["attack"] == "scaling":
        return float(round_size(config["num-clients"], config["fraction-train"], config["min-clients"]))
    return 1.0
