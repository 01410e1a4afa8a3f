"""What ``fedpriv audit`` can audit: each randomizer with its worst-case neighbouring inputs and a 1-D statistic.

A target releases many outputs on two neighbouring inputs x and x' in one vectorized call per input,
drawing from one keyed stream each (``stream(seed, 0, 0 or 1, "audit/<name>")``, read through
:class:`fedpriv.rng.StreamRows` where a perturbation draws a batch), and reduces each output to a
statistic s that :func:`fedpriv.audit.bound.epsilon_lower_bound` thresholds. The statistic is
post-processing of the output, so it cannot show more privacy loss than the output has. Targets
(docs/audit.md, "Neighbouring inputs"):

* scalar mechanisms (``laplace``, ``gaussian``, ``piecewise``, ``duchi``, ``square_wave``): the two
  ends of the input domain, x = lo and x' = hi (the pair their ε-LDP guarantee covers with the
  largest loss); s = the output itself;
* ``coordinatewise/<mechanism>`` (d = 4, C = 1): x = (C/√d)·(1, …, 1) and x' = −x, whose normalized
  coordinates sit at the two domain ends ±1 in every coordinate; s = ⟨y, (1, …, 1)/√d⟩, the projection
  on (x − x')/‖x − x'‖;
* ``ldpvec/<mechanism>`` (d = 2, C = 1): x = (C, 0) and x' = (−C, 0), diametrically opposite on the
  clipping sphere; s = y₁, the projection on (x − x')/‖x − x'‖;
* ``geodp`` and ``dpsgd`` (central DP, add/remove one example; batch size 1 so the averaged gradient
  is the one example's clipped gradient): x = (C, 0) and x' = 0 (the example removed); s = y₁; the
  noise multiplier σ is calibrated to the audited ε for one unsampled step at δ;
* ``ldp-mod``: the LDP-SGD client upload of ``clients.mods.LdpMod`` (the drop-in path: received model
  + privatized update, with the mod's default ``coordinatewise``/``piecewise``, C = 1), through
  :func:`mod_release`, the function that path computes (a test checks the mod's reply against it bit
  for bit); updates x = (C/√d)·(1, …, 1) and x' = −x for d = 4 parameters; s as for coordinatewise.

Each target's claim is the guarantee the randomizer itself states for one call (``Mechanism.guarantee``
or ``Perturbation.guarantee_for(d)``), with its δ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedpriv._validation import check_int, check_positive, check_probability
from fedpriv.audit.bound import AuditResult, epsilon_lower_bound
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import build_perturbation
from fedpriv.mechanisms import MECHANISMS, Mechanism, get_mechanism
from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation import Coordinatewise, GaussianDPSGD, GeoDP, LDPVec, Perturbation
from fedpriv.rng import StreamRows, stream

__all__ = ["TARGETS", "AuditTarget", "audit", "get_target", "mechanism_target", "mod_perturbation", "mod_release",
           "perturbation_target"]

#: Clipping bound C of the vector targets; the claims do not depend on it (they scale with it).
CLIP_NORM = 1.0
#: Update length of the coordinatewise and LdpMod targets.
COORDINATES = 4


@dataclass(frozen=True)
class AuditTarget:
    """A randomizer ready to audit: its claim, the neighbouring inputs, the statistic and a vectorized release.

    Attributes
    ----------
    name : str
        The target's name (``fedpriv audit NAME``).
    claim : Guarantee
        What the randomizer states for one call (ε, δ, neighbouring relation).
    neighbours : str
        The two inputs x and x', in words.
    statistic : str
        The 1-D statistic s of an output that the events threshold, in words.
    release : callable (which, n, rng) -> ndarray of shape (n,)
        s of n independent outputs on x (``which = 0``) or x' (``which = 1``), drawn from ``rng``.
    """

    name: str
    claim: Guarantee
    neighbours: str
    statistic: str
    release: Callable[[int, int, np.random.Generator], np.ndarray]

    def sample(self, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """n statistics of outputs on x and on x', from the keyed streams ``stream(seed, 0, 0|1, "audit/<name>")``."""
        n = check_int(n, "samples", minimum=2)
        seed = check_int(seed, "seed", minimum=0)
        purpose = f"audit/{self.name}"
        return self.release(0, n, stream(seed, 0, 0, purpose)), self.release(1, n, stream(seed, 0, 1, purpose))


def mechanism_target(mechanism: Mechanism, *, name: str | None = None, claim: Guarantee | None = None) -> AuditTarget:
    """Audit a scalar mechanism on the two ends of its input domain; ``claim`` defaults to its own guarantee."""
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"mechanism must be a fedpriv.mechanisms.Mechanism, got {type(mechanism).__name__}")
    if np.ndim(mechanism.epsilon) != 0 or any(np.ndim(v) != 0 for v in mechanism.input_domain):
        raise ValueError("mechanism must have a scalar epsilon and a scalar input domain (one law to audit), got "
                         f"epsilon of shape {np.shape(mechanism.epsilon)} and domain {mechanism.input_domain}")
    lo, hi = (float(v) for v in mechanism.input_domain)
    ends = (lo, hi)

    def release(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return mechanism.perturb(np.full(n, ends[which]), rng)

    return AuditTarget(name=name or mechanism.name, claim=claim or mechanism.guarantee,
                       neighbours=f"x = {lo:g}, x' = {hi:g} (the ends of the input domain)",
                       statistic="the output y", release=release)


def _perturb_batch(perturbation: Perturbation, update: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n privatized copies of ``update`` (n, d), vectorized: the batch draws from the one stream ``rng``.

    A :class:`fedpriv.rng.StreamRows` over all n rows answers the draws (``random``, ``standard_normal``,
    ``laplace``) that a :class:`fedpriv.rng.RowStreams` would, from one stream: for n = 1 it gives exactly the
    bits of ``perturbation.perturb(update, rng)``, the public one-update path.
    """
    rows = torch.from_numpy(np.broadcast_to(update, (n, update.size)).copy())
    out, _ = perturbation._perturb_rows(rows, StreamRows.of(rng, n, 0, n))  # type: ignore[arg-type]
    return out.numpy()


def perturbation_target(perturbation: Perturbation, x: np.ndarray, x_prime: np.ndarray, *, name: str,
                        neighbours: str, claim: Guarantee | None = None) -> AuditTarget:
    """Audit an update perturbation on updates x and x'; s is the projection on (x − x')/‖x − x'‖."""
    x, x_prime = np.asarray(x, dtype=np.float64), np.asarray(x_prime, dtype=np.float64)
    if x.ndim != 1 or x.shape != x_prime.shape or np.array_equal(x, x_prime):
        raise ValueError(f"x and x_prime must be two different 1-D updates of one length, got shapes {x.shape} and "
                         f"{x_prime.shape}")
    direction = (x - x_prime) / np.linalg.norm(x - x_prime)
    inputs = (x, x_prime)

    def release(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return _perturb_batch(perturbation, inputs[which], n, rng) @ direction

    return AuditTarget(name=name, claim=claim or perturbation.guarantee_for(x.size), neighbours=neighbours,
                       statistic="<y, (x - x')/|x - x'|>, the projection on the inputs' difference", release=release)


def mod_perturbation(config: LdpSgdConfig) -> Perturbation:
    """The perturbation ``LdpMod`` privatizes a drop-in model update with: one release of the whole update."""
    if not isinstance(config, LdpSgdConfig):
        raise TypeError(f"config must be a fedpriv.federated.config.LdpSgdConfig, got {type(config).__name__}")
    return build_perturbation(LdpSgdConfig.of(config.replace(local_steps=1)), batch_size=1)


def mod_release(received: np.ndarray, trained: np.ndarray, perturbation: Perturbation, n: int,
                rng: np.random.Generator) -> np.ndarray:
    """n uploads ``received + perturb(trained − received)`` (n, d): what ``LdpMod`` replies for a flat float64 model.

    The arithmetic of :func:`fedpriv.federated.model_update.privatize_model_update` for one float64 array,
    vectorized over n releases from one stream; for n = 1 it is that function's output bit for bit.
    """
    base = np.asarray(received, dtype=np.float64).ravel()
    update = np.asarray(trained, dtype=np.float64).ravel() - base
    return base + _perturb_batch(perturbation, update, n, rng)


def _coordinatewise(mechanism: str) -> Callable[[float, float], AuditTarget]:
    def build(epsilon: float, delta: float) -> AuditTarget:
        pert = Coordinatewise(mechanism, epsilon, clip_norm=CLIP_NORM, delta=delta if mechanism == "gaussian" else None)
        x = np.full(COORDINATES, CLIP_NORM / math.sqrt(COORDINATES))
        return perturbation_target(pert, x, -x, name=f"coordinatewise/{mechanism}",
                                   neighbours=f"x = (C/sqrt(d))(1,...,1), x' = -x (d = {COORDINATES}, C = {CLIP_NORM:g})")
    return build


def _ldpvec(mechanism: str) -> Callable[[float, float], AuditTarget]:
    def build(epsilon: float, delta: float) -> AuditTarget:
        pert = LDPVec(mechanism, epsilon, clip_norm=CLIP_NORM, delta=delta if mechanism == "gaussian" else None)
        x = np.array([CLIP_NORM, 0.0])
        return perturbation_target(pert, x, -x, name=f"ldpvec/{mechanism}",
                                   neighbours=f"x = (C, 0), x' = (-C, 0) (C = {CLIP_NORM:g})")
    return build


def _central(kind: str) -> Callable[[float, float], AuditTarget]:
    def build(epsilon: float, delta: float) -> AuditTarget:
        # σ for one unsampled step at (ε, δ): GeoDP's conservative accounting; DP-SGD's multiplier is the
        # "paper" mode's, whose effective σ is σ itself
        mode = "conservative" if kind == "geodp" else "paper"
        sigma = GeoDP.calibrate_sigma(epsilon, q=1.0, steps=1, delta=delta, mode=mode, clip_norm=CLIP_NORM,
                                      batch_size=1)
        pert: Perturbation = (GeoDP(sigma, clip_norm=CLIP_NORM, batch_size=1, delta=delta) if kind == "geodp"
                              else GaussianDPSGD(sigma, clip_norm=CLIP_NORM, batch_size=1, delta=delta))
        return perturbation_target(pert, np.array([CLIP_NORM, 0.0]), np.zeros(2), name=kind,
                                   neighbours=f"x = (C, 0), x' = 0: one example's clipped gradient added or removed "
                                              f"(batch size 1, C = {CLIP_NORM:g})")
    return build


def _ldp_mod(epsilon: float, delta: float) -> AuditTarget:
    config = LdpSgdConfig({"epsilon": epsilon, "delta": delta})
    pert = mod_perturbation(config)
    received = np.zeros(COORDINATES)
    x = np.full(COORDINATES, CLIP_NORM / math.sqrt(COORDINATES))
    u = x / np.linalg.norm(x)
    trained = (received + x, received - x)

    def release(which: int, n: int, rng: np.random.Generator) -> np.ndarray:
        return (mod_release(received, trained[which], pert, n, rng) - received) @ u

    return AuditTarget(
        name="ldp-mod", claim=pert.guarantee_for(COORDINATES),
        neighbours=f"LdpMod({config['perturbation']}, {config['mechanism']}, clip-norm {config['clip-norm']:g}): "
                   f"trained - received = x or -x, x = (C/sqrt(d))(1,...,1), d = {COORDINATES}",
        statistic="<upload - received, (1,...,1)/sqrt(d)>", release=release)


def _scalar(name: str) -> Callable[[float, float], AuditTarget]:
    def build(epsilon: float, delta: float) -> AuditTarget:
        mech = get_mechanism(name, epsilon, delta=delta) if name == "gaussian" else get_mechanism(name, epsilon)
        return mechanism_target(mech)
    return build


#: Every target by name: builder(epsilon, delta) -> AuditTarget. δ applies to Gaussian noise only.
TARGETS: dict[str, Callable[[float, float], AuditTarget]] = {
    **{name: _scalar(name) for name in MECHANISMS},
    **{f"coordinatewise/{name}": _coordinatewise(name) for name in MECHANISMS},
    **{f"ldpvec/{name}": _ldpvec(name) for name in MECHANISMS},
    "geodp": _central("geodp"),
    "dpsgd": _central("dpsgd"),
    "ldp-mod": _ldp_mod,
}


def get_target(name: str, epsilon: float, *, delta: float = 1e-5) -> AuditTarget:
    """Build target ``name`` (one of :data:`TARGETS`) at ε; ``delta`` is the δ of Gaussian noise."""
    if not isinstance(name, str) or name not in TARGETS:
        raise ValueError(f"name must be one of {', '.join(TARGETS)}, got {name!r}")
    epsilon = check_positive(epsilon, "epsilon")
    delta = check_probability(delta, "delta", high_open=True)
    return TARGETS[name](epsilon, delta)


def audit(target: AuditTarget, *, samples: int = 100_000, confidence: float = 0.95, seed: int = 0) -> AuditResult:
    """Draw ``samples`` outputs per input and bound ε from below (:func:`fedpriv.audit.bound.epsilon_lower_bound`)."""
    if not isinstance(target, AuditTarget):
        raise TypeError(f"target must be an AuditTarget (see fedpriv.audit.get_target), got {type(target).__name__}")
    s_x, s_x_prime = target.sample(samples, seed)
    return epsilon_lower_bound(s_x, s_x_prime, claimed_epsilon=target.claim.epsilon, delta=target.claim.delta,
                               confidence=confidence)
