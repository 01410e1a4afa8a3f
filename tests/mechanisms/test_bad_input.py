"""Bad-input tables: every rejection is a ValueError/TypeError whose message names the parameter."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedpriv.mechanisms import AffineAdapter, gaussian_sigma, get_mechanism
from fedpriv.rng import stream

from ._support import CONFIGS, params

GOOD_RNG = stream(0, 0, 0, "bad-input")

# ------------------------------------------------------------------------------ constructor arguments
BAD_EPSILON = [
    pytest.param(0.0, ValueError, r"epsilon must be > 0 and finite, got 0\.0", id="zero"),
    pytest.param(-1.0, ValueError, r"epsilon must be > 0 and finite, got -1\.0", id="negative"),
    pytest.param(float("nan"), ValueError, r"epsilon must be > 0 and finite, got nan", id="nan"),
    pytest.param(float("inf"), ValueError, r"epsilon must be > 0 and finite, got inf", id="inf"),
    pytest.param(-np.inf, ValueError, r"epsilon must be > 0 and finite", id="-inf"),
    pytest.param(np.array([]), ValueError, r"epsilon must be .*non-empty", id="empty-array"),
    pytest.param([], ValueError, r"epsilon must be .*non-empty", id="empty-list"),
    pytest.param(np.array([1.0, 0.0]), ValueError, r"epsilon must be > 0 and finite, got (np\.float64\()?0\.0", id="array-with-zero"),
    pytest.param(np.array([[1.0], [np.nan]]), ValueError, r"epsilon must be > 0 and finite", id="array-with-nan"),
    pytest.param(True, TypeError, r"epsilon must be a positive finite number", id="bool"),
    pytest.param(np.True_, TypeError, r"epsilon must be a positive finite number", id="numpy-bool"),
    pytest.param("1.0", TypeError, r"epsilon must be a positive finite number", id="string"),
    pytest.param(None, TypeError, r"epsilon must be a positive finite number", id="none"),
    pytest.param(1 + 1j, TypeError, r"epsilon must be a positive finite number", id="complex"),
]


@pytest.mark.parametrize("epsilon, exc, match", BAD_EPSILON)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_bad_epsilon_is_rejected(cfg, epsilon, exc, match):
    with pytest.raises(exc, match=match):
        cfg.build(epsilon)


@pytest.mark.parametrize(
    "name, kwargs, exc, match",
    [
        # gaussian δ
        ("gaussian", {}, TypeError, r"delta"),
        ("gaussian", {"delta": 0.0}, ValueError, r"delta must be in the open interval \(0, 1\), got 0\.0"),
        ("gaussian", {"delta": 1.0}, ValueError, r"delta must be in the open interval \(0, 1\), got 1\.0"),
        ("gaussian", {"delta": -1e-5}, ValueError, r"delta must be in the open interval"),
        ("gaussian", {"delta": 1.5}, ValueError, r"delta must be in the open interval"),
        ("gaussian", {"delta": float("nan")}, ValueError, r"delta must be in the open interval"),
        ("gaussian", {"delta": float("inf")}, ValueError, r"delta must be in the open interval"),
        ("gaussian", {"delta": np.array([])}, ValueError, r"delta must be in the open interval"),
        ("gaussian", {"delta": True}, TypeError, r"delta must be a number in \(0, 1\)"),
        ("gaussian", {"delta": "1e-5"}, TypeError, r"delta must be a number in \(0, 1\)"),
        ("gaussian", {"delta": None}, TypeError, r"delta must be a number in \(0, 1\)"),
        # gaussian sensitivity / calibration
        ("gaussian", {"delta": 1e-5, "sensitivity": 0.0}, ValueError, r"sensitivity must be > 0 and finite"),
        ("gaussian", {"delta": 1e-5, "sensitivity": -2.0}, ValueError, r"sensitivity must be > 0 and finite"),
        ("gaussian", {"delta": 1e-5, "sensitivity": float("nan")}, ValueError, r"sensitivity must be > 0"),
        ("gaussian", {"delta": 1e-5, "sensitivity": float("inf")}, ValueError, r"sensitivity must be > 0"),
        ("gaussian", {"delta": 1e-5, "sensitivity": True}, TypeError, r"sensitivity must be a real number"),
        ("gaussian", {"delta": 1e-5, "calibration": "exact"}, ValueError, r"calibration must be one of 'classical', 'analytic', got 'exact'"),
        ("gaussian", {"delta": 1e-5, "calibration": None}, ValueError, r"calibration must be one of"),
        # square wave
        ("square_wave", {"domain": "box"}, ValueError, r"domain must be one of 'sym', 'unit', got 'box'"),
        ("square_wave", {"domain": None}, ValueError, r"domain must be one of"),
        ("square_wave", {"debias": "yes"}, TypeError, r"debias must be a bool, got 'yes'"),
        ("square_wave", {"debias": 1}, TypeError, r"debias must be a bool"),
        # laplace
        ("laplace", {"abs3_form": "thesis"}, ValueError, r"abs3_form must be one of 'correct', 'source', got 'thesis'"),
        ("laplace", {"abs3_form": 3}, ValueError, r"abs3_form must be one of"),
        # unknown parameters: named, and the allowed ones listed
        ("laplace", {"delta": 0.1}, TypeError, r"unknown parameter\(s\) delta; allowed: abs3_form"),
        ("piecewise", {"domain": "unit"}, TypeError, r"unknown parameter\(s\) domain; allowed: none"),
        ("duchi", {"debias": True}, TypeError, r"unknown parameter\(s\) debias"),
        ("square_wave", {"delta": 0.1, "sigma": 1.0}, TypeError, r"unknown parameter\(s\) delta, sigma; allowed: domain, debias"),
        ("gaussian", {"delta": 1e-5, "clip": 1.0}, TypeError, r"unknown parameter\(s\) clip"),
        # mechanism name
        ("staircase", {}, ValueError, r"name must be one of 'laplace', 'gaussian', 'piecewise', 'duchi', 'square_wave', got 'staircase'"),
        ("Laplace", {}, ValueError, r"name must be one of .* got 'Laplace'"),
        (3, {}, TypeError, r"name must be a string, got 3"),
        (None, {}, TypeError, r"name must be a string"),
    ],
)
def test_bad_constructor_argument_is_rejected(name, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        get_mechanism(name, 1.0, **kwargs)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"epsilon": 0.0, "delta": 1e-5}, ValueError, r"epsilon must be > 0"),
        ({"epsilon": 1.0, "delta": 0.0}, ValueError, r"delta must be in the open interval"),
        ({"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0.0}, ValueError, r"sensitivity must be > 0"),
        ({"epsilon": 1.0, "delta": 1e-5, "calibration": "rdp"}, ValueError, r"calibration must be one of"),
    ],
)
def test_gaussian_sigma_validates_like_the_mechanism(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        gaussian_sigma(**kwargs)


# ------------------------------------------------------------------------------ inputs
BAD_X_COMMON = [
    pytest.param(np.array([0.0, np.nan]), ValueError, r"x must be finite, got 1 NaN/inf value", id="nan"),
    pytest.param(np.array([np.inf]), ValueError, r"x must be finite", id="inf"),
    pytest.param(-np.inf, ValueError, r"x must be finite", id="-inf-scalar"),
    pytest.param(np.array([]), ValueError, r"x must be a non-empty array", id="empty"),
    pytest.param([], ValueError, r"x must be a non-empty array", id="empty-list"),
    pytest.param(np.zeros((0, 3)), ValueError, r"x must be a non-empty array", id="empty-2d"),
    pytest.param("abc", TypeError, r"x must be a numeric array", id="string"),
    pytest.param(None, TypeError, r"^x must be a numeric array", id="none"),
    pytest.param([[0.0], [0.0, 1.0]], TypeError, r"x must be a numeric array", id="ragged"),
]

METHODS = ["perturb", "mean", "bias", "var", "abs3", "density"]


def _call(mech, method, x):
    if method == "perturb":
        return mech.perturb(x, GOOD_RNG)
    if method == "density":
        return mech.density(0.0, x)
    return getattr(mech, method)(x)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_x_outside_domain_or_not_finite_is_rejected(cfg, method):
    mech = cfg.build(1.0)
    lo, hi = cfg.domain
    mid = 0.5 if lo == 0.0 else 0.0  # a value that is fine, for the mixed arrays below
    where = r"x must lie in the mechanism's input domain \[" + f"{lo:g}, {hi:g}" + r"\], got "
    cases = [
        (np.array([lo, hi + 1e-9]), ValueError, where + re.escape(repr(hi + 1e-9))),
        (np.array([mid, lo - 1e-9]), ValueError, where + re.escape(repr(lo - 1e-9))),
        (hi + 1.0, ValueError, where + re.escape(repr(hi + 1.0))),
    ] + [(p.values[0], p.values[1], p.values[2]) for p in BAD_X_COMMON]
    for x, exc, match in cases:
        with pytest.raises(exc, match=match):
            _call(mech, method, x)
    # and the boundary itself is inside the domain (no clipping, no rejection)
    assert np.all(np.isfinite(_call(mech, method, np.array([lo, hi]))))


@pytest.mark.parametrize(
    "rng",
    [
        pytest.param(None, id="none"),
        pytest.param(0, id="int-seed"),
        pytest.param(np.random.RandomState(0), id="legacy-RandomState"),
        pytest.param(np.random.PCG64(0), id="bit-generator"),
        pytest.param(np.random.default_rng, id="factory"),
        pytest.param(np.random.SeedSequence(0), id="seed-sequence"),
    ],
)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_rng_must_be_a_generator(cfg, rng):
    mech = cfg.build(1.0)
    with pytest.raises(TypeError, match=r"rng must be a numpy\.random\.Generator"):
        mech.perturb(np.array([cfg.domain[0]]), rng)


# ------------------------------------------------------------------------------ adapter construction
@pytest.mark.parametrize(
    "inner, domain, exc, match",
    [
        ("piecewise", (-1.0, 1.0), TypeError, r"inner must be a Mechanism, got str"),
        (None, (-1.0, 1.0), TypeError, r"inner must be a Mechanism"),
        (get_mechanism("piecewise", 1.0), [-1.0, 1.0], TypeError, r"domain must be a \(lo, hi\) tuple"),
        (get_mechanism("piecewise", 1.0), (-1.0, 0.0, 1.0), TypeError, r"domain must be a \(lo, hi\) tuple"),
        (get_mechanism("piecewise", 1.0), (1.0, 1.0), ValueError, r"domain must satisfy lo < hi"),
        (get_mechanism("piecewise", 1.0), (1.0, -1.0), ValueError, r"domain must satisfy lo < hi"),
        (get_mechanism("piecewise", 1.0), (np.array([-1.0, 0.5]), np.array([0.0, 0.5])), ValueError, r"domain must satisfy lo < hi"),
        (get_mechanism("piecewise", 1.0), (np.nan, 1.0), ValueError, r"domain lo must be finite"),
        (get_mechanism("piecewise", 1.0), (0.0, np.inf), ValueError, r"domain hi must be finite"),
    ],
)
def test_bad_adapter_is_rejected(inner, domain, exc, match):
    with pytest.raises(exc, match=match):
        AffineAdapter(inner, domain)


def test_adapter_rejects_x_outside_its_region():
    regions = (np.array([[-1.0], [0.0]]), np.array([[0.0], [1.0]]))
    mech = AffineAdapter(get_mechanism("piecewise", 1.0), regions)
    ok = np.array([[-0.5, -1.0, 0.0], [0.0, 0.5, 1.0]])
    assert mech.perturb(ok, GOOD_RNG).shape == ok.shape
    with pytest.raises(ValueError, match=r"x must lie in the mechanism's input domain \[-1, 1\], got 0\.5"):
        mech.perturb(np.array([[-0.5, 0.5, 0.0], [0.0, 0.5, 1.0]]), GOOD_RNG)


# ------------------------------------------------------------------------------ regressions
@pytest.mark.parametrize(
    "lo, hi, x",
    [
        pytest.param(np.array([-1.0, 0.0]), np.array([0.0, 1.0]), 0.5, id="scalar-x-vector-regions"),
        pytest.param(np.array([[-1.0], [0.0]]), np.array([[0.0], [1.0]]), np.array([0.5]), id="x(1,)-regions(2,1)"),
    ],
)
def test_adapter_region_check_error_names_x_when_x_broadcasts(lo, hi, x):
    """BUG (fedpriv/_validation.py::check_in_domain): an x that is smaller than the per-user
    regions it broadcasts against, and lies outside one of them, gets numpy's broadcast error
    ("cannot broadcast a non-scalar to a scalar array" / "input operand has more dimensions than
    allowed by the axis remapping") instead of "x must lie in ...": the offending entry is looked
    up with ``x[np.broadcast_to(mask, x.shape)]`` although the mask has the larger broadcast shape.
    (Still a ValueError, but it does not name the parameter.)"""
    mech = AffineAdapter(get_mechanism("piecewise", 1.0), (lo, hi))
    for call in (lambda: mech.perturb(x, GOOD_RNG), lambda: mech.mean(x), lambda: mech.var(x)):
        with pytest.raises(ValueError, match=r"x must lie in the mechanism's input domain"):
            call()


def test_boolean_epsilon_array_is_rejected():
    """BUG (fedpriv/_validation.py::check_epsilon): a bool scalar is a TypeError, but a bool array
    (or list) is silently read as ε = 1.0."""
    with pytest.raises(TypeError, match=r"epsilon must be"):
        get_mechanism("laplace", np.array([True, True]))
