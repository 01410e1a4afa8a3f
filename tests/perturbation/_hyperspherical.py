"""Shared inputs of the hyperspherical-transform tests: seeded generators, test vectors, the float64 unit roundoff."""

from __future__ import annotations

import math

import torch

EPS = 2.0**-52
PI = math.pi
F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normal(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen(seed), dtype=F64)


def _lognormal_scaled(shape, seed: int, sigma: float = 3.0) -> torch.Tensor:
    """Normal entries times exp(sigma * N(0, 1)): magnitudes spread over ~e**(±3 sigma)."""
    gen = _gen(seed)
    z = torch.randn(shape, generator=gen, dtype=F64)
    return z * torch.exp(sigma * torch.randn(shape, generator=gen, dtype=F64))


def _with_zeros(x: torch.Tensor, p_zero: float, seed: int) -> torch.Tensor:
    """Replace a share ``p_zero`` of entries by +0.0 or -0.0 (half each)."""
    gen = _gen(seed)
    u = torch.rand(x.shape, generator=gen, dtype=F64)
    x = torch.where(u < p_zero / 2, torch.zeros_like(x), x)
    return torch.where((u >= p_zero / 2) & (u < p_zero), torch.full_like(x, -0.0), x)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))
