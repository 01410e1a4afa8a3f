"""The check of a run's attack against its task (docs/attacks.md §1): what is refused, with the key and what is allowed."""

from __future__ import annotations

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.selection import attacker_count

__all__ = ["check_attack"]


#: The attacks each parameter applies to (a parameter set for another attack is refused, not ignored).
_PARAMETERS = {"attack-scale": ("sign-flip", "scaling"), "attack-value": ("ldp-manipulation",),
               "backdoor-target": ("backdoor",)}


def check_attack(config: AttackSettings, task: str, allowed: tuple[str, ...]) -> None:
    """Refuse an attack the task does not run, an attack without an attacker, and parameters the attack ignores.

    ``attack = "none"`` takes any ``attack-fraction`` and parameter and attacks nothing, so a grid
    ``--grid attack=none,sign-flip --set attack-scale=4`` has its baseline cell (docs/attacks.md §1).

    ``config`` is the task's typed view (a :class:`fedpriv.keys.ConfigView`): a parameter key the task
    does not have is not checked.
    """
    attack, fraction, n = config["attack"], config["attack-fraction"], config["num-clients"]
    if attack not in allowed:
        raise ValueError(f"attack must be one of {', '.join(map(repr, allowed))} for task {task!r}, got {attack!r}")
    for key, attacks in _PARAMETERS.items():
        if key in config and config[key] != 0.0 and attack not in (*attacks, "none"):  # none: a grid's baseline
            raise ValueError(f"{key} applies to attack {' or '.join(map(repr, attacks))}, got {key}="
                             f"{config[key]!r} with attack {attack!r}")
    if attack != "none" and attacker_count(n, fraction) == 0:
        raise ValueError(f"attack={attack!r} with attack-fraction={fraction!r} of num-clients={n} chooses no attacker "
                         f"(floor(attack-fraction · num-clients) = 0): set attack-fraction >= 1/num-clients = "
                         f"{1 / n:.4g}, or attack = 'none'")
    if attack == "backdoor":
        from fedpriv.attacks.backdoor import check_backdoor  # torch only for the task that trains a model

        check_backdoor(config)
    if attack == "scaling" and 0.0 < config["attack-scale"] <= 1.0:
        raise ValueError(f"attack-scale must be > 1 for attack 'scaling' (a boost; 1 is no attack), got "
                         f"{config['attack-scale']!r}")
