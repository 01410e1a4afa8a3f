"""Boundary checks: the budget floor, and that every mechanism stays finite down to it."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv._validation import EPSILON_FLOOR, check_epsilon
from fedpriv.mechanisms import MECHANISMS, get_mechanism
from fedpriv.rng import stream


def test_budget_below_the_floor_is_rejected() -> None:
    with pytest.raises(ValueError, match="epsilon must be >= 1e-50"):
        check_epsilon(1e-320)
    with pytest.raises(ValueError, match="epsilon must be >= 1e-50"):
        check_epsilon(np.array([1.0, 1e-60]))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_is_finite_at_the_budget_floor(name: str) -> None:
    params = {"delta": 1e-5} if name == "gaussian" else {}
    mech = get_mechanism(name, EPSILON_FLOOR, **params)
    x = np.array([-1.0, 0.0, 1.0])
    with np.errstate(all="raise"):
        for values in (mech.perturb(x, stream(0, 0, 0, "floor")), mech.var(x), mech.abs3(x), mech.mean(x)):
            assert np.all(np.isfinite(values))
