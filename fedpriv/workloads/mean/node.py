"""What a run of the mean workload asks of a deployed node, and what one report releases.

:func:`node_terms` reads the run config alone (no data, no file): the report mechanism, the
simulation-only feature an attack needs (``attack = "ldp-manipulation"``), and the sizes — users,
repetitions, the m values of one report and the n·d values a node generates (every node regenerates
the data from the seed and keeps its own row). :func:`report_release` is what a node spends
answering the report request of repetition k: one m-of-d report. Its m values are perturbed with
ε/m each, so the report is ε-LDP by sequential composition (docs/ldp_mechanisms.md §1.2); the
Gaussian mechanism releases the m values at once with (ε, δ) at L2 sensitivity 2√m
(docs/ldp_mechanisms.md §6, ``vector`` mode), and the node charges the larger of the configured δ and
the exact δ at ε of the σ it draws with (Balle and Wang, ICML 2018, Theorem 8: the classical
calibration's theorem assumes ε < 1). Each repetition redraws every report, so a run of R
repetitions spends R·ε (R·δ) on a node: one charge per repetition.
"""

from __future__ import annotations

import math
from typing import Any

from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.mean.client import check_report
from fedpriv.workloads.mean.contract import REPETITION
from fedpriv.workloads.messages import Request
from fedpriv.workloads.registry import MEAN_KEYS

__all__ = ["STEP_KEY", "TASK", "MeanDeployment", "node_terms", "report_release"]

TASK = "mean"
#: What a step of a mean run is called in its requests: repetition k asks every user for its report of k.
STEP_KEY = REPETITION


class _Keys(ConfigView):
    """The mean workload's keys (those of :class:`fedpriv.workloads.mean.MeanConfig`), read before any setup."""

    KEYS = compose(COMMON, MEAN_KEYS)


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one node (module docstring)."""
    cfg = _Keys.of(config)
    n, d, m = cfg["num-clients"], cfg["mean-dims"], cfg["sample-dims"] or cfg["mean-dims"]
    features: dict[str, tuple[str, Any]] = {}
    if cfg["attack"] != "none":
        features["attacks"] = ("attack", cfg["attack"])
    return NodeTerms(
        task=TASK,
        mechanisms=(("mechanism", cfg["mechanism"]),),
        features=features,
        sizes=(("clients", "num-clients", n), ("rounds", "repetitions", cfg["repetitions"]),
               ("dims", "sample-dims" if cfg["sample-dims"] else "mean-dims", m),
               ("data-values", "num-clients × mean-dims", n * d)),
        steps=int(cfg["repetitions"]),
        step_key=STEP_KEY,
    )


def report_release(setup: Any, repetition: int) -> Release:
    """What a node spends on its report of ``repetition`` in the run ``setup`` (a MeanSetup; module docstring)."""
    from fedpriv.mechanisms.protocol import report_guarantee

    g = report_guarantee(setup.mech, setup.mechanism, setup.epsilon, setup.m, setup.d)
    epsilon, delta = float(setup.epsilon), float(g.delta)
    if setup.mechanism == "gaussian":
        from fedpriv.mechanisms.gaussian import gaussian_delta

        mech = setup.mech
        delta = max(delta, gaussian_delta(float(mech.sigma), epsilon, float(mech.sensitivity)))
    elif not g.holds:
        epsilon = math.inf
    return Release(step=int(repetition), epsilon=epsilon, delta=min(delta, 1.0), key="epsilon", asked=setup.epsilon)


class MeanDeployment(WorkloadDeployment):
    """A mean run on deployed nodes: one node per user with the default node config (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release:
        """A report request releases the user's one m-of-d report of its repetition (ε per report)."""
        return report_release(setup, check_report(request, setup))
