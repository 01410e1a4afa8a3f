"""The server-side analysis of a federated LDP-SGD round: predicted vs realized deviation, HDR4ME.

docs/federated_ldp_sgd.md §9 ("analyzer hook") and §7; docs/hdr4me.md §9. After a round's replies are
validated and aggregated, :class:`ServerAnalysis` (one object for every runtime: the fast engine
and the Flower strategy call it with the same arrays) does up to three things:

1. **Prediction** (``analyzer = "on"``). The noise-induced deviation of the aggregated model,
   Δ = w^{t+1*} − w^{t+1} = Σ_k p_k·scale·n_k (§4.1, "Item A"), is predicted for this round's
   participants, weights p_k and noisy-step learning rate η: coordinatewise perturbations through
   :class:`~fedpriv.analysis.federated.FedLDPAnalyzer` (closed-form moments; ``analyzer-moments``
   picks the §7.3 source), LDPVec and GeoDP through the Monte-Carlo predictor of §7.4 on proxy
   gradients, ``none`` is exactly 0. Logged: ``predicted-sq-deviation`` (E‖Δ‖²) and
   ``predicted-sq-deviation-q<α>`` (its α-quantile).
2. **Realized deviation** (``analyzer-oracle = "on"``, simulation only). Clients also send their
   clean counterpart ``base + scale·g̃``; Δ_realized = Σ_k p_k (upload_k − clean_k) is logged as
   ``realized-sq-deviation`` with ``realized-quantile`` (where it falls under the predicted law).
3. **Re-calibration** (``recalibration`` ≠ ``"none"``; coordinatewise, E = 1, FedAvg). With E = 1
   every upload is ``w − η·(C/√d)·t*_k``, so the server recovers the weighted mean of the
   normalized reports θ̂ = (w − w_agg)/(η C/√d), re-calibrates it with HDR4ME
   (:func:`fedpriv.estimation.hdr4me.recalibrate`, w = 1 since normalized coordinates lie in
   [−1, 1]), using δ_j, σ_j from the analyzer in normalized units, and returns
   ``w − η (C/√d) θ*``. Post-processing: the privacy guarantee is unchanged.

Decisions (the specs are silent): the prediction needs the weighted mean, so it requires
``strategy = "fedavg"``; with ``noise-schedule = "every_step"`` it predicts the last step's noise
(earlier steps' noise is inside the clients' ``base``, as it is inside the oracle's clean model).
Proxy gradients (§7.3 ii) are minibatch gradients of the server-held data at the current global
model, one per participating client, keyed by ``stream(seed, round, SERVER, "analyzer-proxy")``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedpriv.analysis.deviation import DeviationLaw
from fedpriv.analysis.federated import (
    BoundMoments,
    FedLDPAnalyzer,
    ProxyMoments,
    ReportMoments,
)
from fedpriv.analysis.federated_mc import monte_carlo_law
from fedpriv.estimation.hdr4me import recalibrate
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig
from fedpriv.federated.local import build_perturbation, clip_per_sample, learning_rate
from fedpriv.models import task_loss, unflatten
from fedpriv.perturbation import Coordinatewise, NoPerturbation
from fedpriv.rng import SERVER, stream

__all__ = ["ANALYSIS_PREFIXES", "ProxyGradients", "RoundInputs", "ServerAnalysis", "proxy_gradients"]

#: Every metric :class:`ServerAnalysis` logs starts with one of these.
ANALYSIS_PREFIXES = ("predicted-", "realized-", "recal-")

#: ``proxies(params, server_round, count) -> (count, d)`` clipped gradients of server-held data.
ProxyGradients = Callable[[np.ndarray, int, int], np.ndarray]

PROXY_PURPOSE = "analyzer-proxy"
MC_PROXIES, MC_SAMPLES = 16, 25
MC_PURPOSE = "analyzer-monte-carlo"


@dataclass(frozen=True, eq=False)
class RoundInputs:
    """What the server holds after aggregating a round (arrays in float64 or float32).

    Attributes
    ----------
    server_round : int
    global_params : ndarray (d,)
        The model the clients started from.
    updates : ndarray (K, d)
        The valid uploads, in the order of ``weights``.
    weights : ndarray (K,)
        Aggregation weights (any positive scale; normalized here).
    aggregated : ndarray (d,)
        The aggregate the strategy computed.
    clean : ndarray (K, d) or None
        The oracle's clean counterparts, when every valid reply carried one.
    """

    server_round: int
    global_params: np.ndarray
    updates: np.ndarray
    weights: np.ndarray
    aggregated: np.ndarray
    clean: np.ndarray | None = None


def _normalized(weights: np.ndarray) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def _q_key(alpha: float) -> str:
    return f"predicted-sq-deviation-q{100 * alpha:g}"


class ServerAnalysis:
    """Prediction, oracle comparison and HDR4ME re-calibration of each round (module docstring)."""

    def __init__(self, config: LdpSgdConfig, d: int, *, proxies: ProxyGradients | None = None) -> None:
        self.config, self.d, self.proxies = config, int(d), proxies
        self.analyze = config["analyzer"] == "on"
        self.oracle = config["analyzer-oracle"] == "on"
        self.mode = config["recalibration"]
        self.perturbation = build_perturbation(config, batch_size=config["batch-size"])
        if (self.analyze or self.mode != "none") and config["strategy"] != "fedavg":
            raise ValueError(f"analyzer and recalibration need strategy = 'fedavg' (the deviation law is that of the "
                             f"weighted mean), got strategy = {config['strategy']!r}")
        if self.mode != "none":
            if config["perturbation"] != "coordinatewise" or config["local-steps"] != 1:
                raise ValueError(
                    f"recalibration = {self.mode!r} needs perturbation = 'coordinatewise' and local-steps = 1 (the "
                    f"server must recover the mean of the normalized reports, docs/hdr4me.md §9), got perturbation = "
                    f"{config['perturbation']!r}, local-steps = {config['local-steps']}")
        moments = config["analyzer-moments"]
        monte_carlo = config["perturbation"] in ("ldpvec", *PER_SAMPLE_PERTURBATIONS)
        needs_proxies = (monte_carlo and (self.analyze or self.mode != "none")) or (
            moments == "proxy" and config["perturbation"] == "coordinatewise")
        if needs_proxies and proxies is None:
            raise ValueError(f"perturbation = {config['perturbation']!r} with analyzer-moments = {moments!r} needs "
                             "server-held proxy gradients, and none were given")
        if moments == "reports" and (config["mechanism"] != "piecewise" or config["local-steps"] != 1):
            raise ValueError("analyzer-moments = 'reports' needs mechanism = 'piecewise' and local-steps = 1 "
                             "(docs/federated_ldp_sgd.md §7.3 iii)")

    @classmethod
    def from_config(cls, config: LdpSgdConfig, d: int, *, proxies: ProxyGradients | None = None) -> ServerAnalysis | None:
        """The analysis the config asks for, or ``None`` when analyzer, oracle and recalibration are all off."""
        if config["analyzer"] == "off" and config["recalibration"] == "none" and config["analyzer-oracle"] == "off":
            return None
        return cls(config, d, proxies=proxies)

    # ------------------------------------------------------------------ pieces

    def noisy_step_eta(self, server_round: int) -> float:
        """η of the round's privatized (last) local step: t = (round − 1)·E + E − 1."""
        e = self.config["local-steps"]
        return learning_rate(self.config, (server_round - 1) * e + e - 1)

    def _proxy_gradients(self, inputs: RoundInputs, k: int) -> Any:
        """The round's ``k`` server-held proxy gradients (``__init__`` requires them wherever they are used)."""
        if self.proxies is None:
            raise ValueError(f"perturbation = {self.config['perturbation']!r} with analyzer-moments = "
                             f"{self.config['analyzer-moments']!r} needs server-held proxy gradients, and none were given")
        return self.proxies(inputs.global_params, inputs.server_round, k)

    def _moments(self, inputs: RoundInputs, k: int) -> Any:
        kind = self.config["analyzer-moments"]
        if kind == "proxy":
            return ProxyMoments.from_gradients(self._proxy_gradients(inputs, k), self.config["clip-norm"])
        if kind == "reports":
            return ReportMoments.from_uploads(inputs.global_params, inputs.updates,
                                              eta=self.noisy_step_eta(inputs.server_round),
                                              clip_norm=self.config["clip-norm"])
        return BoundMoments()

    def _analyzer(self, inputs: RoundInputs) -> FedLDPAnalyzer:
        """The round's closed-form analyzer (coordinatewise): its participants, weights and noisy-step η."""
        w = _normalized(inputs.weights)
        if not isinstance(self.perturbation, Coordinatewise):
            raise TypeError(f"the closed-form analyzer needs perturbation = 'coordinatewise', got "
                            f"{self.config['perturbation']!r}")
        return FedLDPAnalyzer.from_perturbation(self.perturbation, d=self.d, weights=w,
                                                eta=self.noisy_step_eta(inputs.server_round),
                                                moments=self._moments(inputs, w.size))

    def law(self, inputs: RoundInputs, analyzer: FedLDPAnalyzer | None = None) -> DeviationLaw:
        """The predicted law of Δ for this round (module docstring, item 1); ``analyzer`` if already built."""
        pert = self.perturbation
        if isinstance(pert, NoPerturbation):
            return DeviationLaw(mean=np.zeros(self.d), var=np.zeros(self.d))
        if isinstance(pert, Coordinatewise):
            return (analyzer or self._analyzer(inputs)).deviation_law()
        w = _normalized(inputs.weights)
        eta = self.noisy_step_eta(inputs.server_round)
        # K' ≤ 16 proxies stand for the K clients (module docstring): S·K' perturbation calls per round
        k = min(w.size, MC_PROXIES)
        proxies = self._proxy_gradients(inputs, k)
        rng = stream(self.config["seed"], inputs.server_round, SERVER, MC_PURPOSE)
        law = monte_carlo_law(pert, proxies, np.full(k, 1.0 / k), eta, rng=rng, samples=MC_SAMPLES)
        return DeviationLaw(mean=law.mean, var=law.var * k * float(w @ w))

    def _recalibrate(self, inputs: RoundInputs, analyzer: FedLDPAnalyzer) -> tuple[np.ndarray, dict[str, float]]:
        eta = analyzer.config.eta
        s = self.config["clip-norm"] / math.sqrt(self.d)  # normalized → gradient units (§3 step 3)
        glob = np.asarray(inputs.global_params, dtype=np.float64)
        theta_hat = (glob - np.asarray(inputs.aggregated, dtype=np.float64)) / (eta * s)
        m, v = analyzer.coord_moments()
        rec = recalibrate(theta_hat, delta=m / s, sigma=np.sqrt(v) / s, mode=self.mode,
                          alpha=self.config["recalibration-alpha"], l2_proxy=self.config["l2-proxy"], w=1.0)
        new = glob - eta * s * rec.theta
        metrics = {
            "recal-shrinkage": float(np.linalg.norm(rec.theta) / max(float(np.linalg.norm(theta_hat)), 1e-300)),
            "recal-p-none": float(np.mean(rec.p1)),
            "recal-p-l1": float(np.mean(rec.p2)),
            "recal-p-l2": float(np.mean(rec.p3)),
        }
        return new, metrics

    # ------------------------------------------------------------------ the hook

    def __call__(self, inputs: RoundInputs) -> tuple[np.ndarray, dict[str, float]]:
        """The round's (possibly re-calibrated) aggregate and its analysis metrics."""
        w = _normalized(inputs.weights)
        new = np.asarray(inputs.aggregated, dtype=np.float64)
        metrics: dict[str, float] = {}
        alpha = self.config["analyzer-alpha"]
        # one analyzer (one proxy or report pass) serves the prediction and the re-calibration
        needed = (self.analyze or self.mode != "none") and isinstance(self.perturbation, Coordinatewise)
        analyzer = self._analyzer(inputs) if needed else None
        law = self.law(inputs, analyzer) if self.analyze else None
        if law is not None:
            metrics["predicted-sq-deviation"] = law.expected_sq_norm()
            metrics[_q_key(alpha)] = law.sq_norm_quantile(alpha)
        clean_agg = None
        if self.oracle and inputs.clean is not None:
            clean_agg = w @ np.asarray(inputs.clean, dtype=np.float64)
            realized = w @ np.asarray(inputs.updates, dtype=np.float64) - clean_agg
            metrics["realized-sq-deviation"] = float(realized @ realized)
            if law is not None:
                metrics["realized-quantile"] = float(law.compare(realized, alpha=alpha).sq_norm_level[0])
        if self.mode != "none":
            new, rmetrics = self._recalibrate(inputs, analyzer or self._analyzer(inputs))
            metrics.update(rmetrics)
            if clean_agg is not None:
                diff = new - clean_agg
                metrics["realized-sq-deviation-recalibrated"] = float(diff @ diff)
        return new, metrics


def proxy_gradients(model: nn.Module, x: Tensor, y: Tensor, *, num_classes: int, config: LdpSgdConfig) -> ProxyGradients:
    """Proxy gradients (§7.3 ii): minibatch-mean gradients of server-held (x, y), each clipped to C.

    Each call draws ``count`` minibatches of ``min(B, len(x))`` distinct examples from
    ``stream(seed, round, SERVER, "analyzer-proxy")`` and evaluates them at once (``vmap`` over
    minibatches of ``grad`` of the batch loss at the given flat parameters).
    """
    b = min(int(config["batch-size"]), len(x))
    clip, seed = float(config["clip-norm"]), int(config["seed"])

    def batch_loss(w: Tensor, xb: Tensor, yb: Tensor) -> Tensor:
        logits = torch.func.functional_call(model, unflatten(model, w), (xb,))
        return task_loss(logits, yb, num_classes)

    grad_fn = torch.func.vmap(torch.func.grad(batch_loss), in_dims=(None, 0, 0))

    def proxies(params: np.ndarray, server_round: int, count: int) -> np.ndarray:
        rng = stream(seed, server_round, SERVER, PROXY_PURPOSE)
        idx = np.argsort(rng.random((count, len(x))), axis=1)[:, :b]
        w = torch.as_tensor(np.asarray(params), dtype=torch.float32)
        grads = grad_fn(w, x[torch.from_numpy(idx)], y[torch.from_numpy(idx)])
        clipped, _ = clip_per_sample(grads, clip)
        return clipped.detach().to(torch.float64).numpy()

    return proxies
