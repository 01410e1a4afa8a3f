"""What a run of federated LDP-SGD asks of a deployed node, and what one round's answer releases.

docs/threat_model.md §5. :func:`node_terms` reads the run config alone (no import, no file):
the perturbation and mechanism, the simulation-only features it needs (``perturbation = "none"``,
``analyzer-oracle``, attacks, LDPVec controls), noise floors, the upload's cover
(``noise-schedule = "last_step"`` leaves E − 1 steps clean), the model factory it would import, the
files it would open and its sizes. :func:`round_release` is what a node spends answering one train
request: the round's (ε, δ) as the run's own ledger counts it (:func:`fedpriv.results.round_spend`):
ε per noisy step times the noisy steps for the local mechanisms; for GeoDP and DP-SGD the RDP ε of
the round's E Poisson-subsampled Gaussian steps at q = B/n_k (the node's own n_k) at the run's δ.
:class:`LdpSgdDeployment` is the workload's deployment: one node per client with the default node
config, these node terms and releases.
"""

from __future__ import annotations

import math
from typing import Any

from fedpriv.data.config import FILE_FORMATS
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig, is_factory_spec
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.ldp_sgd.contract import SERVER_ROUND, TASK
from fedpriv.workloads.messages import Request

__all__ = ["LdpSgdDeployment", "node_terms", "round_release"]

#: Datasets read from ``data-dir`` when it is given.
_DIR_DATASETS = ("mnist", "mnist-5k", "cifar10")


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one node (module docstring)."""
    cfg = LdpSgdConfig.of(config)
    kind = cfg["perturbation"]
    features: dict[str, tuple[str, Any]] = {}
    if kind == "none":
        features["no-noise"] = ("perturbation", kind)
    if cfg["analyzer-oracle"] == "on":
        features["analyzer-oracle"] = ("analyzer-oracle", "on")
    if cfg["attack"] != "none":
        features["attacks"] = ("attack", cfg["attack"])
    if cfg["ldpvec-control"] != "none" and kind == "ldpvec":
        features["controls"] = ("ldpvec-control", cfg["ldpvec-control"])
    per_sample = kind in PER_SAMPLE_PERTURBATIONS
    uncovered = (("noise-schedule", "last_step")
                 if cfg["noise-schedule"] == "last_step" and cfg["local-steps"] > 1 and kind != "none" else None)
    dataset = cfg["dataset"]
    prefix, sep, path = dataset.partition(":")
    paths: list[tuple[str, str]] = []
    if sep and prefix in FILE_FORMATS:
        paths.append(("dataset", path))
    if dataset in _DIR_DATASETS and cfg["data-dir"].strip():
        paths.append(("data-dir", cfg["data-dir"]))
    features_per_sample = cfg["synthetic-features"]
    data_values = (cfg["synthetic-samples"] * features_per_sample if dataset == "synthetic" else
                   cfg["num-clients"] * cfg["samples-per-client"] * features_per_sample
                   if dataset == "synthetic-clients" else 0)
    sizes = [("clients", "num-clients", cfg["num-clients"]), ("rounds", "rounds", cfg["rounds"]),
             ("steps", "local-steps", cfg["local-steps"]), ("steps", "batch-size", cfg["batch-size"])]
    if data_values:
        what = ("synthetic-samples × synthetic-features" if dataset == "synthetic" else
                "num-clients × samples-per-client × synthetic-features")
        sizes.append(("data-values", what, data_values))
    return NodeTerms(
        task=TASK,
        perturbations=(("perturbation", kind),) if kind != "none" else (),
        mechanisms=(("mechanism", cfg["mechanism"]),) if kind in ("coordinatewise", "ldpvec") else (),
        features=features,
        sigmas=(("sigma", float(cfg["sigma"])),) if per_sample else (),
        clip_norms=(("clip-norm", float(cfg["clip-norm"])),),
        uncovered=uncovered,
        models=(("model", cfg["model"]),) if is_factory_spec(cfg["model"]) else (),
        paths=tuple(paths),
        sizes=tuple(sizes),
        release=_stated_release(cfg),
        steps=int(cfg["rounds"]),
        step_key=SERVER_ROUND,
    )


def _stated_release(cfg: LdpSgdConfig) -> tuple[str, float, float] | None:
    """A round's (ε, δ) as the keys state it: ``epsilon`` (and ``delta`` for the Gaussian mechanism) of a local
    perturbation whose budget is per update; None where it depends on d or the node's data (per-coordinate
    budgets, GeoDP and DP-SGD), and ε = ∞ without noise."""
    kind = cfg["perturbation"]
    if kind == "none":
        return ("perturbation", math.inf, 0.0)
    if kind == "ldpvec" or (kind == "coordinatewise" and cfg["budget-mode"] == "split"):
        return ("epsilon", float(cfg["epsilon"]), float(cfg["delta"]) if cfg["mechanism"] == "gaussian" else 0.0)
    return None


def round_release(config: Any, *, server_round: int, dim: int, num_examples: int) -> Release:
    """What a node spends answering the train request of ``server_round`` for a ``dim``-parameter model with its
    ``num_examples`` examples: the round's (ε, δ) (module docstring); ε = ∞ where no guarantee holds."""
    # imported here: the perturbations load torch, which a refusal never needs
    from fedpriv.accounting.distributed import rdp_accountant_epsilon
    from fedpriv.federated.local import build_perturbation, effective_batch_size
    from fedpriv.perturbation import GaussianDPSGD, GeoDP

    cfg = LdpSgdConfig.of(config)
    b = effective_batch_size(cfg, num_examples)
    perturbation = build_perturbation(cfg, batch_size=b)
    steps = cfg["local-steps"] if cfg["noise-schedule"] == "every_step" else 1
    if isinstance(perturbation, (GeoDP, GaussianDPSGD)):
        sigma = (perturbation.effective_sigma("conservative") if isinstance(perturbation, GeoDP)
                 else perturbation.sigma)
        q = min(1.0, b / max(num_examples, 1))
        epsilon = (rdp_accountant_epsilon([sigma] * cfg["local-steps"], cfg["delta"], sampling_rate=q) if sigma > 0
                   else math.inf)
        return Release(step=server_round, epsilon=epsilon, delta=float(cfg["delta"]), key="sigma", asked=cfg["sigma"])
    if cfg["perturbation"] == "none":
        return Release(step=server_round, epsilon=math.inf, delta=0.0, key="perturbation", asked="none")
    g = perturbation.guarantee_for(dim)
    epsilon = g.epsilon * steps if g.holds else math.inf
    return Release(step=server_round, epsilon=epsilon, delta=min(1.0, g.delta * steps), key="epsilon",
                   asked=cfg["epsilon"])


class LdpSgdDeployment(WorkloadDeployment):
    """Federated LDP-SGD on deployed nodes: its node terms and each train round's release (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release | None:
        """A train request releases the round's update (evaluate and query requests release nothing)."""
        if request.kind != "train":
            return None
        from fedpriv.workloads.ldp_sgd.client import round_and_params  # loads torch, which node_terms never needs

        server_round, params = round_and_params(request)
        return round_release(setup.config, server_round=server_round, dim=int(params.size),
                             num_examples=int(node.data.y.shape[0]))
