"""Hyper-spherical coordinates for gradient vectors (docs/hyperspherical.md).

Shared building block of GeoDP-SGD (docs/geodp.md) and LDPVec (docs/ldpvec.md): the forward and inverse
transforms (§1, §2, §4), bounding angles to a region (§5), post-noise range policies (§6) and the
direction-error metrics (§8).

Conventions (docs/hyperspherical.md §3)
----------------------------------
* Vectors have shape ``(..., d)`` with ``d >= 2``; every operation runs along ``dim=-1`` in
  float64, whatever the input dtype, and every transform, policy and metric returns float64
  (callers cast back); :func:`permute` and :func:`unpermute` only reorder and keep the dtype.
* Forward: ``r = ||g||``; polar angles ``theta_z = atan2(T_{z+1}, g_z)`` in ``[0, pi]`` for
  ``z = 1..d-2``, where ``T_z`` is the tail norm ``sqrt(sum_{i >= z} g_i^2)`` (both sources
  misprint the summation index; the spec's fix is the tail norm); azimuth
  ``theta_{d-1} = atan2(g_d, g_{d-1})`` in ``(-pi, pi]``.
* ``atan2(0, 0) = 0``; the zero vector maps to ``r = 0`` and all angles ``0``; ``-0.0`` is
  read as ``+0.0`` everywhere, so ``(-1, -0.0)`` has azimuth ``pi``, never ``-pi``, and a
  trailing ``-0.0`` never turns a later polar angle into ``pi``.
* ``d = 1``, empty tensors and NaN/inf raise ``ValueError``: non-finite values must never
  reach a privacy mechanism.
* Coordinate order matters once angles are perturbed (§7.2): flatten gradients in parameter
  registration order and, for control runs, apply a fixed public permutation
  (:func:`public_permutation`, :func:`permute`, :func:`unpermute`).

Numerics (§4)
-------------
Both directions are O(d) in time and memory. The forward transform divides by a power of two
near ``max|g|`` (exact, so ``fwd(2**k * g)`` has bit-identical angles), then takes one suffix
``cumsum`` of squares. Relative round-trip error grows like ``d * eps`` at worst, about
``1e-13`` at ``d = 1e6`` in practice. Limitation: coordinates below about ``1e-154 * max|g|``
square to zero, so tail norms made only of such coordinates read as zero (their angles become
0 or pi); the effect on the vector is far below the float64 resolution of ``||g||``.

Behaviour under angle noise (§7), to be documented to users
----------------------------------------------------------
* Small noise ``N(0, s^2)`` per angle: ``E[1 - cos psi] ~ (s^2 / 2) sum_z (T_z / r)^2``, about
  ``(d + 1) s^2 / 4`` for an isotropic gradient.
* Large noise: ``E[sin^2(theta + e)] = 1/2 - cos(2 theta) exp(-2 s^2) / 2``, so energy past
  index ``k`` decays like ``2**-k`` and a heavily perturbed output concentrates on the first
  few coordinates in flattening order (log :func:`leading_energy_fraction`).
* Angles whose tail norm is (near) zero are ill-conditioned: the angle-array error of §8 can be
  large while the vector barely moves; log all metrics of :func:`direction_metrics`.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import torch
from torch import Tensor

from fedpriv._validation import check_choice, check_int, check_probability, check_tensor

__all__ = [
    "ANGLE_POLICIES",
    "MAGNITUDE_POLICIES",
    "REGION_MODES",
    "angle_sensitivity",
    "apply_angle_policy",
    "apply_magnitude_policy",
    "check_permutation",
    "clip_to_region",
    "direction_metrics",
    "from_hyperspherical",
    "leading_energy_fraction",
    "leading_energy_shares",
    "permute",
    "public_permutation",
    "region_bounds",
    "to_hyperspherical",
    "unpermute",
]

#: Region modes of §5.
REGION_MODES: tuple[str, ...] = ("none", "thesis", "centered")
#: Post-noise angle policies of §6 (``"none"`` is the default of both mechanisms).
ANGLE_POLICIES: tuple[str, ...] = ("none", "clamp", "wrap")
#: Post-noise magnitude policies of §6 (GeoDP only).
MAGNITUDE_POLICIES: tuple[str, ...] = ("none", "abs", "clamp0")

_PI = math.pi
_TWO_PI = 2.0 * math.pi


# ---------------------------------------------------------------------------------- validation


def _check_tensor(x: Any, name: str) -> Tensor:
    """Return ``x`` as float64 after checking it is a real, non-boolean tensor."""
    return check_tensor(x, name).to(torch.float64)


def _check_finite(x: Tensor, name: str) -> None:
    """Raise when ``x`` holds NaN or inf (§3 item 7)."""
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        n_bad = int(finite.numel() - int(finite.sum()))
        raise ValueError(f"{name} must be finite, got {n_bad} NaN/inf value(s)")


def _check_vectors(x: Any, name: str, *, min_d: int = 2) -> Tensor:
    """Validate a ``(..., d)`` tensor with ``d >= min_d``, non-empty and finite; return it as float64."""
    x = _check_tensor(x, name)
    if x.ndim == 0:
        raise ValueError(
            f"{name} must have at least {min_d} coordinate{'s' if min_d > 1 else ''} in its last "
            f"dimension, got a 0-dimensional tensor"
        )
    if x.shape[-1] < min_d:
        raise ValueError(
            f"{name} must have at least {min_d} coordinate{'s' if min_d > 1 else ''} in its last "
            f"dimension, got d={x.shape[-1]}"
        )
    if x.numel() == 0:
        raise ValueError(f"{name} must be non-empty, got a tensor of shape {tuple(x.shape)}")
    _check_finite(x, name)
    return x


def _check_center(value: Any, name: str, lo: float, hi: float) -> float:
    """Return a region center as a float after checking it is a real number in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name} must be finite and in [{lo:.6g}, {hi:.6g}], got {value!r}")
    return v


# ---------------------------------------------------------------------------------- helpers


def _pow2(k: Tensor) -> Tensor:
    """Exact float64 ``2**k`` for integer ``|k| <= 1022``, built from the exponent bits."""
    return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)


def _wrap(x: Tensor, center: float = 0.0) -> Tensor:
    """Map ``x`` into ``(center - pi, center + pi]`` modulo 2*pi; in-range entries are returned bit-exact."""
    lo, hi = center - _PI, center + _PI
    w = hi - torch.remainder(hi - x, _TWO_PI)
    w = torch.where(w <= lo, w + _TWO_PI, w)  # remainder may round up to exactly 2*pi
    return torch.where((x > lo) & (x <= hi), x, w)


def _reflect_polar(x: Tensor) -> Tensor:
    """``arccos(cos x)`` computed without cancellation: reflect into ``[0, pi]`` (§6, ``"wrap"``)."""
    t = torch.remainder(x, _TWO_PI)                       # [0, 2*pi]
    t = torch.where(t > _PI, _TWO_PI - t, t)
    return torch.where((x >= 0) & (x <= _PI), x, t)


def _unit_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """Unit vectors along the last dim (scaled first, so no overflow) and a mask of non-zero rows."""
    m = x.abs().amax(dim=-1, keepdim=True)
    xs = x / torch.where(m > 0, m, torch.ones_like(m))
    n = torch.linalg.vector_norm(xs, dim=-1, keepdim=True)
    return xs / torch.where(n > 0, n, torch.ones_like(n)), n.squeeze(-1) > 0


# ---------------------------------------------------------------------------------- transforms


@torch.no_grad()
def to_hyperspherical(g: Tensor) -> tuple[Tensor, Tensor]:
    """Magnitude and angles of ``g`` (docs/hyperspherical.md §1, algorithm of §4).

    Parameters
    ----------
    g : Tensor, shape (..., d), real dtype, d >= 2
        Vectors to transform; finite. Any real dtype is accepted and computed in float64.

    Returns
    -------
    r : Tensor, shape (...), float64
        ``||g||_2`` (>= 0).
    theta : Tensor, shape (..., d - 1), float64
        Polar angles ``theta[..., :-1]`` in ``[0, pi]`` and the azimuth ``theta[..., -1]`` in
        ``(-pi, pi]``. The zero vector gives all zeros (§3 items 1-2).

    Raises
    ------
    TypeError
        If ``g`` is not a real tensor.
    ValueError
        If ``d < 2``, ``g`` is empty, holds NaN/inf, or its norm overflows float64.
    """
    x = _check_vectors(g, "g")
    # §4: scale by a power of two near max|x| so squares neither underflow nor overflow; the
    # scaling is exact and the angles are scale invariant. Two half-steps keep each factor normal.
    amax = x.abs().amax(dim=-1, keepdim=True)
    _, expo = torch.frexp(amax)                          # amax = m * 2**expo, m in [0.5, 1)
    e1 = torch.div(expo, 2, rounding_mode="floor")
    e2 = expo - e1
    xs = x * _pow2(-e1) * _pow2(-e2) + 0.0               # §3 item 4: "+ 0.0" turns -0.0 into +0.0
    # §1: tail norms T_z, tail[..., i] = T_{i+1} (0-based), one suffix cumsum.
    tail = torch.flip(torch.cumsum(torch.flip(xs * xs, (-1,)), dim=-1), (-1,)).sqrt_()
    r = tail[..., 0] * _pow2(e1.squeeze(-1)) * _pow2(e2.squeeze(-1))
    if not bool(torch.isfinite(r).all()):
        raise ValueError("g must have a norm representable in float64, got a norm that overflows")
    polar = torch.atan2(tail[..., 1:-1], xs[..., :-2])    # §1: z = 1..d-2, atan2(T_{z+1}, g_z)
    azim = torch.atan2(xs[..., -1:], xs[..., -2:-1])     # §1: z = d-1, atan2(g_d, g_{d-1})
    return r, torch.cat([polar, azim], dim=-1)


@torch.no_grad()
def from_hyperspherical(r: Tensor | float, theta: Tensor) -> Tensor:
    """Vector with magnitude ``r`` and angles ``theta`` (docs/hyperspherical.md §2, algorithm of §4).

    Any real angles are valid, including ones outside the nominal ranges (§6); the output norm is
    ``|r|`` and a negative ``r`` yields ``-g``. Prefix products that underflow to 0 under heavy
    angle noise are the correct limit (§4) and are not corrected.

    Parameters
    ----------
    r : Tensor of shape (...) or a real number
        Magnitudes; finite.
    theta : Tensor, shape (..., d - 1), d >= 2
        Angles (polar angles first, azimuth last); finite.

    Returns
    -------
    Tensor, shape (..., d), float64

    Raises
    ------
    TypeError
        If ``r`` or ``theta`` has the wrong type.
    ValueError
        If ``theta`` is empty or 0-dimensional, ``r.shape != theta.shape[:-1]``, or a value is NaN/inf.
    """
    th = _check_vectors(theta, "theta", min_d=1)
    if isinstance(r, Real) and not isinstance(r, bool):
        r = torch.tensor(float(r), dtype=torch.float64, device=th.device)
    rr = _check_tensor(r, "r")
    if tuple(rr.shape) != tuple(th.shape[:-1]):
        raise ValueError(
            f"r must have shape theta.shape[:-1] = {tuple(th.shape[:-1])}, got {tuple(rr.shape)}"
        )
    _check_finite(rr, "r")
    # §2: P_z = prod_{i<z} sin(theta_i); g_z = r P_z cos(theta_z), g_d = r P_{d-1} sin(theta_{d-1}).
    s, c = torch.sin(th[..., :-1]), torch.cos(th[..., :-1])
    ones = torch.ones(th.shape[:-1] + (1,), dtype=torch.float64, device=th.device)
    P = torch.cat([ones, torch.cumprod(s, dim=-1)], dim=-1)          # P_1..P_{d-1}
    head = P[..., :-1] * c                                           # z = 1..d-2
    az = th[..., -1:]
    last2 = P[..., -1:] * torch.cat([torch.cos(az), torch.sin(az)], dim=-1)
    return rr.unsqueeze(-1) * torch.cat([head, last2], dim=-1)


# ---------------------------------------------------------------------------------- regions (§5)


def region_bounds(
    d: int,
    beta: float,
    mode: str,
    polar_center: float = math.pi / 2,
    azim_center: float = 0.0,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    """Lower and upper angle bounds of the §5 region, each of shape ``(d - 1,)``.

    Parameters
    ----------
    d : int
        Dimension of the vector (>= 2); there are ``d - 1`` angles.
    beta : float
        Bounding factor in ``(0, 1]``; ignored by ``mode="none"`` but still validated.
    mode : {"none", "thesis", "centered"}
        ``"none"``: polar ``[0, pi]``, azimuth ``[-pi, pi]``. ``"thesis"`` ([Thesis] Algorithm 5):
        polar ``[(1 - beta) pi, pi]``, azimuth ``[-beta pi, beta pi]``. ``"centered"`` (spec
        resolution): polar ``[c_p - beta pi / 2, c_p + beta pi / 2]``, azimuth
        ``[c_a - beta pi, c_a + beta pi]``.
    polar_center, azim_center : float (default: pi / 2, 0)
        Public centers ``c_p`` in ``[0, pi]`` and ``c_a`` in ``[-pi, pi]``, used by ``"centered"``
        only. They must never be computed from the private gradient (§5).
    dtype, device
        Of the returned tensors.

    Returns
    -------
    lo, hi : Tensor, shape (d - 1,)
    """
    d = check_int(d, "d", minimum=2)
    beta = check_probability(beta, "beta")
    mode = check_choice(mode, "mode", REGION_MODES)
    c_p = _check_center(polar_center, "polar_center", 0.0, _PI)
    c_a = _check_center(azim_center, "azim_center", -_PI, _PI)
    if mode == "none":
        p_lo, p_hi, a_lo, a_hi = 0.0, _PI, -_PI, _PI
    elif mode == "thesis":
        p_lo, p_hi, a_lo, a_hi = (1.0 - beta) * _PI, _PI, -beta * _PI, beta * _PI
    else:
        p_lo, p_hi = c_p - beta * _PI / 2, c_p + beta * _PI / 2
        a_lo, a_hi = c_a - beta * _PI, c_a + beta * _PI
    lo = torch.full((d - 1,), p_lo, dtype=dtype, device=device)
    hi = torch.full((d - 1,), p_hi, dtype=dtype, device=device)
    lo[-1], hi[-1] = a_lo, a_hi
    return lo, hi


@torch.no_grad()
def clip_to_region(
    theta: Tensor,
    beta: float,
    mode: str,
    polar_center: float = math.pi / 2,
    azim_center: float = 0.0,
) -> tuple[Tensor, float]:
    """Clip angles to the §5 region; return ``(clipped theta, fraction of angles changed)``.

    The clip is deterministic and applied before noise. For ``"thesis"`` and ``"centered"`` the
    azimuth is first re-expressed modulo 2*pi in ``(c_a - pi, c_a + pi]`` (the inverse is
    2*pi-periodic in it, §2) and then clamped, so a non-zero ``azim_center`` clips along the
    circle; with the default center and azimuths in ``(-pi, pi]`` this step changes nothing.
    ``mode="none"`` returns ``theta`` unchanged (as float64) and fraction 0.

    Parameters
    ----------
    theta : Tensor, shape (..., d - 1)
        Angles from :func:`to_hyperspherical`; finite.
    beta, mode, polar_center, azim_center
        As in :func:`region_bounds`.

    Returns
    -------
    theta_clipped : Tensor, shape (..., d - 1), float64
    fraction_changed : float
        Share of all angles (over every leading index) whose value changed.
    """
    th = _check_vectors(theta, "theta", min_d=1)
    lo, hi = region_bounds(th.shape[-1] + 1, beta, mode, polar_center, azim_center, device=th.device)
    if mode == "none":
        return th, 0.0
    center = float(azim_center) if mode == "centered" else 0.0
    pre = torch.cat([th[..., :-1], _wrap(th[..., -1:], center)], dim=-1)
    out = torch.clamp(pre, min=lo, max=hi)
    return out, float((out != th).sum()) / th.numel()


def angle_sensitivity(d: int, beta: float, mode: str) -> tuple[float, float]:
    """``(L1, L2)`` sensitivity of the angle vector under the §5 region.

    ``beta_reg = beta`` for ``"thesis"`` and ``"centered"``, ``1`` for ``"none"`` (no region is
    enforced, so the full ranges apply). Then ``L1 = d * beta_reg * pi`` and
    ``L2 = sqrt(d + 2) * beta_reg * pi``: the largest distances between any two points of the box,
    valid for central DP and LDP alike.
    """
    d = check_int(d, "d", minimum=2)
    beta = check_probability(beta, "beta")
    mode = check_choice(mode, "mode", REGION_MODES)
    beta_reg = 1.0 if mode == "none" else beta
    # §5: (d - 2) polar ranges of beta_reg*pi plus one azimuth range of 2*beta_reg*pi.
    return d * beta_reg * _PI, math.sqrt(d + 2) * beta_reg * _PI


# ---------------------------------------------------------------------------------- policies (§6)


@torch.no_grad()
def apply_angle_policy(theta: Tensor, policy: str) -> Tensor:
    """Post-noise angle handling of §6; returns float64 angles of the same shape.

    ``"none"`` (default of both mechanisms): unchanged, keeps the angle noise unbiased.
    ``"clamp"``: polar angles to ``[0, pi]``, azimuth to ``[-pi, pi]`` (authors' MATLAB code);
    a polar angle clamped to 0 or pi zeroes every later coordinate.
    ``"wrap"``: azimuth into ``(-pi, pi]`` (same vector as ``"none"`` up to rounding), polar
    angles reflected into ``[0, pi]`` as ``arccos(cos theta)`` (flips later signs). In-range
    values are returned bit-exact under every policy.
    """
    th = _check_vectors(theta, "theta", min_d=1)
    policy = check_choice(policy, "policy", ANGLE_POLICIES)
    if policy == "none":
        return th
    polar, azim = th[..., :-1], th[..., -1:]
    if policy == "clamp":
        return torch.cat([polar.clamp(0.0, _PI), azim.clamp(-_PI, _PI)], dim=-1)
    return torch.cat([_reflect_polar(polar), _wrap(azim)], dim=-1)


@torch.no_grad()
def apply_magnitude_policy(r: Tensor, policy: str) -> Tensor:
    """Post-noise magnitude handling of §6 (GeoDP only); returns float64 of the same shape.

    ``"none"`` (default): unchanged, keeps ``E[r*] = r`` (a negative ``r*`` flips the vector).
    ``"abs"``: ``|r*|``. ``"clamp0"``: ``max(r*, 0)``, so a negative magnitude gives the zero vector.
    """
    rr = _check_tensor(r, "r")
    _check_finite(rr, "r")
    policy = check_choice(policy, "policy", MAGNITUDE_POLICIES)
    if policy == "none":
        return rr
    if policy == "abs":
        return rr.abs()
    return rr.clamp(min=0.0)


# ---------------------------------------------------------------------------------- metrics (§8)


@torch.no_grad()
def direction_metrics(g_out: Tensor, g_ref: Tensor, *, wrap_azimuth: bool = False) -> dict[str, float]:
    """Direction-error metrics of §8 between released vectors and their references.

    For a batch ``(m, ..., d)`` every metric is the mean over all leading indices (the
    ``1/m sum_i`` of §8).

    Parameters
    ----------
    g_out : Tensor, shape (..., d)
        Released (perturbed) vectors.
    g_ref : Tensor, same shape
        Reference (unperturbed) vectors.
    wrap_azimuth : bool (default: False)
        Wrap the azimuth difference into ``(-pi, pi]`` for ``"angle_sq_error"``.

    Returns
    -------
    dict with float values
        ``"angle_sq_error"``: ``||theta(g_out) - theta(g_ref)||^2``, both angle arrays from
        :func:`to_hyperspherical` of the vectors ([Thesis] Def. 7; §8 resolution: re-transform
        the output vector). Ill-conditioned when tail norms vanish (§7.3).
        ``"grad_sq_error"``: ``||g_out - g_ref||^2``.
        ``"one_minus_cos"``: ``1 - cos psi``, from ``||u_out - u_ref||^2 / 2`` of the unit
        vectors, so it stays accurate for tiny angles.
        ``"sin2"``: ``sin^2 psi = (1 - cos psi)(1 + cos psi)``.
        If either vector is zero its cosine is taken as 0 (``one_minus_cos = sin2 = 1``): a zero
        vector carries no direction.
    """
    a = _check_vectors(g_out, "g_out")
    b = _check_vectors(g_ref, "g_ref")
    if a.shape != b.shape:
        raise ValueError(f"g_out must have the shape of g_ref {tuple(b.shape)}, got {tuple(a.shape)}")
    _, th_a = to_hyperspherical(a)
    _, th_b = to_hyperspherical(b)
    diff = th_a - th_b
    if wrap_azimuth:
        diff = torch.cat([diff[..., :-1], _wrap(diff[..., -1:])], dim=-1)
    ua, nz_a = _unit_rows(a)
    ub, nz_b = _unit_rows(b)
    both = nz_a & nz_b
    h_minus = 0.5 * (ua - ub).square().sum(dim=-1)   # 1 - cos psi
    h_plus = 0.5 * (ua + ub).square().sum(dim=-1)    # 1 + cos psi
    one_minus_cos = torch.where(both, h_minus.clamp(0.0, 2.0), torch.ones_like(h_minus))
    sin2 = torch.where(both, (h_minus * h_plus).clamp(0.0, 1.0), torch.ones_like(h_minus))
    return {
        "angle_sq_error": float(diff.square().sum(dim=-1).mean()),
        "grad_sq_error": float((a - b).square().sum(dim=-1).mean()),
        "one_minus_cos": float(one_minus_cos.mean()),
        "sin2": float(sin2.mean()),
    }


@torch.no_grad()
def leading_energy_fraction(g: Tensor, fraction: float = 0.01) -> float:
    """Share of ``||g||^2`` in the first ``k = ceil(fraction * d)`` coordinates (§7.2, docs/ldpvec.md §9).

    ``fraction * d`` is rounded to 9 decimals before the ceiling, so ``fraction = 10 / 785`` at
    ``d = 785`` gives ``k = 10``. A zero vector has fraction 0; a batch gives the mean over its
    vectors (:func:`leading_energy_shares` gives one share per vector).
    """
    return float(leading_energy_shares(g, fraction).mean())


@torch.no_grad()
def leading_energy_shares(g: Tensor, fraction: float = 0.01) -> Tensor:
    """Per-vector :func:`leading_energy_fraction` of ``g`` (..., d): float64 of shape (...)."""
    x = _check_vectors(g, "g", min_d=1)
    fraction = check_probability(fraction, "fraction")
    d = x.shape[-1]
    k = min(d, max(1, math.ceil(round(fraction * d, 9))))
    sq = _unit_rows(x)[0].square()                     # zero rows stay zero
    return sq[..., :k].sum(dim=-1) / sq.sum(dim=-1).clamp_min(torch.finfo(torch.float64).tiny)


# ---------------------------------------------------------------------------------- permutation (§3.8)


def check_permutation(perm: Any, d: int | None = None, name: str = "perm") -> Tensor:
    """Return ``perm`` as int64 after checking it is a permutation of ``range(d)`` (d = its length if None)."""
    if not isinstance(perm, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of integers, got {type(perm).__name__}")
    if perm.dtype == torch.bool or perm.is_floating_point() or perm.is_complex():
        raise TypeError(f"{name} must be an integer tensor, got dtype {perm.dtype}")
    d = perm.numel() if d is None else d
    if perm.ndim != 1 or perm.numel() != d:
        raise ValueError(
            f"{name} must be a permutation of range({d}), got a tensor of shape {tuple(perm.shape)}"
        )
    p = perm.to(torch.int64)
    # O(d) check: entries in range and every value of range(d) hit exactly once.
    if d and (int(p.min()) < 0 or int(p.max()) >= d or not bool((torch.bincount(p, minlength=d) == 1).all())):
        raise ValueError(f"{name} must be a permutation of range({d}), got repeated or out-of-range entries")
    return p


def _check_permutable(g: Any) -> Tensor:
    """Check ``g`` is a tensor with at least one dimension (values are only reordered)."""
    if not isinstance(g, Tensor):
        raise TypeError(f"g must be a torch.Tensor, got {type(g).__name__}")
    if g.ndim == 0:
        raise ValueError("g must have at least 1 dimension, got a 0-dimensional tensor")
    return g


def public_permutation(d: int, generator: torch.Generator) -> Tensor:
    """A fixed coordinate permutation of ``range(d)`` drawn from public randomness (§3 item 8).

    Draw it once per run from a public keyed stream (e.g. ``fedpriv.rng``) and record it in the
    run metadata; it is for control experiments on the coordinate-order effect of §7.2.
    """
    d = check_int(d, "d", minimum=1)
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return torch.randperm(d, generator=generator, device=generator.device)


def permute(g: Tensor, perm: Tensor) -> Tensor:
    """Reorder the last dimension: ``out[..., i] = g[..., perm[i]]`` (dtype kept)."""
    g = _check_permutable(g)
    p = check_permutation(perm, g.shape[-1]).to(g.device)
    return g.index_select(-1, p)


def unpermute(g: Tensor, perm: Tensor) -> Tensor:
    """Inverse of :func:`permute`: ``unpermute(permute(g, perm), perm) == g`` (dtype kept)."""
    g = _check_permutable(g)
    p = check_permutation(perm, g.shape[-1]).to(g.device)
    inv = torch.empty_like(p)
    inv[p] = torch.arange(p.numel(), device=p.device)
    return g.index_select(-1, inv)
