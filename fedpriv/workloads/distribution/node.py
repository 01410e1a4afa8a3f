"""What a run of the distribution workload asks of a deployed node, and what one report releases.

:func:`node_terms` reads the run config alone (the CSV is not opened): the method (``dist-method``:
the node's perturbation, named as the key names it), the simulation-only feature an attack needs
(``attack = "ldp-manipulation"``), the CSV file the node would read (``dist-data = "csv"``: only
inside its policy's data root), and the sizes. :func:`trial_release` is what a node spends
answering the report request of query q, which trial t = q + 1 asks: one report of its one value,
ε-LDP whatever the method (docs/square_wave_ems.md, "each user sends one ε-LDP report"; the
server's estimate is post-processing). The same users answer every trial, so a run of T trials
spends T·ε on a node by sequential composition (docs/square_wave_ems.md §12): one charge per trial.
"""

from __future__ import annotations

from typing import Any

from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.distribution.client import check_report
from fedpriv.workloads.messages import Request
from fedpriv.workloads.registry import DISTRIBUTION_KEYS

__all__ = ["STEP_KEY", "TASK", "DistributionDeployment", "node_terms", "trial_release"]

TASK = "distribution"
#: What a step of a distribution run is called: trial t asks query t − 1.
STEP_KEY = "trial"


class _Keys(ConfigView):
    """The distribution workload's keys (those of :class:`fedpriv.workloads.distribution.DistributionConfig`)."""

    KEYS = compose(COMMON, DISTRIBUTION_KEYS)


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one node (module docstring)."""
    cfg = _Keys.of(config)
    features: dict[str, tuple[str, Any]] = {}
    if cfg["attack"] != "none":
        features["attacks"] = ("attack", cfg["attack"])
    generated = cfg["dist-data"] != "csv"
    sizes = [("rounds", "repetitions", cfg["repetitions"]), ("dims", "dist-buckets", cfg["dist-buckets"])]
    if generated:  # a CSV's users are its rows, which the node counts when it reads the file
        sizes += [("clients", "num-clients", cfg["num-clients"]), ("data-values", "num-clients", cfg["num-clients"])]
    return NodeTerms(
        task=TASK,
        mechanisms=(("dist-method", cfg["dist-method"]),),
        features=features,
        paths=(("dist-csv", cfg["dist-csv"]),) if not generated and cfg["dist-csv"].strip() else (),
        sizes=tuple(sizes),
        steps=int(cfg["repetitions"]),
        step_key=STEP_KEY,
    )


def trial_release(setup: Any, query: int) -> Release:
    """What a node spends on its report of ``query`` (trial ``query + 1``) in the run ``setup`` (module docstring)."""
    method = setup.method
    return Release(step=int(query) + 1, epsilon=float(method.epsilon), delta=0.0, key="epsilon", asked=method.epsilon)


class DistributionDeployment(WorkloadDeployment):
    """A distribution run on deployed nodes: one node per user with the default node config (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release:
        """A report request releases the user's one ε-LDP report of its query (ε per trial)."""
        return trial_release(setup, check_report(request, setup))
