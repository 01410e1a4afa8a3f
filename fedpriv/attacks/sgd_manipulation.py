"""LDP manipulation of federated LDP-SGD uploads (Cheu, Smith, Ullman, "Manipulation Attacks in Local Differential
Privacy", J. Privacy and Confidentiality 11(1), 2021; docs/attacks.md §8).

An honest client's upload is ``base + scale · perturb(g)`` (:class:`fedpriv.federated.local.Release`;
scale = −η), where ``perturbation = "coordinatewise"`` normalizes the clipped gradient to t = g·√d/C,
perturbs each coordinate with the per-coordinate mechanism and maps its output t* back by C/√d
(docs/federated_ldp_sgd.md §3). A manipulating client trains as an honest one but skips the mechanism:
each coordinate of its t* is the output value that pushes hardest against its own honest step,

* a bounded mechanism (``piecewise``, ``duchi``, ``square_wave``): the lower end of the mechanism's output
  range where g_j > 0 and the upper end where g_j <= 0 (a zero coordinate takes the upper end, the mean
  task's default, §6); ``attack-value`` must be 0 (the ends depend on the model's size d through ε/d);
* an unbounded one (``laplace``, ``gaussian``): −``attack-value`` where g_j > 0, +``attack-value``
  otherwise (every real is an output, so the attacker says how far; ``attack-value`` > 0).

It is the worst sign flip a client can send while every coordinate stays a value an honest client
could have sent. The base (the local model after the E − 1 preceding steps, with ``noise-schedule =
"every_step"`` the attacker's honest noisy steps) is kept: only the last step's release is manipulated. The other
perturbations are refused (:func:`check_sgd_manipulation`; docs/attacks.md §8 says why), and so is
coordinate sampling.

:func:`manipulate_uploads` works on a ``(clients × d)`` block, as
:func:`fedpriv.attacks.poisoning.poison_uploads` does: the per-client path and the batched engine run
the same arithmetic, and honest rows are returned untouched.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedpriv.attacks.keys import AttackSettings
from fedpriv.attacks.selection import attacker_rows
from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.registry import mechanism_class_property

__all__ = ["check_sgd_manipulation", "manipulate_uploads", "manipulated_outputs", "output_bounds"]


def check_sgd_manipulation(config: AttackSettings) -> None:
    """Refuse ``ldp-manipulation`` of an LDP-SGD run whose upload has no per-coordinate output box (docs/attacks.md §8)."""
    if config["perturbation"] != "coordinatewise":
        raise ValueError(f"attack 'ldp-manipulation' of task 'ldp-sgd' needs perturbation = 'coordinatewise' (an "
                         f"output range that is a box, coordinate by coordinate), got perturbation = "
                         f"{config['perturbation']!r}; for ldpvec, geodp and none use sign-flip or scaling")
    if config["sample-dims"]:
        raise ValueError(f"attack 'ldp-manipulation' of task 'ldp-sgd' needs sample-dims = 0 (every coordinate "
                         f"reported), got sample-dims = {config['sample-dims']}")
    value = float(config["attack-value"])
    bounded = mechanism_class_property(config["mechanism"], "bounded")  # else attack-value sets the push
    if not bounded and not value > 0.0:
        raise ValueError(f"attack-value must be > 0 for attack 'ldp-manipulation' with the unbounded mechanism "
                         f"{config['mechanism']!r} (the per-coordinate magnitude in normalized units: every real is "
                         f"an output, so the attacker chooses how far to push), got {value!r}")
    if bounded and value != 0.0:
        raise ValueError(f"attack-value must be 0 for attack 'ldp-manipulation' with the bounded mechanism "
                         f"{config['mechanism']!r}: the attacker sends the ends of its output range (which depend on "
                         f"the model's size d through ε/d), got {value!r}")


def output_bounds(config: AttackSettings, mech: Mechanism) -> tuple[float, float]:
    """(the value sent where g_j > 0, the value sent where g_j <= 0) in normalized units (module docstring)."""
    if not mech.bounded:
        value = float(config["attack-value"])
        return -value, value
    lo, hi = (float(v) for v in mech.output_range)
    return lo, hi


def manipulated_outputs(config: AttackSettings, mech: Mechanism, vectors: np.ndarray) -> np.ndarray:
    """The attackers' normalized outputs t* (N, d) against the signs of their clipped gradients ``vectors`` (N, d)."""
    low, high = output_bounds(config, mech)
    return np.where(np.asarray(vectors) > 0.0, low, high)


def manipulate_uploads(config: AttackSettings, uploads: Tensor, base: Tensor, vector: Tensor, scale: float,
                       perturbation: Any, client_ids: Any) -> Tensor:
    """The uploads (N, d) with the manipulating clients' rows replaced by ``base + scale · t*·C/√d``; others untouched.

    ``base``, ``vector`` (N, d) and ``scale`` are the clients' releases (``uploads[i]`` is
    ``base[i] + scale · perturb(vector[i])``); ``perturbation`` is the run's
    :class:`fedpriv.perturbation.Coordinatewise`. Returns ``uploads`` itself unless a row manipulates.
    """
    if config["attack"] != "ldp-manipulation":
        return uploads
    _, rows = attacker_rows(config, uploads, client_ids)
    if rows.size == 0:
        return uploads
    d = uploads.shape[1]
    sel = torch.from_numpy(rows)
    t_star = manipulated_outputs(config, perturbation.mechanism_for(d), vector[sel].numpy())
    out_vector = torch.from_numpy(t_star / (math.sqrt(d) / perturbation.clip_norm))  # as Coordinatewise maps t* back
    out = uploads.clone()
    out[sel] = (base[sel] + scale * out_vector).to(uploads.dtype)
    return out
