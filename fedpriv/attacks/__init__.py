"""Attacks by malicious clients (docs/attacks.md): who attacks, and what an attacker does to its upload.

* :mod:`.keys` — the ``attack*`` configuration keys (:mod:`.validation` checks them against a task);
* :mod:`.selection` — the attackers: a fixed set of ⌊attack-fraction · num-clients⌋ client ids for the whole run,
  drawn from the run seed (the same clients in every runtime);
* :mod:`.poisoning` — model poisoning (``sign-flip``, ``scaling``, ``gaussian``) of LDP-SGD uploads and data
  poisoning (``label-flip``);
* :mod:`.parameters` — the model-poisoning parameters resolved from the configuration;
* :mod:`.manipulation` — LDP manipulation of the mean task (Cheu, Smith, Ullman 2021);
* :mod:`.sgd_manipulation` — LDP manipulation of federated LDP-SGD uploads (coordinatewise perturbation);
* :mod:`.distribution_manipulation` — LDP manipulation of the distribution task (Square Wave, frequency oracles, sr/pm);
* :mod:`.report` — the attack in a run's summary and printout, and a comparison's attack columns and title line.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy): the key table loads without numpy or torch
    from fedpriv.attacks.distribution_manipulation import manipulate_distribution_reports, manipulation_target
    from fedpriv.attacks.keys import ATTACK, ATTACKS
    from fedpriv.attacks.manipulation import manipulate_reports, manipulation_value
    from fedpriv.attacks.poisoning import flip_labels, poison_uploads
    from fedpriv.attacks.report import attack_line, attack_row, attack_summary, attackers_column
    from fedpriv.attacks.selection import attacker_count, attackers, attackers_of, is_attacker
    from fedpriv.attacks.sgd_manipulation import manipulate_uploads
    from fedpriv.attacks.validation import check_attack

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = ["ATTACK", "ATTACKS", "attack_line", "attack_row", "attack_summary", "attacker_count", "attackers",
           "attackers_column", "attackers_of", "check_attack", "flip_labels", "is_attacker",
           "manipulate_distribution_reports", "manipulate_reports", "manipulate_uploads", "manipulation_target", "manipulation_value",
           "poison_uploads"]
