"""The ``attack*`` configuration keys (docs/attacks.md); :mod:`.validation` checks them against a task.

``attack`` names what the malicious clients do, ``attack-fraction`` how many there are: the run's
attackers are ⌊attack-fraction · num-clients⌋ clients fixed for the whole run
(:func:`fedpriv.attacks.selection.attackers`). ``attack-fraction`` is what happens; it is not tied to
``num-malicious``, the number of attackers a robust aggregation rule *assumes*.
"""

from __future__ import annotations

from fedpriv.keys import Key, non_negative, positive, unit_closed_left

__all__ = ["ATTACK", "ATTACKS", "DATA_POISONING", "MODEL_POISONING"]

#: Model poisoning: the attacker's released update is replaced (docs/attacks.md §2).
MODEL_POISONING: tuple[str, ...] = ("sign-flip", "scaling", "gaussian")
#: Data poisoning: the attacker trains honestly on poisoned data and runs its mechanism (docs/attacks.md §3).
DATA_POISONING: tuple[str, ...] = ("label-flip",)
#: Every value of ``attack``.
ATTACKS: tuple[str, ...] = ("none", *MODEL_POISONING, *DATA_POISONING)

ATTACK: dict[str, Key] = {
    "attack": Key("none", str, "what the malicious clients do (docs/attacks.md): model poisoning (sign-flip, scaling: "
                  "model replacement with a boost, gaussian: random updates) or data poisoning (label-flip)",
                  choices=ATTACKS),
    "attack-fraction": Key(0.0, float, "share of the clients that attack: the floor of attack-fraction · num-clients "
                           "clients, fixed for the run and drawn from the seed (not num-malicious, a robust rule's "
                           "assumption)", check=unit_closed_left, allowed="in [0, 1)"),
    "attack-scale": Key(0.0, float, "sign-flip: multiplier s of the flipped update (−s·Δ); scaling: boost γ (γ·Δ); "
                        "0 = the attack's default (sign-flip 1, scaling the clients sampled per round, so the "
                        "boosted update replaces the FedAvg average)", check=non_negative,
                        allowed=">= 0 and finite (0 means the attack's default)"),
    "attack-std": Key(1.0, float, "gaussian: standard deviation of each coordinate of the random update",
                      check=positive, allowed="> 0 and finite"),
}

