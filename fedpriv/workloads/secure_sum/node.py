"""What a run of the secure-sum workload asks of a deployed node, and what each of its reports releases.

docs/secagg.md, "Secure sum on a deployed node". :func:`node_terms` reads the run config alone:
``secagg = "oracle"`` needs the switch ``secagg-oracle`` (clear vectors to the server); the clip norm
the noise is calibrated to; the sizes (the node generates the whole ``num-clients × mean-dims``
dataset and keeps its row); one release per iteration (``rounds``). The roster, threshold and graph
of each instance are checked by the node's secure-aggregation middleware
(:meth:`~fedpriv.workloads.secure_aggregation.SecAggMiddleware.admit`).
:meth:`SecureSumDeployment.release_of` is what one report spends.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fedpriv.node.terms import NodeTerms, Release
from fedpriv.secagg.config import SecureSumConfig
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Request
from fedpriv.workloads.secure_aggregation import ORACLE
from fedpriv.workloads.secure_sum.client import RELEASES, check_report, report_stage
from fedpriv.workloads.secure_sum.contract import ITERATION

__all__ = ["TASK", "SecureSumDeployment", "node_terms"]

TASK = "secure-sum"


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one node (module docstring)."""
    cfg = SecureSumConfig.of(config)
    n, d, iterations = int(cfg["num-clients"]), int(cfg["mean-dims"]), int(cfg["sum-iterations"])
    return NodeTerms(
        task=TASK,
        features={"secagg-oracle": ("secagg", ORACLE)} if cfg["secagg"] == ORACLE else {},
        clip_norms=(("sum-clip-norm", float(cfg["sum-clip-norm"])),),
        sizes=(("clients", "num-clients", n), ("rounds", "sum-iterations", iterations), ("dims", "mean-dims", d),
               ("data-values", "num-clients × mean-dims", n * d)),
        steps=iterations,
        step_key=ITERATION,
    )


@functools.lru_cache(maxsize=1024)
def _epsilon(z: float, releases: int, delta: float) -> float:
    """ε at ``delta`` of ``releases`` Gaussian releases at noise multiplier ``z`` (RDP, the accountant the run is
    calibrated with; the run's ledger reports the tightest valid one, never larger)."""
    from fedpriv.accounting.distributed import rdp_accountant_epsilon

    return rdp_accountant_epsilon([z] * releases, delta) if releases else 0.0


class SecureSumDeployment(WorkloadDeployment):
    """A secure-sum run on deployed nodes: one node per client with the default node config (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release:
        """What one report spends from the node's vector (docs/secagg.md, "Secure sum on a deployed node").

        ``run-epsilon`` is the central ε of the whole run: σ is calibrated so that T Gaussian releases of
        the sum at ``z = σ/sum-clip-norm`` meet (ε, δ) (RDP), and each released iteration's noise has std
        σ_eff ≥ ``TwoRoundNoise.min_sigma_eff`` (= σ in corrected mode; the smaller leaky value in paper
        mode, docs/federated_mf.md §6.4). Under the assumptions secure aggregation gives — the server
        learns only the sum of the survivors' reports (fewer than the threshold of clients collude with
        it; against an active server, signed keys and the consistency check), it reports the true
        ``n1``, and the other clients add their noise shares (docs/federated_mf.md §6.1) — the node's
        vector reaches the server only through those sums. So the node's k-th round-1 report of a run
        charges ``ε_k − ε_{k−1}`` (δ with the first), ``ε_k`` the RDP ε at δ of k Gaussian releases at
        ``min_sigma_eff/sum-clip-norm``: the charges of a run sum to ``ε_k``, which bounds the spend of the
        k releases that hold this node's vector (≤ ε after T in corrected mode). A round-2 report is
        noise only (−ξ + ξ'): it charges 0 (its effect on round 1 is in σ_eff). An oracle report
        (clear, simulation-only switch) charges the Gaussian ε of the report itself: round 1 at
        ``√ζ₁·σ``, round 2 the rest of ``√(ζ₁ζ₂/(ζ₁+ζ₂))·σ`` (both reports together).
        """
        it, rnd, n1 = check_report(request, setup)
        stage = report_stage(request, setup)
        spec, noise = setup.spec, setup.noise  # type: ignore[attr-defined]
        release = functools.partial(Release, step=it + 1, key="run-epsilon", asked=float(spec.epsilon),
                                    part=f"round-{rnd}")
        delta = float(spec.delta)
        if stage == ORACLE:
            own = _epsilon(noise.round1_std() / spec.clip_norm, 1, delta)
            if rnd == 1:
                return release(epsilon=own, delta=delta)
            z1, z2 = noise.zeta1, noise.zeta2(n1)
            both = _epsilon(float(np.sqrt(z1 * z2 / (z1 + z2))) * noise.sigma / spec.clip_norm, 1, delta)
            return release(epsilon=max(both - own, 0.0), delta=0.0)
        if rnd == 2:
            return release(epsilon=0.0, delta=0.0)
        k = int(node.state.get(RELEASES, 0)) + 1
        z = noise.min_sigma_eff() / spec.clip_norm
        return release(epsilon=max(_epsilon(z, k, delta) - _epsilon(z, k - 1, delta), 0.0),
                       delta=delta if k == 1 else 0.0)
