"""The GeoDP direction study (docs/geodp.md §6.2): measured MSEs against their closed forms, keyed repetitions."""

from __future__ import annotations

import math

import pytest
import torch

from fedpriv.analysis.geodp_direction import (
    MODEL_PARAMETERS,
    clipped_mean_gradient,
    direction_study,
    dpsgd_grad_mse,
    geodp_angle_mse,
)
from fedpriv.perturbation.geodp import GaussianDPSGD
from fedpriv.rng import stream


def test_dpsgd_gradient_mse_is_sigma2_c2_d_over_b2() -> None:
    # each repetition's ‖n/B‖² is (Cσ/B)²·χ²_d, so the mean over R has relative std √(2/(dR)); 4 of those
    d, reps = 500, 200
    r = direction_study("dpsgd", sigma=2.0, d=d, batch_size=64, clip_norm=0.1, repetitions=reps)
    predicted = dpsgd_grad_mse(2.0, 0.1, d, 64)
    assert r.predicted_grad_mse == predicted == pytest.approx((2.0 * 0.1 / 64) ** 2 * d)
    assert abs(r.grad_mse / predicted - 1) <= 4 * math.sqrt(2 / (d * reps))
    # its standard error estimates the same spread: √(2/d)·predicted/√R, to the 4-sigma spread of a sample std
    assert r.grad_mse_se == pytest.approx(math.sqrt(2 / d) * predicted / math.sqrt(reps), rel=4 / math.sqrt(2 * reps))


def test_geodp_angle_mse_is_the_closed_form_while_angles_stay_in_range() -> None:
    # small angle noise (β = 0.01: std √(d+2)·βπσ/B = 0.007 rad): ‖θ* − θ̃‖² = s²·χ²_{d−1}, relative std √(2/((d−1)R))
    d, reps = 200, 200
    r = direction_study("geodp", sigma=1.0, beta=0.01, d=d, batch_size=64, repetitions=reps)
    predicted = geodp_angle_mse(1.0, 0.01, d, 64)
    assert r.predicted_angle_mse == predicted == pytest.approx((d - 1) * (d + 2) * (0.01 * math.pi / 64) ** 2)
    assert abs(r.angle_mse / predicted - 1) <= 4 * math.sqrt(2 / ((d - 1) * reps))


def test_repetitions_are_rows_each_drawn_from_its_own_keyed_stream() -> None:
    g = clipped_mean_gradient(50, 32, seed=3)
    r = direction_study("dpsgd", sigma=1.0, d=50, batch_size=32, repetitions=4, seed=3)
    perturber = GaussianDPSGD(1.0, clip_norm=0.1, batch_size=32)
    one_by_one = torch.stack([perturber.perturb(g, stream(3, 0, i, "geodp-direction-dpsgd")).vector for i in range(4)])
    errors = (one_by_one - g).square().sum(dim=1)
    assert r.grad_mse == pytest.approx(float(errors.mean()), rel=1e-12)


def test_the_batch_mean_is_clipped_and_keyed() -> None:
    g = clipped_mean_gradient(300, 128, clip_norm=0.1, seed=0)
    assert g.shape == (300,) and float(torch.linalg.vector_norm(g)) <= 0.1 * (1 + 1e-12)
    assert torch.equal(g, clipped_mean_gradient(300, 128, clip_norm=0.1, seed=0))
    assert not torch.equal(g, clipped_mean_gradient(300, 128, clip_norm=0.1, seed=1))


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="method"):
        direction_study("laplace", sigma=1.0, d=10, batch_size=4)
    with pytest.raises(ValueError, match="d"):
        clipped_mean_gradient(MODEL_PARAMETERS + 1, 4)
    with pytest.raises(ValueError, match="repetitions"):
        direction_study("dpsgd", sigma=1.0, d=10, batch_size=4, repetitions=0)


def test_the_hand_written_per_sample_gradients_are_autograds() -> None:
    # the same float64 arithmetic in another order: agreement to 1e-12 relative to the largest entry (d·eps-sized)
    from fedpriv.analysis.geodp_direction import _per_sample_gradients

    g = torch.Generator().manual_seed(0)
    params = (torch.randn(64, 320, generator=g, dtype=torch.float64) / 8, torch.randn(320, generator=g, dtype=torch.float64),
              torch.randn(320, 10, generator=g, dtype=torch.float64) / 18, torch.randn(10, generator=g, dtype=torch.float64))
    x = torch.randn(5, 64, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 3, 9, 9, 1])

    def loss(p: tuple[torch.Tensor, ...], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = torch.tanh(xi @ p[0] + p[1]) @ p[2] + p[3]
        return torch.nn.functional.cross_entropy(logits.unsqueeze(0), yi.unsqueeze(0))

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    full = torch.cat([t.reshape(5, -1) for t in grads], dim=1)
    coords = torch.tensor([0, 1, 319, 320, 20479, 20480, 20799, 20800, 21000, 23999, 24000, 24009])  # every block, edges
    mine = _per_sample_gradients(params, x, y, coords)
    assert torch.allclose(mine, full[:, coords], rtol=0, atol=1e-12 * float(full.abs().max()))
