"""Aggregation rules, one module each, and their registry (docs/robust_aggregation.md).

``base.py`` says what a rule is (:class:`AggregationRule`, :class:`Parameter`); ``registry.py`` maps
the ``strategy`` names to rules; one module per built-in rule (FedAvg, FedMedian, FedTrimmedAvg,
Krum and Multi-Krum, norm bounding, Bulyan, centered clipping). Nothing here imports Flower.
"""

from fedpriv.federated.rules.base import AggregationRule, Parameter
from fedpriv.federated.rules.registry import (
    NEEDS_REFERENCE,
    RULES,
    get_rule,
    register_rule,
    rule_arguments,
    rule_keys,
    rule_parameters,
    unregister_rule,
)

__all__ = ["NEEDS_REFERENCE", "RULES", "AggregationRule", "Parameter", "get_rule", "register_rule", "rule_arguments",
           "rule_keys", "rule_parameters", "unregister_rule"]
