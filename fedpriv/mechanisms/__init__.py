"""LDP mechanisms (docs/ldp_mechanisms.md): laplace, gaussian, piecewise, duchi, square_wave.

Build them with :func:`get_mechanism`; every mechanism exposes ``perturb(x, rng)``, ``mean``,
``bias``, ``var``, ``abs3``, ``density``, ``bounded``, ``input_domain``, ``output_range`` and
``guarantee``. Inputs outside the input domain raise ``ValueError`` (no mechanism clips).
"""

from fedpriv.mechanisms.adapter import AffineAdapter
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.mechanisms.duchi import DuchiMechanism
from fedpriv.mechanisms.gaussian import (
    GaussianMechanism,
    gaussian_delta,
    gaussian_sigma,
)
from fedpriv.mechanisms.laplace import LaplaceMechanism
from fedpriv.mechanisms.piecewise import PiecewiseMechanism
from fedpriv.mechanisms.registry import MECHANISMS, get_mechanism, mechanism_params, register_mechanism
from fedpriv.mechanisms.square_wave import (
    SquareWaveMechanism,
    square_wave,
    square_wave_b,
)

__all__ = [
    "MECHANISMS",
    "AffineAdapter",
    "DuchiMechanism",
    "GaussianMechanism",
    "Guarantee",
    "LaplaceMechanism",
    "Mechanism",
    "PiecewiseMechanism",
    "SquareWaveMechanism",
    "gaussian_delta",
    "gaussian_sigma",
    "get_mechanism",
    "mechanism_params",
    "register_mechanism",
    "square_wave",
    "square_wave_b",
]
