"""What an aggregation rule is: a name, what it computes, its assumption on the attackers, its parameters and style.

A rule is one module with one :class:`AggregationRule` subclass; registering an instance
(:func:`fedpriv.federated.rules.register_rule`) makes its name a valid ``strategy`` everywhere
(the configuration key, :func:`fedpriv.federated.aggregate.aggregate`, Flower's ``LdpFedAvg``,
the plots). docs/robust_aggregation.md, "Adding a rule", walks through one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_int, check_positive
from fedpriv.keys import Key

__all__ = ["AggregationRule", "HonestMajorityRule", "Parameter", "count_parameter", "honest_majority", "positive_parameter"]


@dataclass(frozen=True)
class Parameter:
    """A rule's parameter: its keyword in ``aggregate``, its configuration key, and how a value is checked.

    ``check(value, keyword)`` returns the value as the rule uses it, or raises ``TypeError`` /
    ``ValueError`` naming ``keyword``.
    """

    key: str
    declaration: Key
    check: Callable[[Any, str], Any] = field(repr=False)

    @property
    def default(self) -> Any:
        """The declared default."""
        return self.declaration.default


def positive_parameter(value: Any, keyword: str) -> float:
    """``value`` as a float after checking it is finite and > 0."""
    return float(check_positive(value, keyword))


def count_parameter(value: Any, keyword: str) -> int:
    """``value`` as an int after checking it is an integer >= 1."""
    return check_int(value, keyword, minimum=1)


def honest_majority(rule: str, k: int, f: int) -> str | None:
    """The refusal of a rule that needs ``2f < K``, or ``None``."""
    if 2 * f < k:
        return None
    return (f"{rule} with num-malicious={f} needs an honest majority, 2*num_malicious < updates, i.e. more than "
            f"{2 * f} updates, got {k}")


class AggregationRule(ABC):
    """A server-side rule turning a round's ``K`` flat uploads into the next global model (float64, no client loop).

    Class attributes: ``name`` (the ``strategy`` value), ``summary`` (one line, with its source),
    ``colour`` (its curves' matplotlib colour), ``needs_reference`` (it works on updates relative to
    the current global model, which the caller passes as ``reference``), ``uses_weights`` (it uses
    the clients' weights ``p_k``) and ``parameters`` (keyword → :class:`Parameter`).
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    colour: ClassVar[str] = "tab:gray"
    needs_reference: ClassVar[bool] = False
    uses_weights: ClassVar[bool] = False
    parameters: ClassVar[Mapping[str, Parameter]] = {}

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        """Why this rule cannot defend against ``f`` attackers among ``k`` updates, or ``None`` (default: no assumption)."""
        return None

    @abstractmethod
    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        """The aggregate of ``updates`` (K, d) (float64 and finite unless :attr:`raw_updates`) as a (d,) float64 vector.

        ``weights`` are finite, >= 0 with a positive sum; ``reference`` is the checked global model
        when :attr:`needs_reference`; ``params`` holds this rule's checked parameters; ``state`` is
        what :meth:`carry` returned after the previous round (``None`` in round 1), checked to shape (d,).
        """

    #: Whether :meth:`combine` takes the updates as given (any real dtype, not yet checked finite) and checks them itself.
    raw_updates: ClassVar[bool] = False

    def carry(self, aggregated: np.ndarray, reference: np.ndarray) -> np.ndarray | None:
        """What the next round's :meth:`combine` gets as ``state`` (default: nothing; the server commits it with the model)."""
        return None


class HonestMajorityRule(AggregationRule):
    """A rule whose assumption is an honest majority, ``2f < K`` (:func:`honest_majority`)."""

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        return honest_majority(self.name, k, f)
