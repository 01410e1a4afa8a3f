"""The ``attack*`` configuration keys (docs/attacks.md); :mod:`.validation` checks them against a task.

``attack`` names what the malicious clients do, ``attack-fraction`` how many there are: the run's
attackers are ⌊attack-fraction · num-clients⌋ clients fixed for the whole run
(:func:`fedpriv.attacks.selection.attackers`). ``attack-fraction`` is what happens; it is not tied to
``num-malicious``, the number of attackers a robust aggregation rule *assumes*.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from fedpriv.keys import (
    ConfigView,
    Key,
    at_least,
    in_table,
    non_negative,
    positive,
    unit_closed_left,
    unit_closed_right,
)

__all__ = ["ATTACK", "ATTACKS", "ATTACK_VALUE", "ATTACK_WHO", "AttackSettings", "DATA_POISONING", "MANIPULATION", "MANIPULATION_KEYS", "MEMBERSHIP_ATTACKS", "MODEL_POISONING"]

#: What the attack functions read the ``attack*`` keys from: a task's typed config or a plain mapping.
AttackSettings: TypeAlias = "Mapping[str, Any] | ConfigView"

#: Model poisoning: the attacker's released update is replaced (docs/attacks.md §2).
MODEL_POISONING: tuple[str, ...] = ("sign-flip", "scaling", "gaussian")
#: Data poisoning: the attacker trains honestly on poisoned data and runs its mechanism (docs/attacks.md §3).
DATA_POISONING: tuple[str, ...] = ("label-flip", "backdoor")
#: LDP manipulation: the attacker skips its mechanism and reports a value of its output range (docs/attacks.md §6–§8).
MANIPULATION: tuple[str, ...] = ("ldp-manipulation",)
#: Every value of ``attack``; each task runs some of them (:func:`fedpriv.attacks.validation.check_attack`).
ATTACKS: tuple[str, ...] = ("none", *MODEL_POISONING, *DATA_POISONING, *MANIPULATION)

#: Values of ``membership-attack`` (:mod:`fedpriv.attacks.membership`).
MEMBERSHIP_ATTACKS: tuple[str, ...] = ("none", "loss-threshold")

#: The keys every attacked task has: what the attack is and who attacks.
ATTACK_WHO: dict[str, Key] = in_table("attack", {
    "attack": Key("none", str, "what the malicious clients do (docs/attacks.md): ldp-sgd: model poisoning (sign-flip, "
                  "scaling: model replacement with a boost, gaussian: random updates) or data poisoning "
                  "(label-flip, backdoor: a pixel trigger relabelled backdoor-target) or ldp-manipulation (skip the "
                  "mechanism, send the ends of its output range against the own step); mean, distribution: "
                  "ldp-manipulation (skip the mechanism, report attack-value)",
                  choices=ATTACKS),
    "attack-fraction": Key(0.0, float, "share of the clients that attack: the floor of attack-fraction · num-clients "
                           "clients, fixed for the run and drawn from the seed (not num-malicious, a robust rule's "
                           "assumption)", check=unit_closed_left, allowed="in [0, 1)"),
})

#: The value a manipulating client reports (``ldp-manipulation``), one key for every task that runs it.
ATTACK_VALUE = Key(0.0, float, "ldp-manipulation: the value a manipulating user reports for each sampled dimension "
                   "instead of its mechanism's output; 0 = the upper end of a bounded mechanism's output range "
                   "(piecewise, duchi, square_wave); laplace and gaussian (unbounded) need a value != 0; "
                   "distribution: Square Wave's report in [-b, 1 + b] (0 = 1 + b), sr/pm as mean, a frequency oracle "
                   "reports the bin of this value in [0, 1] (0 = the top bin); ldp-sgd (coordinatewise): must be 0 "
                   "with a bounded mechanism (the ends of its range, against the own step), the per-coordinate "
                   "magnitude > 0 in normalized units with laplace or gaussian", check=math.isfinite,
                   allowed="a finite number", table="attack")

#: The attack keys of federated LDP-SGD: who attacks, the model-poisoning parameters and the manipulation's magnitude.
ATTACK: dict[str, Key] = {
    **ATTACK_WHO,
    **in_table("attack", {
        "attack-scale": Key(0.0, float, "sign-flip: multiplier s of the flipped update (−s·Δ); scaling: boost γ (γ·Δ); "
                            "0 = the attack's default (sign-flip 1, scaling the clients sampled per round, so the "
                            "boosted update replaces the FedAvg average)", check=non_negative,
                            allowed=">= 0 and finite (0 means the attack's default)"),
        "attack-std": Key(1.0, float, "gaussian: standard deviation of each coordinate of the random update",
                          check=positive, allowed="> 0 and finite"),
        "backdoor-target": Key(0, int, "backdoor: the class id the triggered examples are relabelled to",
                               check=at_least(0), allowed=">= 0 and below the number of classes"),
        "backdoor-fraction": Key(0.5, float, "backdoor: share of each attacker's examples that get the trigger (the floor "
                                 "of backdoor-fraction · its examples, drawn from the seed)", check=unit_closed_right,
                                 allowed="in (0, 1]"),
        "membership-attack": Key("none", str, "membership inference run on the trained model after the last round "
                                 "(docs/attacks.md §9): loss-threshold (Yeom et al. 2018: members are the clients' "
                                 "training examples, non-members the test set); the summary and the comparison row get "
                                 "its AUC and advantage (max TPR - FPR)", choices=MEMBERSHIP_ATTACKS),
    }),
    "attack-value": ATTACK_VALUE,
}

#: The attack keys of the mean and distribution tasks: who attacks and the value a manipulating user reports.
MANIPULATION_KEYS: dict[str, Key] = {
    **ATTACK_WHO,
    "attack-value": ATTACK_VALUE,
}
