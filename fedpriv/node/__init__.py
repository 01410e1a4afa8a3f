"""What a deployed node decides for itself: its policy, its ledger and its randomness (docs/threat_model.md).

* :class:`~fedpriv.node.policy.NodePolicy` (:func:`~fedpriv.node.policy.load_policy`) — the node
  operator's limits, checked against what a run asks (:class:`~fedpriv.node.terms.NodeTerms`) and
  what each request would release (:class:`~fedpriv.node.terms.Release`);
* :class:`~fedpriv.node.ledger.NodeLedger` — every release charged on the node's disk, across rounds,
  runs and restarts, within the lifetime budget;
* :class:`~fedpriv.node.randomness.SecretRandomness` — draws from a CSPRNG keyed by a node secret, where
  a simulation uses :class:`~fedpriv.node.randomness.KeyedRandomness` (the run seed).
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy)
    from fedpriv.node.ledger import LedgerError, NodeLedger, Spend, default_ledger_path
    from fedpriv.node.policy import NodePolicy, PolicyRefusal, load_policy
    from fedpriv.node.randomness import KeyedRandomness, Randomness, SecretRandomness
    from fedpriv.node.terms import NodeTerms, Release

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = ["KeyedRandomness", "LedgerError", "NodeLedger", "NodePolicy", "NodeTerms", "PolicyRefusal", "Randomness",
           "Release", "SecretRandomness", "Spend", "default_ledger_path", "load_policy"]
