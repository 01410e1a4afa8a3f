"""LDPVec: direction-only LDP perturbation of a clipped update (docs/ldpvec.md, [Thesis] Algorithm 6).

Steps (docs/ldpvec.md §2): clip to C → (optional public permutation) → hyper-spherical transform →
clip the angles to the β-region → perturb the angles with the base mechanism → inverse transform.

Defaults follow the spec's resolutions:

* ``region="centered"`` enforces the region by deterministic clipping (§2 step 3), which is what
  makes the angle sensitivity βdπ (L1) / β√(d+2)π (L2) true. ``region="none"`` with β < 1 keeps
  the sources' smaller noise but voids the claim (``guarantee.holds`` is False, §3).
* ``magnitude="normalize"`` releases r = C, a public constant, so the output is post-processing of
  the noisy angles (§6, §7). ``"keep"`` is the source-literal behaviour: the exact norm of an
  update shorter than C leaks, and that call's guarantee says so. ``"perturb"`` spends ε/d on the
  magnitude (the thesis Abstract's reading).
* Laplace and Gaussian are additive on the angles (scale Δθ/ε, §4); Gaussian with
  ``partition="sensitivity"`` is one L2 vector release. Bounded mechanisms (Piecewise, Duchi,
  Square Wave) run per angle through the affine adapter of docs/ldp_mechanisms.md §1.4 with budgets
  ε_z ∝ R_z (§4–§5); they need an enforced region when β < 1.

Per-call guarantee: (ε, δ)-LDP for one update vector. Under the source schedule with E > 1 the
uploaded model also carries E−1 clean steps that this does not cover (docs/federated_ldp_sgd.md §2.1).

Controls (docs/ldpvec.md §8): ``control`` replaces the released vector after the noisy step, to show
what the released direction contributes. ``"skip"`` releases the zero vector (the update without the
noisy step), ``"random-direction"`` a uniformly random direction with the released norm, ``"permute"``
the released vector with its coordinates in a random order (a fresh permutation per release, drawn
from the release's keyed stream). A control is an experiment, not a private release: its guarantee
says so and ``holds`` is False, so no ledger counts it as private.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_choice, check_positive, check_probability
from fedpriv.mechanisms import (
    AffineAdapter,
    GaussianMechanism,
    Mechanism,
    get_mechanism,
)
from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation._geometric import GeometricPerturbation
from fedpriv.perturbation.base import (
    RowMetrics,
    check_mechanism_params,
    check_scalar_budget,
    clip_rows,
    cosine_rows,
)
from fedpriv.perturbation.hyperspherical import (
    ANGLE_POLICIES,
    REGION_MODES,
    leading_energy_shares,
    region_bounds,
)
from fedpriv.rng import RowDraws

__all__ = ["LDPVEC_CONTROLS", "LDPVec"]

#: The controls of docs/ldpvec.md §8: "none" is LDPVec itself.
LDPVEC_CONTROLS: tuple[str, ...] = ("none", "skip", "random-direction", "permute")

#: What each control's release is, and what holds of it (its guarantee's note).
_CONTROL_NOTES = {
    "skip": "control 'skip', not a private release: the noisy step is replaced by the zero vector, and no epsilon "
            "is claimed for the run (docs/ldpvec.md §8)",
    "random-direction": "control 'random-direction', not a private release: the released direction is replaced by a "
                        "uniformly random one with the released norm; under magnitude='normalize' the vector does not "
                        "depend on the data at all, under 'keep' it carries the exact norm (docs/ldpvec.md §8)",
    "permute": "control 'permute', not a private release: the coordinates of the LDPVec release are put in a random "
               "order; this is post-processing of that release, so its (epsilon, delta) bound holds for the vector, "
               "but the run measures a control, not LDPVec (docs/ldpvec.md §8)",
}


class LDPVec(GeometricPerturbation):
    """Perturb only the direction of an update, in hyper-spherical coordinates (docs/ldpvec.md §2).

    Parameters
    ----------
    mechanism : str
        Base mechanism (any :func:`fedpriv.mechanisms.get_mechanism` name).
    epsilon : float
        Budget per call (per client per noisy step).
    clip_norm : float
        L2 clipping bound C.
    delta : float, optional
        Required for Gaussian.
    beta : float in (0, 1] (default: 1.0)
        Bounding factor: polar angles get width βπ, the azimuth 2βπ.
    region : {"centered", "thesis", "none"} (default: "centered")
    partition : {"sensitivity", "uniform"} (default: "sensitivity")
        Budget split over angles: ε_z ∝ R_z, or ε/(d−1) each (§5).
    magnitude : {"normalize", "keep", "perturb"} (default: "normalize")
    angle_policy : {"none", "clamp", "wrap"} (default: "none")
    coord_permutation : Tensor, optional
        A fixed public permutation applied before the transform and undone after it (§8 control).
    mechanism_params : dict, optional
        Extra parameters of the base mechanism (e.g. ``{"calibration": "analytic"}``).
    control : {"none", "skip", "random-direction", "permute"} (default: "none")
        A control of docs/ldpvec.md §8 in place of the release (module docstring); not private.
    """

    name = "ldpvec"
    linestyle = "--"

    def __init__(
        self,
        mechanism: str,
        epsilon: float,
        *,
        clip_norm: float,
        delta: float | None = None,
        beta: float = 1.0,
        region: str = "centered",
        partition: str = "sensitivity",
        magnitude: str = "normalize",
        angle_policy: str = "none",
        coord_permutation: torch.Tensor | None = None,
        mechanism_params: dict[str, Any] | None = None,
        control: str = "none",
    ) -> None:
        self.control = check_choice(control, "control", LDPVEC_CONTROLS)
        self.epsilon, self.delta = check_scalar_budget(mechanism, epsilon, delta)
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.beta = check_probability(beta, "beta")
        self.region = check_choice(region, "region", REGION_MODES)
        self.partition = check_choice(partition, "partition", ("sensitivity", "uniform"))
        self.magnitude = check_choice(magnitude, "magnitude", ("normalize", "keep", "perturb"))
        self.angle_policy = check_choice(angle_policy, "angle_policy", ANGLE_POLICIES)
        self.mechanism = mechanism
        self._mechanism_params = tuple(check_mechanism_params(mechanism_params).items())  # immutable
        self.coord_permutation = self._check_coord_permutation(coord_permutation)
        probe = self._base(1.0, self.delta, 1)  # validates the name and parameters now
        self._additive = not probe.bounded  # additive noise on all of R (Laplace, Gaussian), read off the mechanism
        if not self._additive and self.region == "none" and self.beta < 1.0:
            raise ValueError(
                f"region must enforce the beta-region for the bounded mechanism {probe.name!r} when beta < 1 "
                f"(its output range is tied to the angle interval): use region='centered' or 'thesis', or beta=1"
            )

    @property
    def mechanism_params(self) -> dict[str, Any]:
        """The base mechanism's extra parameters (a copy: they are fixed at construction)."""
        return dict(self._mechanism_params)

    # ------------------------------------------------------------------ budget (§5, §6)
    def budgets(self, d: int) -> dict[str, Any]:
        """The budget split for a d-dimensional update: ε_dir, ε_mag, δ's and per-angle ε_z (§5–§6)."""
        eps_mag = self.epsilon / d if self.magnitude == "perturb" else 0.0
        eps_dir = self.epsilon - eps_mag
        delta_dir = self.delta if self.delta is None or self.magnitude != "perturb" else self.delta / 2
        widths = self._noise_widths(d)
        if self.partition == "sensitivity":
            eps_z = eps_dir * widths / widths.sum()
        else:
            eps_z = np.full(d - 1, eps_dir / (d - 1))
        return {"eps_dir": eps_dir, "eps_mag": eps_mag, "delta_dir": delta_dir, "eps_z": eps_z}

    def _noise_widths(self, d: int) -> np.ndarray:
        """Angle ranges R_z the noise is calibrated to: βπ per polar angle, 2βπ for the azimuth (§2 step 5)."""
        widths = np.full(d - 1, self.beta * math.pi)
        widths[-1] = 2.0 * self.beta * math.pi
        return widths

    @staticmethod
    def _required_delta(delta: float | None) -> float:
        """``delta`` of a Gaussian release (check_scalar_budget requires δ for the gaussian mechanism)."""
        if delta is None:
            raise ValueError("delta is required for the gaussian mechanism (a number in (0, 1)), got None")
        return delta

    def _base(self, eps: float | np.ndarray, delta_total: float | None, n_values: int) -> Mechanism:
        """Base mechanism on [-1, 1] with budget ``eps`` per value; Gaussian gets δ/n per value."""
        params = dict(self.mechanism_params)
        if self.mechanism == "gaussian":
            return get_mechanism("gaussian", eps, delta=self._required_delta(delta_total) / n_values, sensitivity=2.0,
                                 **params)
        return get_mechanism(self.mechanism, eps, **params)

    # ------------------------------------------------------------------ perturbation (§2)
    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        """The LDPVec release, or (``control``) what replaces it, with the direction metrics of what is returned."""
        out, metrics = super()._perturb_rows(rows, streams)
        if self.control == "none":
            return out, metrics
        if self.control == "skip":
            out = torch.zeros_like(out)
        elif self.control == "random-direction":  # a Gaussian vector's direction is uniform on the sphere
            z = torch.from_numpy(streams.standard_normal(tuple(out.shape)))
            out = z * (torch.linalg.vector_norm(out, dim=-1) / torch.linalg.vector_norm(z, dim=-1)).unsqueeze(-1)
        else:  # permute: the order of d uniform keys is a uniform permutation
            order = torch.from_numpy(np.argsort(streams.random(tuple(out.shape)), axis=-1, kind="stable"))
            out = out.gather(-1, order)
        clipped = clip_rows(rows, self.clip_norm)[0]
        metrics["cos_psi"] = cosine_rows(out, clipped).numpy()
        metrics["leading_energy_fraction"] = leading_energy_shares(out).numpy()
        return out, metrics

    def _perturb_polar(
        self, r: torch.Tensor, theta: torch.Tensor, norm_before: torch.Tensor, streams: RowDraws
    ) -> tuple[torch.Tensor, torch.Tensor, RowMetrics]:
        n_rows, d = theta.shape[0], theta.shape[1] + 1
        b = self.budgets(d)
        theta_star, noise_std = self._perturb_angles(theta.numpy(), b, streams)
        r_out = torch.as_tensor(self._magnitude(r.numpy(), b, streams), dtype=torch.float64)
        leaked = (norm_before < self.clip_norm).numpy() & (self.magnitude == "keep")  # exact norm released (§6)
        return r_out, torch.from_numpy(theta_star), {
            "angle_noise_std": np.broadcast_to(noise_std, (n_rows,)).astype(np.float64),
            "privacy_claim": (~leaked).astype(np.float64),
        }

    def _perturb_angles(self, theta: np.ndarray, b: dict[str, Any], streams: RowDraws) -> tuple[np.ndarray, Any]:
        """Noisy angles (N, d-1) and the RMS per-angle noise std (a float, or per row when data-dependent) (§4)."""
        d = theta.shape[-1] + 1
        widths = self._noise_widths(d)
        if self.mechanism == "gaussian" and self.partition == "sensitivity":
            # one L2 vector release: Δθ = ‖R‖₂ = β√(d+2)π (§2 step 5, §4)
            gauss = GaussianMechanism(b["eps_dir"], delta=b["delta_dir"], sensitivity=float(np.linalg.norm(widths)),
                                      **self.mechanism_params)
            return theta + gauss.perturb(np.zeros_like(theta), streams), float(gauss.sigma)
        if self._additive:
            # additive noise of scale R_z/ε_z = (R_z/2)·(2/ε_z): the §4 adapter on an additive mechanism
            mech = self._base(b["eps_z"], b["delta_dir"], d - 1)
            half = widths / 2.0
            std = float(np.sqrt(np.mean(mech.var(np.zeros(d - 1)) * half**2)))  # the same for every row
            return theta + mech.perturb(np.zeros_like(theta), streams) * half, std
        lo, hi = (t.numpy() for t in region_bounds(d, self.beta, self.region))
        mech = AffineAdapter(self._base(b["eps_z"], b["delta_dir"], d - 1), (lo, hi))
        return mech.perturb(theta, streams), np.sqrt(np.mean(mech.var(theta), axis=-1))

    def _magnitude(self, r: np.ndarray, b: dict[str, Any], streams: RowDraws) -> np.ndarray:
        """The released magnitudes r_out (N,) (§6)."""
        if self.magnitude == "normalize":
            return np.full(r.shape, self.clip_norm)
        if self.magnitude == "keep":
            return r
        if self.mechanism == "gaussian":  # (ε/d, δ/2) with sensitivity C (§6)
            mech: Mechanism = GaussianMechanism(b["eps_mag"], delta=self._required_delta(self.delta) / 2,
                                                sensitivity=self.clip_norm, **self.mechanism_params)
            return r + mech.perturb(np.zeros((r.size, 1)), streams)[:, 0]
        mech = AffineAdapter(self._base(b["eps_mag"], None, 1), (0.0, self.clip_norm))  # Laplace: Lap(C/ε_mag)
        return mech.perturb(np.minimum(r, self.clip_norm)[:, None], streams)[:, 0]

    # ------------------------------------------------------------------ guarantee (§3, §7)
    def guarantee_for(self, d: int) -> Guarantee:
        notes = [_CONTROL_NOTES[self.control]] if self.control != "none" else []
        holds = self.control == "none"
        if self.region == "none" and self.beta < 1.0:
            holds = False
            notes.append("region='none' with beta < 1: the angles are not confined, the noise is calibrated to "
                         "beta-widths the data can exceed (docs/ldpvec.md §3)")
        if self.magnitude == "keep":
            notes.append("magnitude='keep' releases the exact norm of updates shorter than clip_norm (docs/ldpvec.md "
                         "§6)")
        if self.mechanism == "gaussian":
            b = self.budgets(d)
            g = GaussianMechanism(b["eps_dir"], delta=b["delta_dir"], sensitivity=1.0, **self.mechanism_params)
            holds = holds and g.guarantee.holds
            notes.append(g.guarantee.note)
        elif not self._base(1.0, None, 1).unbiased:
            notes.append(f"{self.mechanism} is biased on angles")
        skip = self.control == "skip"  # no claim at all
        return Guarantee(epsilon=math.inf if skip else self.epsilon, delta=0.0 if skip else self.delta or 0.0,
                         scope="one update vector",
                         holds=holds, note="; ".join(n for n in notes if n))

    def config(self) -> dict[str, Any]:
        return {
            "perturbation": self.name,
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "clip_norm": self.clip_norm,
            "beta": self.beta,
            "region": self.region,
            "partition": self.partition,
            "magnitude": self.magnitude,
            "angle_policy": self.angle_policy,
            "coord_permutation": self.coord_permutation is not None,
            "mechanism_params": dict(self.mechanism_params),
            "control": self.control,
        }
