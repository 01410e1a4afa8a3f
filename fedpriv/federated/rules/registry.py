"""The registry of aggregation rules: the ``strategy`` names and the rule each builds (docs/robust_aggregation.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.federated.rules.base import AggregationRule, Parameter
from fedpriv.federated.rules.bulyan import Bulyan
from fedpriv.federated.rules.centeredclip import CenteredClip
from fedpriv.federated.rules.fedavg import FedAvg
from fedpriv.federated.rules.fedmedian import FedMedian
from fedpriv.federated.rules.fedtrimmedavg import FedTrimmedAvg
from fedpriv.federated.rules.krum import Krum, MultiKrum
from fedpriv.federated.rules.normbound import NormBound
from fedpriv.keys import Key
from fedpriv.registry import Names, Registry

__all__ = ["NEEDS_REFERENCE", "RULES", "get_rule", "register_rule", "rule_arguments", "rule_keys", "rule_parameters",
           "unregister_rule"]

#: Keywords ``aggregate`` takes itself: a rule's parameter cannot be named so.
_RESERVED = frozenset({"updates", "weights", "strategy", "num_malicious", "reference", "state"})


def _check_rule(name: str, rule: object) -> None:
    """Refuse anything but an :class:`AggregationRule` named ``name`` whose parameters clash with no other rule's."""
    if not isinstance(rule, AggregationRule):
        raise TypeError(f"aggregation rule {name!r} must be an AggregationRule instance, got {type(rule).__name__}")
    if rule.name != name:
        raise ValueError(f"aggregation rule {rule.name!r} cannot be registered under another name, {name!r}")
    for keyword, parameter in rule.parameters.items():
        if keyword in _RESERVED or not keyword.isidentifier():
            raise ValueError(f"aggregation rule {name!r}: {keyword!r} cannot name a parameter (reserved: "
                             f"{', '.join(sorted(_RESERVED))})")
        if not isinstance(parameter, Parameter):
            raise TypeError(f"aggregation rule {name!r}: parameter {keyword!r} must be a Parameter, got "
                            f"{type(parameter).__name__}")
        other = rule_parameters().get(keyword)  # only called by register(), after RULES exists
        if other is not None and other is not parameter:
            raise ValueError(f"aggregation rule {name!r}: parameter {keyword!r} is declared by another rule")


#: The aggregation rules: ``strategy`` name → rule (the built-ins, in the order docs and ``fedpriv keys`` list them).
RULES: Registry[AggregationRule] = Registry("aggregation rule", "strategy", {
    rule.name: rule for rule in (FedAvg(), FedMedian(), FedTrimmedAvg(), Krum(), MultiKrum(), NormBound(), Bulyan(),
                                 CenteredClip())}, home="fedpriv.federated.rules.registry:RULES", check=_check_rule)
#: The rules that work on updates relative to the current global model (``aggregate`` needs ``reference``).
NEEDS_REFERENCE: Names = Names(RULES, lambda rule: rule.needs_reference)


def get_rule(name: str) -> AggregationRule:
    """The rule registered as ``name`` (ValueError listing the registered names if none)."""
    return RULES.get_entry(name)


def register_rule(rule: AggregationRule) -> AggregationRule:
    """Make ``rule`` a valid ``strategy`` under ``rule.name``; returns it."""
    return RULES.register(getattr(rule, "name", ""), rule)


def unregister_rule(name: str) -> None:
    """Remove the rule ``name`` that :func:`register_rule` added (the built-ins stay)."""
    RULES.unregister(name)


def rule_parameters() -> dict[str, Parameter]:
    """Every registered rule's parameters, keyword → :class:`Parameter`."""
    return {keyword: p for rule in RULES.values() for keyword, p in rule.parameters.items()}


def rule_keys() -> dict[str, Key]:
    """The configuration keys of the built-in rules' parameters (part of federated LDP-SGD's key table)."""
    return {p.key: p.declaration for name in RULES if RULES.is_builtin(name)
            for p in RULES[name].parameters.values()}


def rule_arguments(config: Mapping[str, Any] | Any) -> dict[str, Any]:
    """``aggregate``'s parameter keywords read from ``config`` (a key it lacks: the declared default)."""
    return {keyword: (config[p.key] if p.key in config else p.default) for keyword, p in rule_parameters().items()}
