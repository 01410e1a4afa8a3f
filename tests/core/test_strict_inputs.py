"""Every randomizer refuses values that are not real numbers (fedpriv/_validation.py: ``as_real_array``).

Found on main: ``get_mechanism("piecewise", 1).perturb(np.array(["0.1"]), rng)`` parsed the string,
complex input lost its imaginary part with only numpy's warning, and booleans became 1.0/0.0. Each
entry point that takes user values (mechanisms and their moments, the m-of-d protocol, the
distribution methods, frequency oracles and waves, secure aggregation, the DP-FM sketch, the
clustering randomizers, the update perturbations) must raise ``TypeError`` naming the argument and
what is allowed, for numpy arrays, Python scalars and lists, and torch tensors alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from fedpriv.clustering.baselines import ind_lap_histogram, ldp_agg_reports
from fedpriv.clustering.dplloyd import dplloyd
from fedpriv.clustering.dplsf import dplsf
from fedpriv.estimation.distribution import METHODS, get_method
from fedpriv.estimation.frequency import collect_frequencies
from fedpriv.estimation.oracles import grr_perturb, olh_perturb, oue_perturb
from fedpriv.estimation.waves import DiscreteSquareWave, GeneralWave
from fedpriv.mechanisms import MECHANISMS, AffineAdapter, get_mechanism
from fedpriv.mechanisms.protocol import collect_dimension, collect_mean
from fedpriv.perturbation import PERTURBATIONS, get_perturbation
from fedpriv.rng import stream
from fedpriv.secagg.base import DropoutModel
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.sketch.dpfm import DpfmParams, dpfm_registers, geometric_transform


def _rng():
    return stream(0, 0, 0, "strict")


# ------------------------------------------------------------------------------ bad versions of a good value
#: Each turns a good numpy value (right shape, right range) into the same shape of a non-real kind.
BAD_KINDS: dict[str, Callable[[np.ndarray], Any]] = {
    "str-array": lambda a: a.astype(str),
    "bytes-array": lambda a: a.astype(bytes),
    "object-array": lambda a: a.astype(object),
    "complex-array": lambda a: a.astype(complex),
    "bool-array": lambda a: a != 0,
    "str-list": lambda a: a.astype(str).tolist(),
    "complex-list": lambda a: a.astype(complex).tolist(),
    "bool-list": lambda a: (a != 0).tolist(),
    "bool-tensor": lambda a: torch.from_numpy(a != 0),
    "complex-tensor": lambda a: torch.from_numpy(a.astype(np.complex128)),
}

#: Scalars a mechanism (which takes scalars) must refuse.
BAD_SCALARS = {"str": "0.5", "bytes": b"0.5", "complex": 0.5 + 0j, "bool": True,
               "numpy-bool": np.bool_(True), "numpy-complex": np.complex128(0.5)}

REAL = r"must be a numeric array of real numbers \(integers or floats\), got "
LABELS = r"must hold integer category (indices|ids), got dtype"


def _mech_entries() -> dict[str, tuple[np.ndarray, str, Callable[[Any], Any]]]:
    out = {}
    builds = {n: (lambda n=n: get_mechanism(n, 1.0, **({"delta": 1e-5} if n == "gaussian" else {}))) for n in MECHANISMS}
    builds["adapter"] = lambda: AffineAdapter(get_mechanism("duchi", 1.0), (0.0, 4.0))
    for name, build in builds.items():
        mech = build()
        x = np.array([0.25, 0.5])
        out[f"{name}.perturb"] = (x, "x", lambda v, m=mech: m.perturb(v, _rng()))
        for method in ("mean", "bias", "var", "abs3"):
            out[f"{name}.{method}"] = (x, "x", lambda v, m=mech, f=method: getattr(m, f)(v))
        out[f"{name}.density-x"] = (x, "x", lambda v, m=mech: m.density(0.0, v))
        out[f"{name}.density-y"] = (x, "y", lambda v, m=mech: m.density(v, 0.5))
    return out


# (good value, argument name, message pattern, call)
ENTRIES: dict[str, tuple[np.ndarray, str, str, Callable[[Any], Any]]] = {
    **{k: (x, arg, REAL, f) for k, (x, arg, f) in _mech_entries().items()},
    "collect_mean": (np.full((3, 2), 0.5), "data", REAL, lambda v: collect_mean(v, "piecewise", 1.0, 1, _rng())),
    "collect_dimension": (np.array([0.5, 0.25]), "values", REAL,
                          lambda v: collect_dimension(v, "piecewise", 1.0, 1, 2, _rng())),
    **{f"method-{n}.perturb": (np.array([0.2, 0.7]), "values", REAL,
                               lambda v, n=n: get_method(n, 1.0, 16).perturb(v, _rng())) for n in METHODS},
    "general-wave.perturb": (np.array([0.2, 0.7]), "values", REAL,
                             lambda v: GeneralWave(1.0, 0.3, 0.5).perturb(v, _rng())),
    "codec.encode": (np.array([0.2, -0.7]), "x", REAL,
                     lambda v: FixedPointCodec(clip_range=1.0, levels=100, modulus_bits=32).encode(v, _rng())),
    "secure-sum.reports": (np.full((3, 2), 0.5), "reports", REAL,
                           lambda v: OracleAggregator(omega=0.0).aggregate(v, [0, 1, 2], dropout=DropoutModel(),
                                                                           instance=0)),
    "dpfm.geometric_transform": (np.array([0.5, 0.25]), "u", REAL, lambda v: geometric_transform(v, 0.5)),
    "dpfm.registers": (np.array([0.5, 0.25]), "u_min", REAL,
                       lambda v: dpfm_registers(v, DpfmParams(epsilon=1.0, delta=1e-3, gamma=0.5), _rng())),
    "dplloyd": (np.full((4, 2), 0.5), "y", REAL, lambda v: dplloyd(v, 2, 1.0, _rng())),
    "dplsf": (np.full((4, 2), 0.5), "y", REAL, lambda v: dplsf(v, 2, 1.0, _rng())),
    "grr_perturb": (np.array([0, 1, 2]), "values", LABELS, lambda v: grr_perturb(v, 4, 1.0, _rng())),
    "olh_perturb": (np.array([0, 1, 2]), "values", LABELS, lambda v: olh_perturb(v, 4, 1.0, _rng())),
    "oue_perturb": (np.array([0, 1, 2]), "values", LABELS, lambda v: oue_perturb(v, 4, 1.0, _rng())),
    "discrete-square-wave.perturb": (np.array([0, 1, 2]), "buckets", LABELS,
                                     lambda v: DiscreteSquareWave(1.0, 16).perturb(v, _rng())),
    "collect_frequencies": (np.array([[0, 1], [1, 1], [2, 0]]), "categories", LABELS,
                            lambda v: collect_frequencies(v, 3, "piecewise", 1.0, 1, _rng())),
    "ind_lap_histogram": (np.array([0, 1, 2]), "labels", LABELS, lambda v: ind_lap_histogram(v, 4, 1.0, _rng())),
    "ldp_agg_reports": (np.array([0, 1, 2]), "labels", LABELS, lambda v: ldp_agg_reports(v, 4, 1.0, _rng())),
}


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_good_value_is_accepted(entry: str) -> None:
    """The tables below are meaningful: each entry point runs on its good value (and on a plain list of it)."""
    good, _, _, call = ENTRIES[entry]
    call(good)
    call(good.tolist())


@pytest.mark.parametrize("kind", BAD_KINDS)
@pytest.mark.parametrize("entry", ENTRIES)
def test_non_real_values_are_refused_naming_the_argument(entry: str, kind: str) -> None:
    good, arg, pattern, call = ENTRIES[entry]
    with pytest.raises(TypeError, match=rf"^{arg} {pattern}"):
        call(BAD_KINDS[kind](good))


@pytest.mark.parametrize("value", BAD_SCALARS.values(), ids=BAD_SCALARS)
@pytest.mark.parametrize("name", [*MECHANISMS, "adapter"])
def test_mechanisms_refuse_non_real_scalars(name: str, value: Any) -> None:
    entry = ENTRIES[f"{name}.perturb"]
    with pytest.raises(TypeError, match=rf"^x {REAL}"):
        entry[3](value)


def test_the_message_says_what_was_given() -> None:
    pm = get_mechanism("piecewise", 1.0)
    cases = {"strings": np.array(["0.1"]), "complex numbers": np.array([0.1 + 0j]), "booleans": [True],
             "a tensor of booleans": torch.tensor([True]), "Python objects": np.array([0.1], dtype=object)}
    for words, value in cases.items():
        with pytest.raises(TypeError, match=rf"^x {REAL}{words}"):
            pm.perturb(value, _rng())


def test_integers_stay_accepted() -> None:
    """Integers are real numbers: int arrays, lists, scalars and tensors give the floats' draws."""
    pm = get_mechanism("piecewise", 1.0)
    want = pm.perturb(np.array([1.0, 0.0, -1.0]), _rng())
    for value in (np.array([1, 0, -1]), np.array([1, 0, -1], dtype=np.int8), [1, 0, -1],
                  torch.tensor([1, 0, -1])):
        np.testing.assert_array_equal(pm.perturb(value, _rng()), want)


@pytest.mark.parametrize("name", [*MECHANISMS, "adapter"])
def test_every_mechanism_perturbs_a_scalar(name: str) -> None:
    """A Python int or float scalar is a value like any other (Piecewise crashed on one on main)."""
    perturb = ENTRIES[f"{name}.perturb"][3]
    for value in (1, 0.5):
        assert np.shape(perturb(value)) == () and np.isfinite(perturb(value))


# ------------------------------------------------------------------------------ update perturbations (tensors)
PERTURBATION_PARAMS: dict[str, dict[str, Any]] = {
    "none": {"clip_norm": 1.0},
    "coordinatewise": {"mechanism": "piecewise", "epsilon": 1.0, "clip_norm": 1.0},
    "ldpvec": {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0},
    "geodp": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
    "dpsgd": {"sigma": 1.0, "clip_norm": 1.0, "batch_size": 8},
}

BAD_UPDATES: dict[str, Callable[[torch.Tensor], Any]] = {
    "bool-tensor": lambda u: u != 0,
    "complex-tensor": lambda u: u.to(torch.complex128),
    "int-tensor": lambda u: (u * 10).to(torch.int64),
    "str-array": lambda u: u.numpy().astype(str),
    "bool-list": lambda u: (u != 0).tolist(),
}


@pytest.mark.parametrize("kind", BAD_UPDATES)
@pytest.mark.parametrize("name", PERTURBATIONS)
def test_perturbations_refuse_non_float_updates(name: str, kind: str) -> None:
    p = get_perturbation(name, **PERTURBATION_PARAMS[name])
    update = torch.linspace(-0.2, 0.3, 6, dtype=torch.float64)
    allowed = r"must be a (floating-point tensor \(float16, bfloat16, float32 or float64\)|torch\.Tensor)"
    with pytest.raises(TypeError, match=rf"^update {allowed}"):
        p.perturb(BAD_UPDATES[kind](update), _rng())
    rows = torch.stack([update, -update])
    with pytest.raises(TypeError, match=rf"^updates {allowed}"):
        p.perturb_rows(BAD_UPDATES[kind](rows), [_rng(), _rng()])
