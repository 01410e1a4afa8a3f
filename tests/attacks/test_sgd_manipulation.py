"""LDP manipulation of federated LDP-SGD uploads (docs/attacks.md §8): what is refused, where the attacker's
release lies, and the bias it puts on the FedAvg aggregate against the theory.

Honest clients' uploads are unchanged bit for bit in both engines (``tests/attacks/test_attacks.py``,
parametrized over every attack); the batched engine agrees with the fast one within their float32
rounding errors (``tests/simulations/test_batched_engine.py``, case ``ldp-manipulation``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpriv.attacks.selection import attackers, is_attacker
from fedpriv.attacks.sgd_manipulation import manipulate_uploads, manipulated_outputs
from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import aggregate
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import build_perturbation, local_update
from fedpriv.perturbation import Coordinatewise
from fedpriv.rng import RowStreams
from fedpriv.workloads.registry import get_workload
from tests.attacks.test_attacks import BASE, _uploads

MANIPULATE = {"attack": "ldp-manipulation", "attack-fraction": 0.3}


@pytest.mark.parametrize("overrides, match", [
    ({"perturbation": "ldpvec", "mechanism": "gaussian"}, "needs perturbation = 'coordinatewise'"),
    ({"perturbation": "geodp", "sigma": 0.5}, "needs perturbation = 'coordinatewise'"),
    ({"perturbation": "none"}, "needs perturbation = 'coordinatewise'"),
    ({"sample-dims": 10}, "needs sample-dims = 0"),
    ({"mechanism": "laplace"}, "attack-value must be > 0 .* unbounded mechanism 'laplace'"),
    ({"mechanism": "laplace", "attack-value": -1.0}, "attack-value must be > 0"),
    ({"mechanism": "piecewise", "attack-value": 1.0}, "attack-value must be 0 .* bounded mechanism 'piecewise'"),
])
def test_manipulation_without_an_output_box_or_with_a_bad_value_is_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_workload("ldp-sgd").setup(RunConfig.from_mapping({**BASE, **MANIPULATE, **overrides}))


def test_attack_value_belongs_to_ldp_manipulation() -> None:
    with pytest.raises(ValueError, match="attack-value applies to attack 'ldp-manipulation'"):
        get_workload("ldp-sgd").setup(RunConfig.from_mapping({**BASE, "attack": "sign-flip", "attack-fraction": 0.3,
                                                              "attack-value": 2.0}))


@pytest.mark.parametrize("mechanism", ["piecewise", "duchi", "square_wave"])
def test_outputs_are_the_ends_of_the_mechanisms_range_against_the_step(mechanism: str) -> None:
    """Bit for bit the mechanism's own range bounds: the lower end where g_j > 0, the upper end where g_j <= 0."""
    mech = Coordinatewise(mechanism, 1.0, clip_norm=1.0).mechanism_for(50)
    lo, hi = mech.output_range
    g = np.repeat(np.array([[0.3, -0.2, 0.0, -0.0, 1e-300, -1e-300]]), 2, axis=0)
    out = manipulated_outputs({"attack-value": 0.0}, mech, g)
    expected = np.array([[lo, hi, hi, hi, lo, hi]] * 2, dtype=np.float64)
    assert np.array_equal(out, expected) and out.dtype == np.float64
    assert math.isfinite(lo) and math.isfinite(hi) and lo < 0 < hi


@pytest.mark.parametrize("mechanism, value", [("piecewise", 0.0), ("duchi", 0.0), ("square_wave", 0.0),
                                              ("laplace", 3.0)])
def test_an_attackers_upload_is_its_base_plus_the_step_at_the_range_ends(mechanism: str, value: float) -> None:
    """The fast engine's attacker upload is base + scale · t*·C/√d from its own clean release, bit for bit."""
    cfg = {**MANIPULATE, "mechanism": mechanism, "attack-value": value}
    w, attacked = _uploads(cfg, "fast")
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({**BASE, **cfg}))
    config = LdpSgdConfig.of(setup.config)
    data = workload.load_clients(setup)
    for c in attackers(3, 10, 0.3):
        own = data[int(c)]
        release = local_update(own.model, torch.from_numpy(w), own.x, own.y, config, server_round=2,
                               client_id=int(c), num_classes=own.num_classes).release
        d = w.size
        mech = build_perturbation(config, batch_size=8).mechanism_for(d)
        ends = (mech.output_range if value == 0.0 else (-value, value))
        t_star = np.where(release.vector.numpy() > 0, float(ends[0]), float(ends[1]))
        expected = release.base + release.scale * torch.from_numpy(t_star / (math.sqrt(d) / config["clip-norm"]))
        np.testing.assert_array_equal(attacked[int(c)], expected.numpy().astype(np.float32))


@pytest.mark.parametrize("mechanism, value", [("piecewise", 0.0), ("duchi", 0.0), ("square_wave", 0.0),
                                              ("laplace", 2.0)])
def test_fedavg_shift_matches_the_theory(mechanism: str, value: float) -> None:
    """FedAvg (uniform weights) moves by (a/n)·(V_j − E[honest release_j]) per coordinate, within 5 CLT SDs.

    n clients share one clean release (base b, step g, scale s); a = ⌊0.2·n⌋ attack. Honest upload j
    is b_j + s·(C/√d)·y_j with y_j the mechanism's output at t_j = g_j·√d/C, mean μ(t_j) and variance
    σ²(t_j) (``mech._mean``, ``mech._var``); the attacker sends V_j = b_j + s·(C/√d)·o_j. Without and
    with the attack the honest rows are the same draws, so the shift of the average is
    (1/n)·Σ_attackers (V_j − honest_j): mean (a/n)·s·(C/√d)·(o_j − μ(t_j)), standard deviation
    (√a/n)·|s|·(C/√d)·σ(t_j), a sum of a = 400 independent bounded (or Laplace) terms, so 5 SDs bound
    each of the d = 20 coordinates with probability > 1 − 20·6e-7 (CLT).
    """
    n, d, clip, s = 2000, 20, 2.0, -0.1
    config = {"attack": "ldp-manipulation", "attack-fraction": 0.2, "seed": 7, "num-clients": n,
              "attack-value": value}
    pert = Coordinatewise(mechanism, 20.0, clip_norm=clip)  # ε/d = 1 per coordinate
    mech = pert.mechanism_for(d)
    rng = np.random.default_rng(0)
    t = rng.uniform(-0.9, 0.9, d)  # normalized step: inside [-1, 1], and ‖g‖ = ‖t‖·C/√d < C (no clipping)
    g = t * clip / math.sqrt(d)
    base = torch.from_numpy(rng.normal(size=d)).expand(n, d)
    vector = torch.from_numpy(g).expand(n, d)
    ids = np.arange(n)
    noisy = pert.perturb_rows(vector, RowStreams.keyed(7, 1, ids.tolist(), "noise")).vectors
    honest = base + s * noisy
    attacked = manipulate_uploads(config, honest, base, vector, s, pert, ids)
    a = int(is_attacker(config, ids).sum())
    assert a == 400
    ones = np.ones(n)
    shift = aggregate(attacked.numpy(), ones, "fedavg") - aggregate(honest.numpy(), ones, "fedavg")
    unit = s * clip / math.sqrt(d)
    ends = mech.output_range if mech.bounded else (-value, value)
    o = np.where(g > 0, float(ends[0]), float(ends[1]))  # §8: the lower end against a positive step
    theory = (a / n) * unit * (o - mech._mean(t))
    sd = math.sqrt(a) / n * abs(unit) * np.sqrt(mech._var(t))
    assert np.all(np.abs(shift - theory) <= 5 * sd), np.max(np.abs(shift - theory) / sd)
    assert np.all(np.abs(theory) >= 5 * sd)  # the shift is real: outside the noise (Duchi at ε = 1: about 10 SDs)
    assert np.all(np.sign(theory) == -np.sign(s * g))  # against the honest step, every coordinate
