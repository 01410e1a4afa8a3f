"""The check of a run's attack against its task (docs/attacks.md §1): what is refused, with the key and what is allowed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.attacks.selection import attacker_count

__all__ = ["check_attack"]


def check_attack(config: Mapping[str, Any], task: str, allowed: tuple[str, ...]) -> None:
    """Refuse an attack the task does not run, an attack without an attacker, and parameters the attack ignores."""
    attack, fraction, n = config["attack"], config["attack-fraction"], config["num-clients"]
    if attack not in allowed:
        raise ValueError(f"attack must be one of {', '.join(map(repr, allowed))} for task {task!r}, got {attack!r}")
    if attack == "none":
        if config["attack-scale"] != 0.0:
            raise ValueError(f"attack-scale applies to attack 'sign-flip' or 'scaling', got attack-scale="
                             f"{config['attack-scale']!r} with attack 'none'")
        return
    if attacker_count(n, fraction) == 0:
        raise ValueError(f"attack={attack!r} with attack-fraction={fraction!r} of num-clients={n} chooses no attacker "
                         f"(floor(attack-fraction · num-clients) = 0): set attack-fraction >= 1/num-clients = "
                         f"{1 / n:.4g}, or attack = 'none'")
    scale = config["attack-scale"]
    if scale != 0.0 and attack not in ("sign-flip", "scaling"):
        raise ValueError(f"attack-scale applies to attack 'sign-flip' or 'scaling', got attack-scale={scale!r} with "
                         f"attack {attack!r}")
    if attack == "scaling" and scale != 0.0 and scale <= 1.0:
        raise ValueError(f"attack-scale must be > 1 for attack 'scaling' (a boost; 1 is no attack), got {scale!r}")
