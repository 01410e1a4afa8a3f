"""The mechanisms demo behind ``fedpriv mechanisms``: predicted vs empirical error of mean estimation.

n users each hold one value in [-1, 1] and report it once through a mechanism with budget ε; the
collector averages the reports. The predicted MSE of that average is
(1/n²)·Σ_i v(x_i) + (mean bias)², from the mechanism's own ``var`` and ``bias``; the empirical MSE
comes from ``reps`` independent repetitions, each drawn from its own keyed stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from fedpriv.mechanisms import MECHANISMS, get_mechanism
from fedpriv.mechanisms.registry import example_params
from fedpriv.rng import SERVER, stream

__all__ = ["DemoRow", "default_mechanisms", "run_demo"]

def default_mechanisms() -> dict[str, dict]:
    """Every registered mechanism with the parameters it needs besides ε (δ = 1e-5 for the Gaussian)."""
    return {name: example_params(name) for name in MECHANISMS}


@dataclass(frozen=True)
class DemoRow:
    """One (mechanism, ε) cell of the demo."""

    mechanism: str
    epsilon: float
    delta: float
    predicted_mse: float
    empirical_mse: float
    empirical_se: float
    z: float
    bias_sq: float

    def as_dict(self) -> dict:
        """JSON-ready view."""
        return asdict(self)


def demo_values(n: int, seed: int) -> np.ndarray:
    """The users' values: a skewed Beta(2, 5) population mapped to [-1, 1] (keyed, reproducible)."""
    return 2.0 * stream(seed, 0, SERVER, "demo-data").beta(2.0, 5.0, size=n) - 1.0


def run_demo(
    epsilons: Sequence[float],
    *,
    n: int = 10_000,
    reps: int = 200,
    seed: int = 0,
    mechanisms: dict[str, dict] | None = None,
    on_cell: Callable[[], None] | None = None,
) -> list[DemoRow]:
    """Measure the empirical MSE of the mean of n reports against the predicted MSE, per cell."""
    mechanisms = default_mechanisms() if mechanisms is None else mechanisms
    x = demo_values(n, seed)
    truth = float(x.mean())
    rows = []
    for name, params in mechanisms.items():
        for i, eps in enumerate(epsilons):
            mech = get_mechanism(name, float(eps), **params)
            bias = float(mech.bias(x).mean())
            predicted = float(mech.var(x).sum()) / n**2 + bias**2
            rng = stream(seed, i + 1, SERVER, f"demo-{name}")
            estimates = mech.perturb(np.broadcast_to(x, (reps, n)), rng).mean(axis=1)
            sq_err = (estimates - truth) ** 2
            emp, se = float(sq_err.mean()), float(sq_err.std(ddof=1) / math.sqrt(reps))
            rows.append(
                DemoRow(name, float(eps), mech.guarantee.delta, predicted, emp, se, (emp - predicted) / se, bias**2)
            )
            if on_cell is not None:
                on_cell()
    return rows
