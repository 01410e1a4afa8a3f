"""Tests of fedpriv.perturbation.get_perturbation and the contract every perturbation shares.

Every registered name builds and privatizes; unknown names and keywords fail naming what is
wrong; bad parameters fail naming the parameter (``(kwargs, match)`` tables); bad updates and
bad ``rng`` arguments fail before any noise is drawn; the same key gives the same bits and another
purpose another draw (docs/design.md §4 and §9).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation import (
    PERTURBATIONS,
    GeoDP,
    NoPerturbation,
    Perturbation,
    clip_l2,
    geodp_effective_sigma,
    get_perturbation,
)
from fedpriv.rng import stream

F64 = torch.float64

# minimal valid parameters of every registered perturbation
BASE: dict[str, dict] = {
    "none": {"clip_norm": 1.0},
    "coordinatewise": {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0},
    "ldpvec": {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0},
    "geodp": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
    "dpsgd": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
}
NAMES = list(BASE)
NOISY = [n for n in NAMES if n != "none"]

# more configurations that must build and run (every mechanism through both vector perturbations)
VARIANTS = [
    ("coordinatewise", {"mechanism": m, "epsilon": 2.0, "clip_norm": 0.5, **extra})
    for m, extra in [("laplace", {}), ("piecewise", {}), ("duchi", {}), ("square_wave", {}),
                     ("gaussian", {"delta": 1e-5}), ("gaussian", {"delta": 1e-5, "budget_mode": "per_coordinate"})]
] + [
    ("ldpvec", {"mechanism": m, "epsilon": 2.0, "clip_norm": 0.5, **extra})
    for m, extra in [("laplace", {}), ("piecewise", {"beta": 0.5}), ("duchi", {"partition": "uniform"}),
                     ("square_wave", {"region": "thesis", "beta": 0.7}),
                     ("gaussian", {"delta": 1e-5, "magnitude": "perturb"}),
                     ("gaussian", {"delta": 1e-5, "partition": "uniform", "angle_policy": "clamp"}),
                     ("laplace", {"magnitude": "keep", "angle_policy": "wrap"})]
] + [
    ("geodp", {"sigma": 0.5, "clip_norm": 0.1, "batch_size": 64, "region": "centered", "beta": 0.1,
               "angle_noise_scale": "unscaled", "magnitude_policy": "clamp0"}),
    ("none", {}),
]


def _key(seed: int = 0, purpose: str = "test-registry", server_round: int = 0, client: int = 0) -> np.random.Generator:
    return stream(seed, server_round, client, purpose)


def _update(shape=(3, 4), dtype=torch.float32) -> torch.Tensor:
    return torch.linspace(-0.2, 0.3, math.prod(shape), dtype=dtype).reshape(shape)


# ---------------------------------------------------------------------------------- building

def test_registry_lists_every_perturbation() -> None:
    assert set(PERTURBATIONS) == set(NAMES)
    for name, cls in PERTURBATIONS.items():
        assert issubclass(cls, Perturbation) and cls.name == name


@pytest.mark.parametrize("name, params", [(n, BASE[n]) for n in NAMES] + VARIANTS)
def test_every_name_builds_and_perturbs(name: str, params: dict) -> None:
    p = get_perturbation(name, **params)
    assert isinstance(p, PERTURBATIONS[name])
    assert p.config()["perturbation"] == name
    g = _update()
    out = p.perturb(g, _key())
    assert out.vector.shape == g.shape and out.vector.dtype == g.dtype
    assert bool(torch.isfinite(out.vector).all())
    assert isinstance(out.guarantee, Guarantee)
    assert out.metrics["output_norm"] == pytest.approx(float(torch.linalg.vector_norm(out.vector.double())),
                                                       rel=1e-6)
    assert out.guarantee.epsilon > 0


def test_no_perturbation_is_clipping_only() -> None:
    g = torch.tensor([3.0, 4.0], dtype=F64)
    out = get_perturbation("none", clip_norm=1.0).perturb(g, _key())
    torch.testing.assert_close(out.vector, torch.tensor([0.6, 0.8], dtype=F64), rtol=0, atol=1e-15)
    assert out.guarantee.epsilon == math.inf and not out.guarantee.holds
    unclipped = NoPerturbation().perturb(g, _key())
    assert torch.equal(unclipped.vector, g) and unclipped.metrics["clipped"] == 0.0


def test_unknown_name_lists_the_names() -> None:
    with pytest.raises(ValueError, match=r"name must be one of 'none', 'coordinatewise', 'ldpvec', 'geodp', "
                                         r"'dpsgd', got 'geo_dp'"):
        get_perturbation("geo_dp", sigma=1.0)
    with pytest.raises(ValueError, match=r"name must be one of .*got None"):
        get_perturbation(None)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_keyword_names_the_perturbation(name: str) -> None:
    with pytest.raises(TypeError, match=rf"perturbation '{name}':.*unexpected keyword argument 'epsilon_total'"):
        get_perturbation(name, **BASE[name], epsilon_total=1.0)


@pytest.mark.parametrize("name", NOISY)
def test_missing_parameter_names_the_perturbation(name: str) -> None:
    params = dict(BASE[name])
    params.pop("clip_norm")
    with pytest.raises(TypeError, match=rf"perturbation '{name}':.*clip_norm"):
        get_perturbation(name, **params)


# ---------------------------------------------------------------------------------- parameter tables

def _cases(names: list[str], key: str, values: list, exc: type, match: str) -> list:
    return [pytest.param(n, {key: v}, exc, match, id=f"{n}-{key}={v!r}") for n in names for v in values]


BAD_PARAMS = (
    _cases(["coordinatewise", "ldpvec"], "epsilon", [0.0, -1.0, math.nan, math.inf, -math.inf], ValueError,
           r"epsilon must be > 0 and finite")
    + _cases(["coordinatewise", "ldpvec"], "epsilon", ["1.0", None, True], TypeError,
             r"epsilon must be a positive finite number")
    + [pytest.param(n, {"mechanism": "gaussian", "delta": v}, ValueError,
                    r"delta must be in the open interval \(0, 1\)", id=f"{n}-gaussian-delta={v!r}")
       for n in ("coordinatewise", "ldpvec") for v in (0.0, 1.0, -1e-5, 1.5, math.nan)]
    + _cases(["geodp", "dpsgd"], "delta", [0.0, 1.0, 2.0, math.nan], ValueError,
             r"delta must be in the open interval \(0, 1\)")
    + _cases(["ldpvec", "geodp"], "beta", [0.0, -0.5, 1.5, math.nan, math.inf], ValueError, r"beta must be in \(0, 1\]")
    + _cases(["ldpvec", "geodp"], "beta", ["0.5"], TypeError, r"beta must be a real number")
    + _cases(["ldpvec", "geodp"], "region", ["everywhere", "Centered", None], ValueError,
             r"region must be one of 'none', 'thesis', 'centered'")
    + _cases(["ldpvec"], "partition", ["dimension", None], ValueError,
             r"partition must be one of 'sensitivity', 'uniform'")
    + _cases(["ldpvec"], "magnitude", ["noise", None], ValueError,
             r"magnitude must be one of 'normalize', 'keep', 'perturb'")
    + _cases(["ldpvec", "geodp"], "angle_policy", ["reflect"], ValueError,
             r"angle_policy must be one of 'none', 'clamp', 'wrap'")
    + _cases(["geodp"], "magnitude_policy", ["negate"], ValueError,
             r"magnitude_policy must be one of 'none', 'abs', 'clamp0'")
    + _cases(["geodp"], "angle_noise_scale", ["batch"], ValueError,
             r"angle_noise_scale must be one of 'source', 'unscaled'")
    + _cases(["coordinatewise"], "budget_mode", ["per_dimension"], ValueError,
             r"budget_mode must be one of 'split', 'per_coordinate'")
    + _cases(["geodp", "dpsgd"], "sigma", [-1.0, math.nan, math.inf], ValueError, r"sigma must be >= 0 and finite")
    + _cases(["geodp", "dpsgd"], "batch_size", [0, -3], ValueError, r"batch_size must be >= 1")
    + _cases(["geodp", "dpsgd"], "batch_size", [2.5, "8"], TypeError, r"batch_size must be an integer")
    + _cases(NAMES, "clip_norm", [0.0, -1.0, math.nan, -math.inf], ValueError, r"clip_norm must be > 0 and finite")
    + _cases(NOISY, "clip_norm", [math.inf], ValueError, r"clip_norm must be > 0 and finite")
    + _cases(["coordinatewise", "ldpvec"], "mechanism", ["exponential"], ValueError, r"name must be one of 'laplace'")
)


@pytest.mark.parametrize("name, kwargs, exc, match", BAD_PARAMS)
def test_bad_parameters_name_the_parameter(name: str, kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        get_perturbation(name, **{**BASE[name], **kwargs})


# ---------------------------------------------------------------------------------- bad updates and rng

BAD_UPDATES = [
    pytest.param(torch.tensor([0.1, math.nan, 0.2]), ValueError, r"update must be finite, got 1 NaN/inf", id="nan"),
    pytest.param(torch.tensor([[0.1, math.inf], [-math.inf, 0.0]]), ValueError, r"update must be finite, got 2",
                 id="inf"),
    pytest.param(torch.empty(0), ValueError, r"update must be non-empty", id="empty"),
    pytest.param(torch.empty(3, 0), ValueError, r"update must be non-empty", id="empty-2d"),
    pytest.param([0.1, 0.2], TypeError, r"update must be a torch.Tensor, got list", id="list"),
    pytest.param(np.array([0.1, 0.2]), TypeError, r"update must be a torch.Tensor, got ndarray", id="ndarray"),
]


@pytest.mark.parametrize("update, exc, match", BAD_UPDATES)
@pytest.mark.parametrize("name", NAMES)
def test_bad_updates_are_rejected(name: str, update, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        get_perturbation(name, **BASE[name]).perturb(update, _key())


BAD_RNGS = [
    pytest.param(None, id="None"),
    pytest.param(0, id="int-seed"),
    pytest.param(np.random.RandomState(0), id="RandomState"),
    pytest.param(torch.Generator().manual_seed(0), id="torch.Generator"),
]


@pytest.mark.parametrize("rng", BAD_RNGS)
@pytest.mark.parametrize("name", NAMES)
def test_rng_must_be_a_numpy_generator(name: str, rng) -> None:
    with pytest.raises(TypeError, match=r"rng must be a numpy.random.Generator"):
        get_perturbation(name, **BASE[name]).perturb(_update(), rng)


@pytest.mark.parametrize("name", ["ldpvec", "geodp"])
def test_geometric_perturbations_need_two_coordinates(name: str) -> None:
    with pytest.raises(ValueError, match=r"at least 2 coordinates.*got d=1"):
        get_perturbation(name, **BASE[name]).perturb(torch.ones(1), _key())


# ---------------------------------------------------------------------------------- determinism

# "clamp" under heavy noise pins polar angles to 0 or π and so returns ±C·e₁ for most keys
# (docs/hyperspherical.md §6), so it is left out of the "other key, other draw" check.
DETERMINISM = [(n, BASE[n]) for n in NOISY] + [v for v in VARIANTS if v[0] != "none" and
                                                v[1].get("angle_policy") != "clamp"]


@pytest.mark.parametrize("name, params", DETERMINISM)
def test_same_key_same_bits_other_key_other_draw(name: str, params: dict) -> None:
    """Same (run_seed, round, client, purpose) → identical output bits, also from a fresh instance;
    another purpose, round or client → another draw."""
    g = _update(dtype=F64)
    p = get_perturbation(name, **params)
    first = p.perturb(g, _key(7, "noise"))
    again = p.perturb(g, _key(7, "noise"))
    fresh = get_perturbation(name, **params).perturb(g, _key(7, "noise"))
    for other in (again, fresh):
        assert torch.equal(first.vector, other.vector)
        assert first.metrics == other.metrics
        assert first.guarantee == other.guarantee
    for key in (_key(7, "batch"), _key(7, "noise", server_round=1), _key(7, "noise", client=1), _key(8, "noise")):
        assert not torch.equal(first.vector, p.perturb(g, key).vector)


def test_input_and_rng_are_independent_of_global_state() -> None:
    """No global RNG is read: seeding numpy and torch globally changes nothing."""
    g = _update(dtype=F64)
    p = get_perturbation("ldpvec", mechanism="gaussian", epsilon=1.0, delta=1e-5, clip_norm=1.0)
    np.random.seed(1)
    torch.manual_seed(1)
    a = p.perturb(g, _key(3)).vector
    np.random.seed(2)
    torch.manual_seed(2)
    b = p.perturb(g, _key(3)).vector
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------------- known defects

def test_clipping_a_finite_update_whose_norm_overflows() -> None:
    """clip_l2 must scale a finite update to norm C even when ‖v‖ overflows float64.

    (1e200, 1e200, 1e200, 1e200) has a finite direction (1/2, 1/2, 1/2, 1/2); ‖v‖ = 2e200 is not
    representable, torch.linalg.vector_norm returns inf, and v·(C/inf) is the zero vector — every
    perturbation then privatizes 0 (LDPVec/GeoDP: the conventional e₁ direction) instead of the
    update's direction. A float32 update cannot trigger it (it is widened to float64 first).
    """
    v = torch.full((4,), 1e200, dtype=F64)
    out, report = clip_l2(v, 1.0)
    assert report.clipped
    torch.testing.assert_close(out, torch.full((4,), 0.5, dtype=F64), rtol=1e-15, atol=0)
    none = get_perturbation("none", clip_norm=1.0).perturb(v, _key())
    torch.testing.assert_close(none.vector, torch.full((4,), 0.5, dtype=F64), rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_non_floating_updates_are_rejected(dtype: torch.dtype) -> None:
    """An integer or boolean update is rejected instead of having its privatized output cast back.

    ``perturb`` keeps the input dtype, so an int64 update's output is the float64 release truncated
    toward zero (bool: any non-zero becomes True): the noise, and with it the unbiasedness and the
    calibrated error, is destroyed while the call still reports its guarantee: noise cast to the
    array dtype, so that an int array gets none, is a defect.
    """
    update = torch.ones(6, dtype=dtype)
    for name in NOISY:
        with pytest.raises(TypeError, match=r"update must be a floating-point tensor"):
            get_perturbation(name, **BASE[name]).perturb(update, _key())


BAD_EFFECTIVE_SIGMA = [
    ({"region": "everywhere"}, r"region must be one of 'none', 'thesis', 'centered'"),
    ({"angle_noise_scale": "batch"}, r"angle_noise_scale must be one of 'source', 'unscaled'"),
    ({"batch_size": 0}, r"batch_size must be >= 1"),
    ({"beta": 1.5}, r"beta must be in \(0, 1\]"),
    ({"sigma": -1.0}, r"sigma must be >= 0 and finite"),
]


@pytest.mark.parametrize("kwargs, match", BAD_EFFECTIVE_SIGMA)
def test_geodp_effective_sigma_validates_its_arguments(kwargs: dict, match: str) -> None:
    """The exported accounting helper must reject what GeoDP's constructor rejects.

    Today an unknown region (e.g. a typo of "none") is silently read as an *enforced* region
    (β_reg = β), which shrinks the conservative ε that is logged; batch_size=0 raises
    ZeroDivisionError; β = 1.5 and σ = −1 return numbers.
    """
    base = {"sigma": 1.0, "beta": 0.5, "region": "none", "angle_noise_scale": "source", "batch_size": 8,
            "mode": "conservative"}
    args = {**base, **kwargs}
    with pytest.raises(ValueError, match=match):
        geodp_effective_sigma(args.pop("sigma"), **args)


BAD_CALIBRATION = [
    ({"q": 1.5}, ValueError, r"q must be in \(0, 1\]"),
    ({"q": 0.0}, ValueError, r"q must be in \(0, 1\]"),
    ({"steps": 0}, ValueError, r"steps must be >= 1"),
    ({"steps": 2.5}, TypeError, r"steps must be an integer"),
    ({"delta": 0.0}, ValueError, r"delta must be in the open interval \(0, 1\)"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD_CALIBRATION)
def test_calibrate_sigma_validates_like_the_accountant(kwargs: dict, exc: type, match: str) -> None:
    """GeoDP.calibrate_sigma must reject the (q, steps, δ) that dpsgd_epsilon rejects.

    Today q = 1.5 returns σ ≈ 103 (read as "no subsampling"), q = 0 raises dp-accounting's
    NoBracketIntervalFoundError, steps = 0 / 2.5 raise errors about "`count`".
    """
    args = {"q": 0.01, "steps": 100, "delta": 1e-5, **kwargs}
    with pytest.raises(exc, match=match):
        GeoDP.calibrate_sigma(1.0, clip_norm=0.1, batch_size=8, **args)


@pytest.mark.parametrize("key", ["delta", "sensitivity"])
def test_ldpvec_mechanism_params_cannot_override_derived_parameters(key: str) -> None:
    """As Coordinatewise does, LDPVec must refuse mechanism_params that set δ or the sensitivity.

    Today it raises Python's "get_mechanism() got multiple values for keyword argument 'delta'".
    """
    with pytest.raises(ValueError, match=rf"mechanism_params must not set '{key}'"):
        get_perturbation("ldpvec", mechanism="gaussian", epsilon=1.0, delta=1e-5, clip_norm=1.0,
                         mechanism_params={key: 0.5})


@pytest.mark.parametrize("perm", [
    pytest.param([2, 0, 1], id="list"),
    pytest.param(torch.tensor([0, 0, 1]), id="repeated"),
])
@pytest.mark.parametrize("name", ["ldpvec", "geodp"])
def test_coord_permutation_is_validated_at_construction(name: str, perm) -> None:
    """A coord_permutation that is no permutation fails when the perturbation is built, naming the
    parameter — not at the first ``perturb`` call inside a training loop (docs/design.md §8: validate at
    construction). Today these construct fine and fail later with "perm must be ..." (or never,
    when the length happens to match).
    """
    with pytest.raises((TypeError, ValueError), match=r"coord_permutation"):
        get_perturbation(name, **BASE[name], coord_permutation=perm)
