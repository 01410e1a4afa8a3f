"""Mechanisms, perturbations and LDP randomizers are immutable once built (fedpriv/_frozen.py).

Their ``guarantee`` is computed from the parameters they were built with; if ``mech.scale`` could be
reassigned, the noise would change while the guarantee still stated the old ε (an audit measured 2ε
on such an object). Every object below must refuse to set or delete any attribute, public or private,
keep its numpy arrays read-only, draw the same noise from the same key before and after a refused
change, and stay frozen through pickling and copying.
"""

from __future__ import annotations

import copy
import inspect
import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fedpriv.estimation.distribution import METHODS, get_method
from fedpriv.estimation.waves import DiscreteSquareWave, GeneralWave
from fedpriv.mechanisms import MECHANISMS, AffineAdapter, LaplaceMechanism, get_mechanism, mechanism_params
from fedpriv.perturbation import PERTURBATIONS, get_perturbation
from fedpriv.rng import stream

D = 12  # length of the update vectors


def _key():
    return stream(7, 1, 2, "frozen")


# ------------------------------------------------------------------------------ every frozen object
MECHANISM_PARAMS: dict[str, dict[str, Any]] = {
    "laplace": {}, "gaussian": {"delta": 1e-5}, "piecewise": {}, "duchi": {}, "square_wave": {},
}
PERTURBATION_PARAMS: dict[str, dict[str, Any]] = {
    "none": {"clip_norm": 1.0},
    "coordinatewise": {"mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-5, "clip_norm": 1.0,
                       "mechanism_params": {"calibration": "analytic"}},
    "ldpvec": {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0,
               "coord_permutation": torch.arange(D - 1, -1, -1)},
    "geodp": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
    "dpsgd": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
}


def _mechanism_case(mech) -> tuple[Any, Callable, Callable]:
    lo, hi = mech.input_domain
    x = np.broadcast_to((np.asarray(lo) + np.asarray(hi)) / 2.0, (3, *np.shape(lo))).copy()
    return mech, (lambda: mech.perturb(x, _key())), (lambda: mech.guarantee)


def _perturbation_case(p) -> tuple[Any, Callable, Callable]:
    update = torch.linspace(-0.2, 0.3, D, dtype=torch.float64)
    return p, (lambda: p.perturb(update, _key()).vector.numpy()), (lambda: p.guarantee_for(D))


def _method_case(method) -> tuple[Any, Callable, Callable]:
    values = np.linspace(0.0, 1.0, 9)
    return method, (lambda: method.perturb(values, _key())), (lambda: method.guarantee)


def _wave_case(wave, values) -> tuple[Any, Callable, Callable]:
    return wave, (lambda: wave.perturb(values, _key())), (lambda: repr(wave))


CASES: dict[str, Callable[[], tuple[Any, Callable, Callable]]] = {
    **{f"mechanism-{n}": (lambda n=n: _mechanism_case(get_mechanism(n, 1.0, **MECHANISM_PARAMS[n]))) for n in MECHANISMS},
    "mechanism-per-user-epsilon": lambda: _mechanism_case(get_mechanism("laplace", np.array([0.5, 1.0, 2.0]))),
    "mechanism-analytic-gaussian": lambda: _mechanism_case(get_mechanism("gaussian", 2.0, delta=1e-6,
                                                                         calibration="analytic")),
    "adapter": lambda: _mechanism_case(AffineAdapter(get_mechanism("piecewise", 1.0),
                                                     (np.array([0.0, -2.0]), np.array([1.0, 2.0])))),
    **{f"perturbation-{n}": (lambda n=n: _perturbation_case(get_perturbation(n, **PERTURBATION_PARAMS[n])))
       for n in PERTURBATIONS},
    **{f"method-{n}": (lambda n=n: _method_case(get_method(n, 1.0, 16))) for n in METHODS},
    "discrete-square-wave": lambda: _wave_case(DiscreteSquareWave(1.0, 16), np.arange(16)),
    "general-wave": lambda: _wave_case(GeneralWave(1.0, 0.3, 0.5), np.linspace(0.0, 1.0, 9)),
}

#: Attributes tried on every object besides its own: the privacy parameters by their usual names.
USUAL = ("scale", "epsilon", "_epsilon", "sigma", "delta", "sensitivity", "clip_norm", "mechanism", "inner",
         "mechanism_params", "_cache", "new_attribute")


def _same(a: Any, b: Any) -> bool:
    """Bit-identical draws (dicts of arrays for the distribution methods)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    return np.array_equal(a, b)


def _changed(value: Any) -> Any:
    """A different value of the same kind (what a mutation would try)."""
    if isinstance(value, (float, int, np.ndarray)) and not isinstance(value, bool):
        return np.asarray(value) * 2.0 + 1.0
    return 2.0


@pytest.mark.parametrize("case", CASES)
def test_setting_or_deleting_any_attribute_is_refused_and_changes_nothing(case: str) -> None:
    obj, draw, claim = CASES[case]()
    before, stated = draw(), claim()
    cls = type(obj).__name__
    for attr in sorted(set(vars(obj)) | set(USUAL)):
        with pytest.raises(AttributeError, match=rf"^{cls}\.{attr} cannot be set after construction: .*build a new"):
            setattr(obj, attr, _changed(getattr(obj, attr, 1.0)))
        if attr in vars(obj):
            with pytest.raises(AttributeError, match=rf"^{cls}\.{attr} cannot be deleted after construction"):
                delattr(obj, attr)
    assert claim() == stated  # the guarantee still says what it said ...
    assert _same(draw(), before)  # ... and the same key still draws the same noise


#: The objects above that hold numpy arrays (scalar budgets give numpy scalars, which are immutable).
ARRAY_CASES = ["mechanism-gaussian", "mechanism-per-user-epsilon", "mechanism-analytic-gaussian", "adapter",
               "method-hh", "method-hh-admm"]


@pytest.mark.parametrize("case", ARRAY_CASES)
def test_array_attributes_are_read_only(case: str) -> None:
    obj, draw, _ = CASES[case]()
    before = draw()
    arrays = {k: v for k, v in vars(obj).items() if isinstance(v, np.ndarray)}
    assert arrays
    for name, arr in arrays.items():
        assert not arr.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = 0.0
    assert _same(draw(), before)


@pytest.mark.parametrize("clone", [
    pytest.param(lambda o: pickle.loads(pickle.dumps(o)), id="pickle"),
    pytest.param(copy.deepcopy, id="deepcopy"),
    pytest.param(copy.copy, id="copy"),
])
@pytest.mark.parametrize("case", ["mechanism-gaussian", "mechanism-per-user-epsilon", "adapter",
                                  "perturbation-coordinatewise", "perturbation-ldpvec", "method-sw-ems"])
def test_copies_are_frozen_too(case: str, clone: Callable) -> None:
    obj, draw, claim = CASES[case]()
    twin = clone(obj)
    with pytest.raises(AttributeError, match="cannot be set after construction"):
        twin.epsilon = 5.0
    assert all(not v.flags.writeable for v in vars(twin).values() if isinstance(v, np.ndarray))
    again = {"mechanism": _mechanism_case, "perturbation": _perturbation_case, "method": _method_case,
             "adapter": _mechanism_case}[case.split("-")[0]](twin)
    assert _same(again[1](), draw()) and again[2]() == claim()


def test_a_refused_scale_change_leaves_the_noise_the_guarantee_describes() -> None:
    """Laplace at ε = 1 promises λ = 2/ε; after a refused ``scale = 2λ`` the draws still have Var = 2λ².

    n = 2e5 draws at x = 0. The sample variance of Laplace(λ) has standard error
    sqrt((μ₄ − σ⁴)/n) = sqrt((24 − 4)/n)·λ² (μ₄ = 24λ⁴, σ² = 2λ²); the tolerance is 5 of them
    (1.0% of 2λ²). A doubled scale would give 4× the variance.
    """
    mech = get_mechanism("laplace", 1.0)
    x = np.zeros(200_000)
    first = mech.perturb(x, stream(3, 0, 0, "scale"))
    with pytest.raises(AttributeError, match=r"LaplaceMechanism\.scale cannot be set"):
        mech.scale = mech.scale * 2.0
    second = mech.perturb(x, stream(3, 0, 0, "scale"))
    np.testing.assert_array_equal(second, first)  # same key, same draws
    lam = 2.0 / mech.guarantee.epsilon
    se = math.sqrt(20.0 / x.size) * lam**2
    assert abs(float(np.var(mech.perturb(x, stream(3, 0, 1, "scale")))) - 2.0 * lam**2) <= 5.0 * se


def test_a_subclass_sets_attributes_in_its_own_init_then_is_frozen() -> None:
    """The freeze takes effect when the outermost ``__init__`` returns, not the base class's."""

    class Doubled(LaplaceMechanism):
        def __init__(self, epsilon: float) -> None:
            super().__init__(epsilon)
            self.scale = self.scale / 2.0  # after super().__init__: allowed while building
            self.note = "half scale"

    mech = Doubled(1.0)
    assert float(mech.scale) == 1.0 and mech.note == "half scale"
    with pytest.raises(AttributeError, match=r"Doubled\.scale cannot be set"):
        mech.scale = 2.0


def test_the_callers_arrays_are_not_shared() -> None:
    """An array the caller passed in and later changes does not change the object."""
    lo, hi = np.array([0.0, -2.0]), np.array([1.0, 2.0])
    adapter = AffineAdapter(get_mechanism("piecewise", 1.0), (lo, hi))
    lo[0], hi[1] = -50.0, 50.0
    np.testing.assert_array_equal(adapter.input_domain[0], [0.0, -2.0])
    np.testing.assert_array_equal(adapter.input_domain[1], [1.0, 2.0])

    perm = torch.arange(D - 1, -1, -1)
    p = get_perturbation("ldpvec", mechanism="laplace", epsilon=1.0, clip_norm=1.0, coord_permutation=perm)
    perm[:2] = perm[:2].flip(0)
    assert torch.equal(p.coord_permutation, torch.arange(D - 1, -1, -1))

    params = {"calibration": "analytic"}
    cw = get_perturbation("coordinatewise", mechanism="gaussian", epsilon=1.0, delta=1e-5, clip_norm=1.0,
                          mechanism_params=params)
    params["calibration"] = "classical"
    cw.mechanism_params["calibration"] = "classical"  # a copy: changes nothing
    assert cw.mechanism_params == {"calibration": "analytic"}
    assert cw.mechanism_for(D).calibration == "analytic"


def test_constructor_signatures_are_visible() -> None:
    """``inspect.signature`` of a frozen class shows its constructor (``mechanism_params`` relies on it)."""
    assert list(inspect.signature(LaplaceMechanism).parameters) == ["epsilon", "abs3_form"]
    assert mechanism_params("gaussian") == ("delta", "sensitivity", "calibration")
    assert mechanism_params("square_wave") == ("domain", "debias")
