"""Monte-Carlo deviation predictor for any update perturbation (docs/federated_ldp_sgd.md §7.4).

For perturbations without closed-form moments (LDPVec, GeoDP, ...): draw S outputs g*_k per proxy
clipped gradient, estimate the per-coordinate mean and variance of n_k = g*_k − g̃_k, and combine
them across clients exactly as the analytic path does (m = Σp_k E n_k, v = Σp_k² Var n_k, §4.2),
giving Δ ~ N(−η m, η² diag v).

Cost: S·K calls of ``perturbation.perturb`` (no perturbation has a batched API; LDPVec takes about
0.6 ms per call at d = 785, so the default S = 200 with K = 10 proxies is about 1 s). Keep K small:
pass one shared (d,) proxy when the clients are alike. For
:class:`~fedpriv.perturbation.Coordinatewise` use the exact
:class:`~fedpriv.analysis.federated.FedLDPAnalyzer` instead.

The estimated m carries Monte-Carlo error of variance v/S per coordinate, so the law's E‖Δ‖²
overestimates η²(‖m‖² + Σv) by about η²Σv/S (a factor ≤ 1 + 1/S).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_array, check_int, check_positive
from fedpriv.analysis.deviation import DeviationLaw
from fedpriv.analysis.federated import check_weights, combine_clients
from fedpriv.perturbation.base import Perturbation, clip_l2

__all__ = ["monte_carlo_law"]


def monte_carlo_law(
    perturbation: Perturbation,
    proxies: Any,
    weights: np.ndarray | int,
    eta: float,
    *,
    rng: np.random.Generator,
    samples: int = 200,
) -> DeviationLaw:
    """Deviation law of one noisy aggregation step, with per-client noise moments from simulation.

    Parameters
    ----------
    perturbation : Perturbation
        Any update perturbation (its ``clip_norm`` defines g̃ = clip(proxy)).
    proxies : Tensor or ndarray of shape (K, d), or (d,) shared by all clients
        Proxy gradients, one per client (K = N) or one for all.
    weights : ndarray of shape (N,) or int
        Aggregation weights p_k (an int N means uniform).
    eta : float
        Learning rate of the noisy step.
    rng : numpy.random.Generator
        Stream for every draw.
    samples : int (default: 200)
        S ≥ 2 outputs per proxy.
    """
    if not isinstance(perturbation, Perturbation):
        raise TypeError(f"perturbation must be a fedpriv Perturbation, got {type(perturbation).__name__}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)), got {type(rng).__name__}")
    g = proxies.detach().cpu().numpy() if isinstance(proxies, torch.Tensor) else proxies
    g = np.atleast_2d(check_array(g, "proxies"))
    if g.ndim != 2:
        raise ValueError(f"proxies must have shape (K, d) or (d,), got {np.shape(proxies)}")
    p = check_weights(weights)
    if g.shape[0] not in (1, p.size):
        raise ValueError(f"proxies must have one row per client ({p.size}) or one shared row, got {g.shape[0]} rows")
    eta = check_positive(eta, "eta")
    samples = check_int(samples, "samples", minimum=2)
    clip = getattr(perturbation, "clip_norm", math.inf)

    mean = np.empty_like(g)
    var = np.empty_like(g)
    for k, row in enumerate(torch.from_numpy(g)):
        g_tilde = row if math.isinf(clip) else clip_l2(row, clip)[0]
        draws = np.stack([perturbation.perturb(row, rng).vector.numpy() for _ in range(samples)])  # no batched API
        noise = draws - g_tilde.numpy()
        mean[k] = noise.mean(axis=0)
        var[k] = noise.var(axis=0, ddof=1)
    m, v = combine_clients(p, mean, var)
    return DeviationLaw(mean=-eta * m, var=eta**2 * v)
