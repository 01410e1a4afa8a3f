"""Tests of fedpriv.perturbation.hyperspherical: bad inputs are refused with a message naming them."""

from __future__ import annotations

import pytest
import torch

from fedpriv.perturbation.hyperspherical import (
    ANGLE_POLICIES,
    MAGNITUDE_POLICIES,
    REGION_MODES,
    angle_sensitivity,
    apply_angle_policy,
    apply_magnitude_policy,
    clip_to_region,
    direction_metrics,
    from_hyperspherical,
    leading_energy_fraction,
    permute,
    public_permutation,
    region_bounds,
    to_hyperspherical,
    unpermute,
)
from tests.perturbation._hyperspherical import F64, _gen

# ---------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("g, match", [
    (torch.tensor([1.0]), r"g must have at least 2 coordinates in its last dimension, got d=1"),
    (torch.ones(3, 1), r"g must have at least 2 coordinates in its last dimension, got d=1"),
    (torch.ones(3, 0), r"got d=0"),
    (torch.tensor(2.0), r"g must have at least 2 coordinates .* 0-dimensional"),
    (torch.empty(0, 5), r"g must be non-empty, got a tensor of shape \(0, 5\)"),
    (torch.tensor([1.0, float("nan"), 2.0]), r"g must be finite, got 1 NaN/inf value\(s\)"),
    (torch.tensor([[float("inf"), 0.0], [0.0, -float("inf")]]), r"g must be finite, got 2 NaN/inf"),
    (torch.tensor([1.5e308, 1.5e308], dtype=F64), r"g must have a norm representable in float64"),
])
def test_to_hyperspherical_rejects(g: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        to_hyperspherical(g)


@pytest.mark.parametrize("g, match", [
    ([1.0, 2.0], r"g must be a torch.Tensor, got list"),
    (torch.tensor([1.0, 2.0]).numpy(), r"g must be a torch.Tensor, got ndarray"),
    (torch.tensor([1 + 1j, 2.0]), r"g must be a real .* tensor, got dtype torch.complex64"),
    (torch.tensor([True, False]), r"g must be a real .* tensor, got dtype torch.bool"),
])
def test_to_hyperspherical_type_errors(g: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        to_hyperspherical(g)


@pytest.mark.parametrize("r, theta, match", [
    (torch.ones(3), torch.zeros(4, 5), r"r must have shape theta.shape\[:-1\] = \(4,\), got \(3,\)"),
    (1.0, torch.zeros(2, 5), r"r must have shape theta.shape\[:-1\] = \(2,\), got \(\)"),
    (torch.tensor(float("nan")), torch.zeros(3), r"r must be finite, got 1 NaN/inf"),
    (torch.tensor(1.0), torch.tensor([0.0, float("inf")]), r"theta must be finite, got 1 NaN/inf"),
    (torch.tensor(1.0), torch.tensor(0.0), r"theta must have at least 1 coordinate .* 0-dimensional"),
    (torch.ones(0), torch.zeros(0, 3), r"theta must be non-empty"),
    (torch.ones(2), torch.zeros(2, 0), r"theta must have at least 1 coordinate .* got d=0"),
])
def test_from_hyperspherical_rejects(r: object, theta: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_hyperspherical(r, theta)


def test_from_hyperspherical_type_errors() -> None:
    with pytest.raises(TypeError, match=r"r must be a torch.Tensor, got str"):
        from_hyperspherical("1", torch.zeros(3))
    with pytest.raises(TypeError, match=r"theta must be a torch.Tensor, got list"):
        from_hyperspherical(torch.tensor(1.0), [0.0, 1.0])


@pytest.mark.parametrize("kwargs, match", [
    ({"beta": 0.0}, r"beta must be in \(0, 1\], got 0.0"),
    ({"beta": 1.5}, r"beta must be in \(0, 1\], got 1.5"),
    ({"beta": float("nan")}, r"beta must be in \(0, 1\], got nan"),
    ({"mode": "paper"}, r"mode must be one of 'none', 'thesis', 'centered', got 'paper'"),
    ({"d": 1}, r"d must be >= 2, got 1"),
    ({"polar_center": 4.0}, r"polar_center must be finite and in \[0, 3.14159\], got 4.0"),
    ({"azim_center": float("inf")}, r"azim_center must be finite and in \[-3.14159, 3.14159\], got inf"),
])
def test_region_rejects(kwargs: dict, match: str) -> None:
    args = {"d": 5, "beta": 0.5, "mode": "centered"} | kwargs
    with pytest.raises(ValueError, match=match):
        region_bounds(**args)
    if set(kwargs) <= {"beta", "mode", "d"}:
        with pytest.raises(ValueError, match=match):
            angle_sensitivity(args["d"], args["beta"], args["mode"])
    if "d" not in kwargs:
        theta = torch.zeros(args["d"] - 1, dtype=F64)
        rest = {k: v for k, v in args.items() if k != "d"}
        with pytest.raises(ValueError, match=match):
            clip_to_region(theta, **rest)


@pytest.mark.parametrize("call, match", [
    (lambda: apply_angle_policy(torch.zeros(3), "reflect"),
     r"policy must be one of 'none', 'clamp', 'wrap', got 'reflect'"),
    (lambda: apply_magnitude_policy(torch.zeros(3), "relu"),
     r"policy must be one of 'none', 'abs', 'clamp0', got 'relu'"),
    (lambda: apply_magnitude_policy(torch.tensor([float("nan")]), "abs"), r"r must be finite, got 1"),
    (lambda: clip_to_region(torch.tensor([float("nan")]), 0.5, "thesis"), r"theta must be finite"),
    (lambda: direction_metrics(torch.ones(3), torch.ones(4)), r"g_out must have the shape of g_ref \(4,\)"),
    (lambda: direction_metrics(torch.tensor([1.0, float("nan")]), torch.ones(2)), r"g_out must be finite"),
    (lambda: leading_energy_fraction(torch.ones(5), fraction=0.0), r"fraction must be in \(0, 1\], got 0.0"),
    (lambda: leading_energy_fraction(torch.empty(0)), r"g must have at least 1 coordinate"),
    (lambda: permute(torch.ones(3), torch.tensor([0, 0, 1])), r"perm must be a permutation of range\(3\)"),
    (lambda: permute(torch.ones(3), torch.tensor([0, 1, 3])), r"perm must be a permutation of range\(3\)"),
    (lambda: unpermute(torch.ones(3), torch.tensor([0, 1])), r"perm must be a permutation of range\(3\), got a"),
    (lambda: permute(torch.tensor(1.0), torch.tensor([0])), r"g must have at least 1 dimension"),
    (lambda: public_permutation(0, _gen(1)), r"d must be >= 1, got 0"),
])
def test_other_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: permute(torch.ones(3), torch.tensor([0.0, 1.0, 2.0])), r"perm must be an integer tensor"),
    (lambda: permute(torch.ones(3), [0, 1, 2]), r"perm must be a torch.Tensor of integers, got list"),
    (lambda: public_permutation(5, 42), r"generator must be a torch.Generator, got int"),
    (lambda: region_bounds(5, "0.5", "none"), r"beta must be a real number"),
    (lambda: region_bounds(5, 0.5, "centered", polar_center=True), r"polar_center must be a real number"),
])
def test_other_type_errors(call, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        call()


def test_policy_and_mode_names_are_exported() -> None:
    assert ANGLE_POLICIES == ("none", "clamp", "wrap")
    assert MAGNITUDE_POLICIES == ("none", "abs", "clamp0")
    assert REGION_MODES == ("none", "thesis", "centered")
