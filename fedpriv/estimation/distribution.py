"""The shared interface of numerical distribution / mean estimation under LDP, and its registry.

Every method (docs/square_wave_ems.md §2–§7) is a :class:`DistributionMethod`: a client-side
``perturb(values, rng)`` that turns each user's value in [0, 1] into one ε-LDP report, and a
server-side ``estimate(reports)`` that post-processes the reports of all users into a
:class:`DistributionEstimate`. Guarantee: each user's report is ε-LDP (pure, δ = 0) for one value
and one report; ``estimate`` is post-processing and costs no privacy.

Randomness contract (docs/design.md §4): ``perturb`` draws only through ``rng.random(shape)``,
``rng.standard_normal(shape)`` or ``rng.laplace(loc, scale, shape)`` with leading dimension n, so
``rng`` may be a numpy ``Generator`` or a :class:`fedpriv.rng.RowStreams` (row i from user i's own
stream): a Flower client answering alone draws exactly the bits it draws inside a batch.

Registry: :func:`get_method` builds a method by its config name (:data:`METHODS`). Each name lives
in the module :data:`METHOD_MODULES` names, imported lazily. A module provides a name either in a
module-level ``METHOD_FACTORIES: Mapping[str, Callable[..., DistributionMethod]]`` (called as
``factory(epsilon, d, **params)``) or as a concrete :class:`DistributionMethod` subclass whose
``name`` equals it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedpriv._frozen import Frozen
from fedpriv._validation import check_array, check_choice, check_epsilon, check_int
from fedpriv.rng import RowStreams

__all__ = [
    "METHODS",
    "METHOD_MODULES",
    "DistributionEstimate",
    "DistributionMethod",
    "bucket_centres",
    "check_reports",
    "check_values",
    "get_method",
    "histogram_moments",
]

#: Config name → module that provides it (imported on first use).
METHOD_MODULES: Mapping[str, str] = {
    "sw-ems": "fedpriv.estimation.sw_ems",
    "sw-em": "fedpriv.estimation.sw_ems",
    "grr": "fedpriv.estimation.cfo",
    "olh": "fedpriv.estimation.cfo",
    "oue": "fedpriv.estimation.cfo",
    "cfo-16": "fedpriv.estimation.cfo",
    "cfo-32": "fedpriv.estimation.cfo",
    "cfo-64": "fedpriv.estimation.cfo",
    "hh": "fedpriv.estimation.hierarchy",
    "haar-hrr": "fedpriv.estimation.hierarchy",
    "hh-admm": "fedpriv.estimation.hierarchy",
    "sr": "fedpriv.estimation.mean_mechanisms",
    "pm": "fedpriv.estimation.mean_mechanisms",
}
#: Every method name accepted by :func:`get_method`.
METHODS: tuple[str, ...] = tuple(METHOD_MODULES)


# --------------------------------------------------------------------------------------------
# boundary checks shared by every method
# --------------------------------------------------------------------------------------------


def check_values(values: Any, name: str = "values") -> np.ndarray:
    """Return ``values`` as a float64 (n,) array with n ≥ 1, every entry in the domain [0, 1]."""
    arr = check_array(values, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array (one value per user), got shape {arr.shape}")
    outside = (arr < 0.0) | (arr > 1.0)
    if np.any(outside):
        raise ValueError(
            f"{name} must lie in the domain [0, 1], got {int(outside.sum())} value(s) outside "
            f"(e.g. {float(arr[outside][0])!r}); rescale the attribute into [0, 1] with public bounds first"
        )
    return arr


def check_reports(reports: Any, fields: tuple[str, ...], name: str = "reports") -> dict[str, np.ndarray]:
    """Return the named per-user arrays of ``reports``, checked non-empty with one common first dimension n."""
    if not isinstance(reports, Mapping):
        raise TypeError(f"{name} must be a mapping of field name to array, got {type(reports).__name__}")
    missing = [f for f in fields if f not in reports]
    if missing:
        raise ValueError(f"{name} must hold the field(s) {', '.join(map(repr, fields))}, "
                         f"missing {', '.join(map(repr, missing))} (got {sorted(map(str, reports))})")
    out = {f: np.asarray(reports[f]) for f in fields}
    for f, arr in out.items():
        if arr.ndim == 0:
            raise ValueError(f"{name}[{f!r}] must have one row per user, got a scalar")
    sizes = {f: arr.shape[0] for f, arr in out.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"{name} fields must have the same number of rows (users), got {sizes}")
    if next(iter(sizes.values())) == 0:
        raise ValueError(f"{name} must hold at least one user's report, got an empty report set")
    return out


def bucket_centres(d: int) -> np.ndarray:
    """Bucket centres c_i = (i − ½)/d, i = 1..d, of the d-grid on [0, 1] (§9.5)."""
    d = check_int(d, "d", minimum=1)
    return (np.arange(d) + 0.5) / d


def histogram_moments(histogram: Any) -> tuple[float, float]:
    """Mean Σ x_i c_i and variance Σ x_i (c_i − μ)² of a d-bucket histogram at bucket centres (§9.5)."""
    x = check_array(histogram, "histogram")
    if x.ndim != 1:
        raise ValueError(f"histogram must be a 1-D array, got shape {x.shape}")
    c = bucket_centres(x.size)
    mean = float(x @ c)
    return mean, float(x @ (c - mean) ** 2)


# --------------------------------------------------------------------------------------------
# result and interface
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributionEstimate:
    """What the server learns from one report set (post-processing: no privacy cost).

    Attributes
    ----------
    histogram : np.ndarray of shape (d,) or None
        Estimated bucket frequencies on the d-grid of [0, 1], read-only. On the simplex for every
        method evaluated on the full metric set; range-query-only methods (HH, HaarHRR, §7.7–§7.8)
        may return negative entries. None for mean-only methods (SR, PM).
    mean : float or None
        Estimated mean: from the histogram at bucket centres c_i = (i − ½)/d (§9.5), or direct (SR, PM).
    variance : float or None
        Estimated variance, likewise.
    method : str
        The method's config name (``"sw-ems"``, ...).
    epsilon : float
        Each user's budget.
    iterations : int or None
        Iterations of an iterative post-processing (EM/EMS/ADMM), None otherwise.
    converged : bool
        False when the iteration stopped at its limit; ``warnings`` then says so.
    warnings : tuple of str
        Human-readable caveats (e.g. non-convergence).
    range_only : bool
        True for the range-query methods (HH, HaarHRR; docs/square_wave_ems.md §10, Table 3.2): the
        histogram is a signed vector summing to 1 that answers range queries, not a distribution,
        so it is scored on range queries only.
    """

    histogram: np.ndarray | None
    mean: float | None
    variance: float | None
    method: str
    epsilon: float
    iterations: int | None = None
    converged: bool = True
    warnings: tuple[str, ...] = ()
    range_only: bool = False

    def __post_init__(self) -> None:
        if self.range_only and self.histogram is None:
            raise ValueError("a range_only estimate needs a histogram (the signed leaves), got None")
        if self.histogram is not None:
            h = check_array(self.histogram, "histogram")
            if h.ndim != 1:
                raise ValueError(f"histogram must be a 1-D array of bucket frequencies, got shape {h.shape}")
            h = h.copy()
            h.setflags(write=False)
            object.__setattr__(self, "histogram", h)
        elif self.mean is None:
            raise ValueError("a DistributionEstimate needs a histogram or a mean, got neither")
        for field in ("mean", "variance"):
            v = getattr(self, field)
            if v is not None:
                if not np.isfinite(v):
                    raise ValueError(f"{field} must be finite or None, got {v!r}")
                object.__setattr__(self, field, float(v))
        if not isinstance(self.method, str) or not self.method:
            raise ValueError(f"method must be a non-empty string, got {self.method!r}")
        object.__setattr__(self, "epsilon", float(check_epsilon(self.epsilon)))
        if self.iterations is not None:
            object.__setattr__(self, "iterations", check_int(self.iterations, "iterations", minimum=0))
        object.__setattr__(self, "warnings", tuple(str(w) for w in self.warnings))

    @classmethod
    def from_histogram(
        cls,
        histogram: np.ndarray,
        method: str,
        epsilon: float,
        *,
        iterations: int | None = None,
        converged: bool = True,
        warnings: tuple[str, ...] = (),
    ) -> DistributionEstimate:
        """The estimate of a histogram, with mean and variance at bucket centres (§9.5)."""
        mean, variance = histogram_moments(histogram)
        return cls(histogram, mean, variance, method, epsilon, iterations, converged, warnings)


class DistributionMethod(Frozen):
    """One LDP method: client-side ``perturb`` (ε-LDP per user) and server-side ``estimate``.

    Parameters
    ----------
    epsilon : float
        Each user's budget (pure ε-LDP), > 0.
    d : int
        Number of histogram buckets on [0, 1], ≥ 2 (carried by mean-only methods too).

    Notes
    -----
    ``perturb`` takes values of shape (n,) in [0, 1] and returns a dict of arrays whose first
    dimension is n (one row per user); ``estimate`` takes the reports of all users concatenated
    along axis 0. ``perturb`` must draw only through ``rng.random``, ``rng.standard_normal`` or
    ``rng.laplace`` with leading dimension n (module docstring). Values that are not real numbers
    (text, complex, booleans) raise ``TypeError``. A method is immutable
    (:class:`fedpriv._frozen.Frozen`): its attributes cannot be set or deleted after construction.
    """

    name: ClassVar[str]
    _rebuild_hint = "build a new method instead, e.g. fedpriv.estimation.get_method(name, epsilon, d, ...)"

    def __init__(self, epsilon: float, d: int) -> None:
        eps = check_epsilon(epsilon)
        if not isinstance(eps, float):
            raise TypeError(f"epsilon must be a scalar for a distribution method, got an array of shape {eps.shape}")
        self.epsilon: float = eps
        self.d: int = check_int(d, "d", minimum=2)

    @abstractmethod
    def perturb(self, values: np.ndarray, rng: np.random.Generator | RowStreams) -> dict[str, np.ndarray]:
        """Each user's ε-LDP report: a dict of arrays with one row per user."""

    @abstractmethod
    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Post-process the reports of all users into an estimate."""

    @property
    def guarantee(self) -> str:
        """One line: what one call of ``perturb`` guarantees each user."""
        return f"{self.epsilon:g}-LDP per user (pure, δ = 0), one report of one value in [0, 1]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon:g}, d={self.d})"


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------


def _factory(name: str) -> Callable[..., DistributionMethod]:
    """The constructor of method ``name`` from its module (METHOD_FACTORIES entry or subclass named so)."""
    module_name = METHOD_MODULES[name]
    if importlib.util.find_spec(module_name) is None:
        raise ImportError(f"method {name!r} is provided by module {module_name}, which is not available")
    module = importlib.import_module(module_name)
    factories = getattr(module, "METHOD_FACTORIES", {})
    if name in factories:
        return factories[name]
    classes = {
        obj for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, DistributionMethod) and not inspect.isabstract(obj)
        and getattr(obj, "name", None) == name
    }
    if len(classes) != 1:
        raise ImportError(f"module {module_name} must define exactly one DistributionMethod named {name!r} "
                          f"(or a METHOD_FACTORIES entry), found {len(classes)}")
    return classes.pop()


def get_method(name: str, epsilon: float, d: int, **params: Any) -> DistributionMethod:
    """Build the method registered as ``name`` (one of :data:`METHODS`) with budget ε and d buckets."""
    check_choice(name, "name", METHODS)
    return _factory(name)(epsilon, d, **params)
