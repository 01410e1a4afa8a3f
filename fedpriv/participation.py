"""How many clients take part in a federated round: the one rule the server's sampler and the attacks share.

:func:`fedpriv.federated.sampling.sample_clients` draws :func:`round_size` clients each round, and the
``scaling`` attack boosts by the same number by default (:func:`fedpriv.attacks.parameters.attack_scale`,
docs/attacks.md §2).
"""

from __future__ import annotations

import math

from fedpriv._validation import check_int, check_probability

__all__ = ["round_size"]


def round_size(num_available: int, fraction: float, minimum: int = 1) -> int:
    """How many clients a round samples: ``min(num_available, max(minimum, ceil(fraction · num_available)))``."""
    num_available = check_int(num_available, "num_available", minimum=1)
    fraction = check_probability(fraction, "fraction-train")
    return min(num_available, max(check_int(minimum, "minimum", minimum=1), math.ceil(fraction * num_available)))
