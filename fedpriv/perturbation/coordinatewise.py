"""Coordinatewise ("numerical") perturbation of an update (docs/federated_ldp_sgd.md §3).

Clip the update to C, normalize t = g̃·√d/C, clamp every coordinate to [-1, 1] (the L2 bound does
not bound single coordinates; the clamped fraction is reported), perturb each coordinate with a
base mechanism, rescale by C/√d.

Budget modes (§3 table):

* ``"split"`` (default): ε per update. Laplace, Piecewise, Duchi, Square Wave get ε/d per
  coordinate (sequential composition); Gaussian is one (ε, δ) vector release with normalized L2
  sensitivity 2√d.
* ``"per_coordinate"`` (the case study's "ε allocated to each dimension"): ε per coordinate, so
  d·ε per update (and d·δ for Gaussian, basic composition); the guarantee says so.

Coordinate sampling (``sample_dims = m < d``; docs/hdr4me.md §9, the m-of-d protocol of
docs/ldp_mechanisms.md §1.2 applied to an update): the client samples m of the d coordinates uniformly
without replacement (from the same stream, before the noise), perturbs only those — with ε/m each in
``"split"`` mode (Gaussian: one (ε, δ) release of m values, L2 sensitivity 2√m), ε each in
``"per_coordinate"`` mode — and uploads ``(d/m)·t*`` on them and 0 elsewhere, rescaled by C/√d. The
factor d/m makes the upload unbiased for μ(t) coordinate by coordinate (E[(d/m)·1{j sampled}·y_j] =
μ(t_j)), so any aggregation rule of the strategy applies unchanged. Which coordinates a client
reported is not private (the protocol sends the pairs (j, y_j)); only the values are.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.mechanisms import Mechanism, get_mechanism
from fedpriv.mechanisms.base import Guarantee
from fedpriv.mechanisms.gaussian import GaussianMechanism
from fedpriv.mechanisms.laplace import LaplaceMechanism
from fedpriv.mechanisms.protocol import sample_dimensions
from fedpriv.perturbation.base import (
    Perturbation,
    RowMetrics,
    check_mechanism_params,
    check_scalar_budget,
    clip_rows,
)
from fedpriv.rng import CounterRows, RowDraws

__all__ = ["Coordinatewise"]


class Coordinatewise(Perturbation):
    """Per-coordinate LDP perturbation of a clipped, normalized update, from any base mechanism.

    Parameters
    ----------
    mechanism : str
        Base mechanism name (see :func:`fedpriv.mechanisms.get_mechanism`); its input domain must
        be [-1, 1] (Square Wave in its default ``domain="sym"``).
    epsilon : float
        Budget per call (``"split"``) or per coordinate (``"per_coordinate"``).
    clip_norm : float
        L2 clipping bound C.
    budget_mode : {"split", "per_coordinate"} (default: "split")
    delta : float, optional
        Required for Gaussian: δ per call (``"split"``) or per coordinate.
    mechanism_params : dict, optional
        Extra parameters of the base mechanism (e.g. ``{"calibration": "analytic"}``).
    sample_dims : int or None (default: None)
        Report only m of the d coordinates (module docstring); ``None`` or 0 reports all d.
    """

    name = "coordinatewise"
    linestyle = "-"

    def __init__(
        self,
        mechanism: str,
        epsilon: float,
        *,
        clip_norm: float,
        budget_mode: str = "split",
        delta: float | None = None,
        mechanism_params: dict[str, Any] | None = None,
        sample_dims: int | None = None,
    ) -> None:
        self.epsilon, self.delta = check_scalar_budget(mechanism, epsilon, delta)
        self.sample_dims = None if sample_dims in (None, 0) else check_int(sample_dims, "sample_dims", minimum=1)
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.budget_mode = check_choice(budget_mode, "budget_mode", ("split", "per_coordinate"))
        self.mechanism = mechanism
        self._mechanism_params = tuple(check_mechanism_params(mechanism_params).items())  # immutable
        probe = self._mechanism(max(2, self.sample_dims or 0))  # validates the name and parameters now
        if tuple(map(float, np.ravel(probe.input_domain))) != (-1.0, 1.0):
            raise ValueError(
                f"mechanism must have input domain [-1, 1] for coordinatewise perturbation, "
                f"got {probe.input_domain} for {mechanism!r} (use square_wave with domain='sym')"
            )
        self._cache: dict[int, Mechanism] = {}
        self._var_cache: dict[int, tuple[float, float, float] | None] = {}

    @property
    def mechanism_params(self) -> dict[str, Any]:
        """The base mechanism's extra parameters (a copy: they are fixed at construction)."""
        return dict(self._mechanism_params)

    def reported(self, d: int) -> int:
        """How many of the d coordinates a client reports (m, or d without sampling)."""
        if self.sample_dims is None:
            return d
        if self.sample_dims > d:
            raise ValueError(f"sample_dims must be <= d (the update's length), got sample_dims={self.sample_dims}, d={d}")
        return self.sample_dims

    def _mechanism(self, d: int) -> Mechanism:
        """The per-coordinate mechanism for a d-dimensional update (§3 budget table, over the m reported)."""
        params = dict(self.mechanism_params)  # get_mechanism rejects unknown names and keys
        m = self.reported(d)
        if self.mechanism == "gaussian":
            sens = 2.0 * math.sqrt(m) if self.budget_mode == "split" else 2.0
            return get_mechanism("gaussian", self.epsilon, delta=self.delta, sensitivity=sens, **params)
        eps = self.epsilon / m if self.budget_mode == "split" else self.epsilon
        return get_mechanism(self.mechanism, eps, **params)

    def mechanism_for(self, d: int) -> Mechanism:
        """The (cached) per-coordinate mechanism used for d-dimensional updates."""
        if d not in self._cache:
            self._cache[d] = self._mechanism(d)
        return self._cache[d]

    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        n_rows, d = rows.shape
        clipped, norms, was_clipped = clip_rows(rows, self.clip_norm)
        scale = math.sqrt(d) / self.clip_norm
        t = (clipped * scale).numpy()
        outside = np.abs(t) > 1.0
        t = np.clip(t, -1.0, 1.0)  # §3 [resolution]: clamp to the mechanism's domain, reported below
        mech = self.mechanism_for(d)
        m = self.reported(d)
        # t is finite and clamped to [-1, 1], the mechanism's domain: its input checks (several
        # passes over the batch) are skipped by calling the method that perturb runs after them
        if m == d:
            t_star = mech._perturb(t, streams)
        else:  # docs/hdr4me.md §9: m of d coordinates, uploaded as (d/m)·y (unbiased), 0 elsewhere
            idx = sample_dimensions(n_rows, d, m, streams)  # row i: keys from stream i, then its noise
            t_star = np.zeros((n_rows, d))
            np.put_along_axis(t_star, idx, mech._perturb(np.take_along_axis(t, idx, axis=1), streams) * (d / m), axis=1)
        out = torch.from_numpy(t_star / scale)
        metrics = {
            "norm_before_clip": norms.numpy(),
            "clipped": was_clipped.numpy().astype(np.float64),
            "clamped_fraction": outside.mean(axis=-1),
            "noise_std": np.sqrt(self._mean_var(t)) / scale,
        }
        return out, metrics

    def _has_native(self, d: int) -> bool:
        """Gaussian and Laplace on all d coordinates add noise that needs no float64 (docs/design.md §4.1).

        Read off the mechanism object, not its name, so a mechanism registered under another name gets the same path.
        """
        return isinstance(self.mechanism_for(d), (GaussianMechanism, LaplaceMechanism)) and self.reported(d) == d

    def _native_rows(self, rows: torch.Tensor, streams: CounterRows, out: torch.Tensor,
                     norms: torch.Tensor | None) -> RowMetrics:
        """:meth:`_perturb_rows` for Gaussian and Laplace in the rows' dtype and device: t* = t + s·noise, into ``out``.

        With direct ``norms`` the clip and the scaling to t are one multiply, t = v·min(1, C/‖v‖)·√d/C; rows
        with ‖v‖ ≤ C become v·√d/C exactly as with :func:`clip_rows`.
        """
        n_rows, d = rows.shape
        scale = math.sqrt(d) / self.clip_norm
        if norms is None:
            clipped, norms64, was_clipped = clip_rows(rows, self.clip_norm)
            t = torch.mul(clipped, scale, out=out)
        else:
            was_clipped, norms64 = norms > self.clip_norm, norms.to(torch.float64)
            factor = torch.clamp(self.clip_norm / norms, max=1.0).mul_(scale)
            t = torch.mul(rows, factor.unsqueeze(-1), out=out)
        outside = (t.abs() > 1.0).sum(dim=-1)
        t.clamp_(-1.0, 1.0)  # §3 [resolution]: clamp to the mechanism's domain, reported below
        mech = self.mechanism_for(d)
        if isinstance(mech, GaussianMechanism):
            noise_scale, noise = float(mech.sigma), streams.normal(d, rows.dtype)
        else:
            assert isinstance(mech, LaplaceMechanism)  # _has_native: Gaussian or Laplace only
            noise_scale, noise = float(mech.scale), streams.laplace_tensor(d, rows.dtype)
        t.add_(noise, alpha=noise_scale).div_(scale)
        std = noise_scale * (1.0 if isinstance(mech, GaussianMechanism) else math.sqrt(2.0)) / scale
        return {
            "norm_before_clip": norms64.cpu().numpy(),
            "clipped": was_clipped.cpu().numpy().astype(np.float64),
            "clamped_fraction": outside.cpu().numpy() / d,
            "noise_std": np.full(n_rows, std),
        }

    def _var(self, t: np.ndarray, d: int) -> np.ndarray:
        """Per-coordinate variance of the normalized upload at t (with sampling: of (d/m)·1{sampled}·y)."""
        mech, m = self.mechanism_for(d), self.reported(d)
        if m == d:
            return mech._var(t)
        mu = mech._mean(t)
        return (mech._var(t) + mu**2) * (d / m) - mu**2  # docs/hdr4me.md §9: E[((d/m)·1·y)²] − μ²

    def _mean_var(self, t: np.ndarray) -> np.ndarray:
        """Row means of the per-coordinate variance at t (N, d), for the ``noise_std`` metric.

        Every built-in mechanism's variance is a quadratic polynomial in t (constant for Laplace
        and Gaussian, x²/a + c for Piecewise, B² − x² for Duchi, and for Square Wave the cubic terms
        of its piecewise integral cancel), so the row mean follows from mean(t) and mean(t²), with
        the coefficients taken from the variance itself at t = −1, 0, 1. This replaces an
        elementwise evaluation that for Square Wave cost several times the perturbation. If the
        variance is not quadratic (checked at ±1/2), it is evaluated elementwise.
        """
        d = t.shape[-1]
        coef = self._var_coefficients(d)
        if coef is None:
            return np.mean(self._var(t, d), axis=-1)
        c0, c1, c2 = coef
        mean_var = c0 + c1 * t.mean(axis=-1) + c2 * np.einsum("ij,ij->i", t, t) / d
        return np.maximum(mean_var, 0.0)  # rounding of a variance that vanishes at t = ±1 (Duchi at large ε)

    def _var_coefficients(self, d: int) -> tuple[float, float, float] | None:
        """(c0, c1, c2) with var(t) = c0 + c1·t + c2·t² on [-1, 1] for d-dimensional updates, or None."""
        if d not in self._var_cache:
            v = self._var(np.array([-1.0, 0.0, 1.0, -0.5, 0.5]), d)
            c0, c1, c2 = v[1], (v[2] - v[0]) / 2.0, (v[2] + v[0]) / 2.0 - v[1]
            fit = c0 + c1 * np.array([-0.5, 0.5]) + c2 * 0.25
            quadratic = np.allclose(fit, v[3:], rtol=1e-9, atol=1e-12 * float(np.max(np.abs(v))))
            self._var_cache[d] = (float(c0), float(c1), float(c2)) if quadratic else None
        return self._var_cache[d]

    def guarantee_for(self, d: int) -> Guarantee:
        base = self.mechanism_for(d).guarantee
        note = base.note
        if not self.mechanism_for(d).unbiased:
            note = (note + "; " if note else "") + f"{self.mechanism} reports are biased"
        m = self.reported(d)
        if m < d:
            note = (note + "; " if note else "") + f"{m} of {d} coordinates reported"
        if self.budget_mode == "split":
            return Guarantee(epsilon=self.epsilon, delta=base.delta, scope="one update vector",
                             holds=base.holds, note=note)
        delta = base.delta * m
        return Guarantee(
            epsilon=self.epsilon * m,
            delta=min(delta, 1.0),
            scope="one update vector",
            holds=base.holds and delta < 1.0,
            note=(note + "; " if note else "") + f"epsilon={self.epsilon:g} per coordinate, composed over " + (f"d={d}" if m == d else f"m={m}"),
        )

    def config(self) -> dict[str, Any]:
        return {
            "perturbation": self.name,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "clip_norm": self.clip_norm,
            "budget_mode": self.budget_mode,
            "mechanism_params": dict(self.mechanism_params),
            "sample_dims": self.sample_dims,
        }
