"""What deploying a workload needs: the nodes' configs and shared secrets, and what a deployed node checks.

A workload (:class:`~fedpriv.workloads.base.Workload`) names its deployment as the class attribute
``deployment``, a :class:`WorkloadDeployment` (docs/architecture.md, "Adding a workload"). It says

* the node config each SuperNode is started with (:meth:`WorkloadDeployment.node_config`) and the
  client a node serves, read back from it (:meth:`WorkloadDeployment.client_of`);
* the secrets the clients' nodes share and the server must not hold
  (:meth:`WorkloadDeployment.provision`);
* what a run asks of a deployed node (:meth:`WorkloadDeployment.node_terms`, from the run config
  alone) and what each request would release (:meth:`WorkloadDeployment.release_of`): the facts the
  node's own policy and ledger check (:mod:`fedpriv.node`, docs/threat_model.md §3).

The default (this base class) gives one node per client with ``partition-id`` and
``num-partitions``, provisions nothing and declares no node terms, so a node under a policy
(anything but a simulation) refuses to serve the workload. The runtimes pass in what it reads — the
setup, the run's client ids, the run config — never the workload itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedpriv.node.terms import NodeTerms, Release
    from fedpriv.workloads.base import Node, Setup
    from fedpriv.workloads.messages import Request

__all__ = ["WorkloadDeployment"]


class WorkloadDeployment:
    """A workload's deployment (module docstring); subclass it and override what the workload's nodes need."""

    def node_config(self, setup: Setup, client: int, clients: Sequence[int]) -> dict[str, Any]:
        """The node config a SuperNode of ``client`` (one of the run's ``clients``) is started with (simulation and
        deployment)."""
        return {"partition-id": int(client), "num-partitions": len(clients)}

    def provision(self, setup: Setup, directory: Path) -> Setup:
        """Write the secrets the clients' nodes share and the server must never hold (e.g. vertical k-means' key file)
        into ``directory`` (private to the nodes); the setup whose :meth:`node_config` names them (default: none).

        The Flower simulation engine provisions into a private temporary directory; a deployment into
        a directory only the nodes read. The server's setup (built from the run config) never has them.
        """
        return setup

    def client_of(self, setup: Setup, node_config: Mapping[str, Any], clients: Sequence[int]) -> int:
        """The client id a node serves, from its node config (one of the run's ``clients``)."""
        pid = node_config.get("partition-id")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid not in clients:
            raise ValueError(f"node config partition-id must be one of this run's client ids 0..{max(clients)}, got "
                             f"{pid!r} (start one SuperNode per client with --node-config 'partition-id=<id> ...')")
        if node_config.get("num-partitions", len(clients)) != len(clients):
            raise ValueError(f"node config num-partitions must equal the run's {len(clients)} clients, got "
                             f"{node_config.get('num-partitions')!r}")
        return pid

    def node_terms(self, config: Any) -> NodeTerms | None:
        """What a run of ``config`` (a :class:`~fedpriv.config.RunConfig`) asks of one deployed node, from the keys
        alone — before the node runs the workload's setup, imports a model or opens a file.

        Default None: the workload does not say, and a node under a policy (anything but a simulation)
        refuses to serve it.
        """
        return None

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release | None:
        """What answering ``request`` would release from ``node``'s data — its step and (ε, δ) — or None when the
        answer releases nothing derived from the data (a question about the node, a protocol step).

        The node's policy checks it and its ledger charges it before the answer leaves. Default: every request
        of a workload that declares no :meth:`node_terms` is refused before this is asked.
        """
        raise NotImplementedError(f"workload {setup.workload!r} declares node terms but not release_of")
