"""The messages of the vertical k-means workload: what the server asks a party and what the party answers (§18).

Every request is of kind ``query`` with a ConfigRecord ``"config"`` naming the ``op`` and the
``repetition`` (1-based; repetition r runs Algorithm 2 with seed ``seed + r − 1`` and the parties'
hash key K_r, :mod:`~fedpriv.workloads.vertical_kmeans.party_key`):

``op = "count"`` with ``eps0`` (§18 round 0, to the counting party only)
    → MetricRecord ``"metrics"`` ``{"n-hat": n + Lap(1/ε_0), "repetition": r}`` (ε_0 = 0: the exact
    public n, for the methods without an n̂ query).
``op = "encode"`` with ``kprime``, ``n-hat`` and the budget and sketch parameters the server
assumes (:data:`BUDGET_FIELDS`; §18 round 1, to every party)
    → ArrayRecord ``"party-message"`` (:meth:`~fedpriv.clustering.party_message.PartyMessage.to_arrays`)
    and ConfigRecord ``"party"`` ``{"party": ℓ, "m_l", "k_l", "repetition": r}``.

No request or reply has a field for the hash key. Both sides import this module.
"""

from __future__ import annotations

from typing import Any

from fedpriv.clustering.methods import VerticalKMeansConfig, budget_for
from fedpriv.workloads.messages import Config, Message

__all__ = ["BUDGET_FIELDS", "COUNT", "ENCODE", "EPS0", "KPRIME", "N_HAT", "OP", "OPS", "PARTY_INFO", "PARTY_MESSAGE",
           "REPETITION", "count_request", "encode_fields", "encode_request"]

OP = "op"
COUNT = "count"
ENCODE = "encode"
#: The ops a party answers.
OPS: tuple[str, ...] = (COUNT, ENCODE)
REPETITION = "repetition"
EPS0 = "eps0"
KPRIME = "kprime"
#: The count the server uses (request field of encode) and the count a party released (reply of count).
N_HAT = "n-hat"
#: Request fields of ``encode`` that a party checks against its own configuration.
BUDGET_FIELDS: tuple[str, ...] = ("method", "eps1", "eps2", "delta2", "M", "gamma", "dplsf-preset", "hash-backend")
#: Reply records of ``encode``.
PARTY_MESSAGE = "party-message"
PARTY_INFO = "party"


def count_request(repetition: int, eps0: float) -> Message:
    """The count request of repetition ``repetition`` with the ε_0 the server assumes."""
    return Message({"config": Config({OP: COUNT, REPETITION: int(repetition), EPS0: float(eps0)})})


def encode_fields(cfg: VerticalKMeansConfig, repetition: int, kprime: int, n_hat: float,
                  parties: int) -> dict[str, Any]:
    """The encode request's ConfigRecord content: k', n̂ and the budget split of ``cfg`` at n̂ (§3.1, §18 round 1)."""
    budget = budget_for(cfg, n_hat, parties)
    return {OP: ENCODE, REPETITION: int(repetition), KPRIME: int(kprime), N_HAT: float(n_hat), "method": cfg.method,
            "eps1": budget.eps1, "eps2": budget.eps2, "delta2": budget.delta2, "M": cfg.M, "gamma": cfg.gamma,
            "dplsf-preset": cfg.dplsf_preset, "hash-backend": cfg.hash_backend}


def encode_request(cfg: VerticalKMeansConfig, repetition: int, kprime: int, n_hat: float, parties: int) -> Message:
    """The encode request of repetition ``repetition`` (:func:`encode_fields` as a message)."""
    return Message({"config": Config(encode_fields(cfg, repetition, kprime, n_hat, parties))})
