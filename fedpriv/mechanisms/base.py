"""The mechanism interface (docs/design.md §5, docs/ldp_mechanisms.md §1.3) and its privacy guarantee record."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedpriv._frozen import Frozen
from fedpriv._validation import as_real_array, check_array, check_epsilon, check_in_domain
from fedpriv.rng import Draws, check_draws

__all__ = ["Guarantee", "Mechanism"]


@dataclass(frozen=True)
class Guarantee:
    """What one call of a mechanism or perturbation guarantees.

    Attributes
    ----------
    epsilon : float
        The ε of the release (for per-user budgets: the largest one; ``epsilon_per_user`` has all).
    delta : float
        The δ of the release; 0 for pure ε-LDP.
    relation : str
        The neighbouring relation: ``"any-two-inputs"`` (local DP: any two values of the input
        domain) or ``"add-remove-one-example"`` (central DP, e.g. GeoDP).
    scope : str
        What one release covers (``"one value"``, ``"one update vector"``, ...).
    holds : bool
        False when the configuration voids the claim (e.g. LDPVec ``region="none"`` with β < 1);
        ``note`` then says why.
    note : str
        Caveats in words.
    epsilon_per_user : np.ndarray or None
        Per-user budgets for personalized LDP, as given.
    """

    epsilon: float
    delta: float = 0.0
    relation: str = "any-two-inputs"
    scope: str = "one value"
    holds: bool = True
    note: str = ""
    epsilon_per_user: np.ndarray | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view (per-user budgets summarised by min/max)."""
        out: dict[str, Any] = {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "relation": self.relation,
            "scope": self.scope,
            "holds": self.holds,
            "note": self.note,
        }
        if self.epsilon_per_user is not None:
            out["epsilon_min"] = float(np.min(self.epsilon_per_user))
        return out


class Mechanism(Frozen):
    """A local randomizer on a scalar input domain, applied elementwise and vectorized.

    ``epsilon`` is fixed at construction and may be an array that broadcasts against the input
    (personalized LDP, docs/ldp_mechanisms.md §9). Inputs outside :attr:`input_domain` raise
    ``ValueError``: mechanisms never clip (callers clip explicitly and report it); inputs that are
    not real numbers (text, complex, booleans) raise ``TypeError``. All methods are pure numpy with
    no Python loop over values; ``perturb`` draws from the ``rng`` it is given.

    A mechanism is immutable (:class:`fedpriv._frozen.Frozen`): assigning or deleting any attribute
    after construction raises ``AttributeError``, so :attr:`guarantee` always describes the noise
    ``perturb`` draws. Build a new mechanism for other parameters.
    """

    _rebuild_hint = "build a new mechanism instead, e.g. fedpriv.mechanisms.get_mechanism(name, epsilon, ...)"

    name: ClassVar[str]
    bounded: ClassVar[bool]
    #: The matplotlib colour of its curves in plots.
    colour: ClassVar[str] = "tab:gray"
    unbiased: ClassVar[bool] = True
    discrete: ClassVar[bool] = False  # True when outputs are atoms (``density`` is then a pmf)

    def __init__(self, epsilon: float | np.ndarray) -> None:
        self._epsilon = check_epsilon(epsilon)

    # ------------------------------------------------------------------ properties
    @property
    def epsilon(self) -> float | np.ndarray:
        """The per-value budget ε (a float or a read-only array)."""
        return self._epsilon

    @property
    def input_domain(self) -> tuple[float, float]:
        """The native input interval ``(lo, hi)`` (may be arrays for adapted mechanisms)."""
        return (-1.0, 1.0)

    @property
    @abstractmethod
    def output_range(self) -> tuple[Any, Any]:
        """Smallest interval holding every output: ``(-inf, inf)`` for unbounded mechanisms."""

    @property
    def guarantee(self) -> Guarantee:
        """The privacy guarantee of one call on one value."""
        eps = self._epsilon
        per_user = eps if isinstance(eps, np.ndarray) else None
        return Guarantee(epsilon=float(np.max(eps)), delta=self._delta_value(), epsilon_per_user=per_user)

    def _delta_value(self) -> float:
        return 0.0

    # ------------------------------------------------------------------ checks
    def _check_input(self, x: Any, name: str = "x") -> np.ndarray:
        """Validate ``x`` (finite, non-empty, inside the input domain) and return it as float64."""
        arr = check_array(x, name)
        lo, hi = self.input_domain
        check_in_domain(arr, lo, hi, name)
        return arr

    def _shape(self, x: np.ndarray) -> tuple[int, ...]:
        """Shape of an output: ``x`` broadcast against the budget (and any array parameter)."""
        return np.broadcast_shapes(x.shape, np.shape(self._epsilon))

    # ------------------------------------------------------------------ the contract
    def perturb(self, x: Any, rng: Draws) -> np.ndarray:
        """Privatize every entry of ``x`` independently; returns float64 of the broadcast shape.

        ``rng`` may be a :class:`fedpriv.rng.RowStreams` over the rows of a batch (leading axis of
        the broadcast shape): row i then gets exactly the draws of ``perturb(x[i], generators[i])``;
        or a :class:`fedpriv.rng.StreamRows`: ``x`` holds rows ``start:stop`` of a batch that draws
        from one stream, and gets exactly those rows of the batch's draws (a mechanism's draws
        depend on the shape of ``x`` only, never on its values).
        """
        check_draws(rng)
        return self._perturb(self._check_input(x), rng)

    def mean(self, x: Any) -> np.ndarray:
        """Conditional mean μ(x) = E[y | x]."""
        return self._mean(self._check_input(x))

    def bias(self, x: Any) -> np.ndarray:
        """Bias β(x) = μ(x) − x."""
        arr = self._check_input(x)
        return self._mean(arr) - arr

    def var(self, x: Any) -> np.ndarray:
        """Conditional variance v(x) = Var[y | x]."""
        return self._var(self._check_input(x))

    def abs3(self, x: Any) -> np.ndarray:
        """Third absolute central moment κ(x) = E|y − μ(x)|³ (for Berry–Esseen bounds)."""
        return self._abs3(self._check_input(x))

    def density(self, y: Any, x: Any) -> np.ndarray:
        """Output density p(y | x) (for discrete outputs: the probability of the atom ``y``)."""
        return self._density(as_real_array(y, "y"), self._check_input(x))

    @abstractmethod
    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray: ...

    @abstractmethod
    def _mean(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _var(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _abs3(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray: ...

    def __repr__(self) -> str:
        eps = self._epsilon
        eps_s = f"{eps:g}" if isinstance(eps, float) else f"array{np.shape(eps)}"
        return f"{type(self).__name__}(epsilon={eps_s})"
