"""The one base of every exception fedpriv defines: ``except FedprivError`` catches all of them (docs/design.md §8).

Bad input is refused with Python's own ``ValueError`` or ``TypeError`` naming the parameter and
what is allowed, as numpy and scikit-learn do. The classes below name the other failures: a run,
a protocol, a node, a deployment that cannot go on. Each also keeps the built-in base it always
had (``ValueError``, ``RuntimeError``), so code that catches those still does.
"""

from __future__ import annotations

__all__ = ["FedprivError"]


class FedprivError(Exception):
    """Base of the exceptions fedpriv defines (not of the ``ValueError``/``TypeError`` that refuse bad input)."""
