"""Privacy accounting of every workload: release events, the accountants, the ledgers and the budget splits.

* :mod:`~fedpriv.accounting.events` — frozen release events (:class:`PureRelease`,
  :class:`ApproxRelease`, :class:`GaussianRelease`), each a dp-accounting ``DpEvent`` where the math matches.
* :mod:`~fedpriv.accounting.accountant` — :func:`compose`: every applicable accountant of
  :data:`ACCOUNTANTS` (sequential, RDP, PLD; integer-order RDP by name) and the tightest valid
  :class:`Composition`, named.
* :mod:`~fedpriv.accounting.guarantees` — :class:`GuaranteeLedger`: clients' reported per-round
  guarantees composed per client (worst client), with a target ε checked before a round.

* :mod:`~fedpriv.accounting.ledger` — :class:`PrivacyLedger`: per-client (ε, δ) of a federated run
  (local DP releases, GeoDP's sub-sampled Gaussian steps), one :class:`RoundSpend` per round.
* :mod:`~fedpriv.accounting.distributed` — :func:`calibrate_sigma` and :func:`rdp_accountant_epsilon`
  (dp-accounting's RDP accountant): central (ε, δ) of sums released with distributed Gaussian noise
  (secure sum, LFL), which :class:`fedpriv.secagg.ledger.DistributedDpLedger` charges at the true σ_eff.
* :mod:`~fedpriv.accounting.rdp` — the integer-order (2…256) RDP curve of the Poisson-sub-sampled
  Gaussian, its conversions to (ε, δ) and the calibration of z (the SGDMF algorithms);
  :func:`integer_order_epsilon` composes one Gaussian release per multiplier on those orders.
* :mod:`~fedpriv.accounting.parties` — :class:`PartyAccount` and the composition of the parties'
  accounts (VFL/HFL/FMF).
* :mod:`~fedpriv.accounting.budget` — vertical k-means' :class:`BudgetSplit` and the
  :class:`PrivacyAccount` of its :class:`Release` s (sequential composition).

See docs/architecture.md ("Privacy accounting").
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy): a ledger's user need not load dp-accounting
    from fedpriv.accounting.accountant import ACCOUNTANTS, DEFAULT_ACCOUNTANTS, Composition, compose
    from fedpriv.accounting.budget import BudgetExceededError, BudgetSplit, PrivacyAccount, Release
    from fedpriv.accounting.distributed import calibrate_sigma, rdp_accountant_epsilon
    from fedpriv.accounting.events import ApproxRelease, GaussianRelease, PureRelease
    from fedpriv.accounting.guarantees import GuaranteeLedger
    from fedpriv.accounting.ledger import PrivacyLedger, RoundSpend, epsilon_lines
    from fedpriv.accounting.parties import COMPOSITION_RULES, PartyAccount, global_epsilon, party_epsilon
    from fedpriv.accounting.rdp import CONVERSIONS, ORDERS, epsilon_from_rdp, integer_order_epsilon, rdp_curve

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "ACCOUNTANTS",
    "COMPOSITION_RULES",
    "CONVERSIONS",
    "DEFAULT_ACCOUNTANTS",
    "ORDERS",
    "ApproxRelease",
    "BudgetExceededError",
    "BudgetSplit",
    "Composition",
    "GaussianRelease",
    "GuaranteeLedger",
    "PartyAccount",
    "PrivacyAccount",
    "PrivacyLedger",
    "PureRelease",
    "Release",
    "RoundSpend",
    "calibrate_sigma",
    "compose",
    "epsilon_from_rdp",
    "epsilon_lines",
    "global_epsilon",
    "integer_order_epsilon",
    "party_epsilon",
    "rdp_accountant_epsilon",
    "rdp_curve",
]
