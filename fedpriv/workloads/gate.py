"""A node's gate: its own policy checked against every run, its own ledger charged for every release.

docs/threat_model.md §3–§4. Every client side — fedpriv's ClientApp, ``LdpMod``, ``SecAggMod`` —
passes each request through one :class:`NodeGate` before it answers:

1. :meth:`NodeGate.admit` checks what the run config asks of the node (the workload's
   :meth:`~fedpriv.workloads.deployment.WorkloadDeployment.node_terms`) against the node's
   :class:`~fedpriv.node.policy.NodePolicy` *before* the node sets the run up, imports a model factory
   or opens a file;
2. :meth:`NodeGate.check` asks the workload what the request would release
   (:meth:`~fedpriv.workloads.deployment.WorkloadDeployment.release_of`) and checks it against the policy's ceiling
   and the ledger, before the handler runs;
3. :meth:`NodeGate.charge` charges it to the ledger, under the ledger's lock, before the answer leaves.

A refusal at any step is a :class:`~fedpriv.node.policy.PolicyRefusal` naming the key, the value asked
and the limit, and nothing is released. :meth:`NodeGate.randomness` gives the node's draws: keyed by
the run seed only where the node's own policy allows ``keyed-noise`` (fedpriv's simulations, or a
``fedpriv deploy local --keyed-noise`` for tests), secret otherwise. The simulation policy
(:meth:`NodePolicy.simulation`) keeps no ledger and checks nothing: in a simulation the user is the
server too, and the run's own ledger accounts for the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.node.ledger import LedgerError, NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal, node_policy
from fedpriv.node.randomness import KeyedRandomness, Randomness, SecretRandomness
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup, Workload
from fedpriv.workloads.messages import Refusal, Request

__all__ = ["NodeGate"]


class NodeGate:
    """One node's policy and ledger (module docstring); :meth:`of` builds it for a node."""

    def __init__(self, policy: NodePolicy, ledger: NodeLedger | None) -> None:
        if not isinstance(policy, NodePolicy):
            raise TypeError(f"policy must be a fedpriv.node.NodePolicy, got {type(policy).__name__}")
        if ledger is None and not policy.in_simulation:
            raise ValueError("a node outside a simulation must keep a ledger")
        self.policy = policy
        self.ledger = ledger
        self._terms: dict[tuple[str, str], NodeTerms | None] = {}

    @classmethod
    def of(cls, policy: NodePolicy, partition: Any = None) -> NodeGate:
        """The gate of a node under ``policy``; its ledger is the policy's, else the default one of ``partition``."""
        if policy.in_simulation:
            return cls(policy, None)
        return cls(policy, NodeLedger(policy.ledger or default_ledger_path(partition)))

    @classmethod
    def simulation(cls) -> NodeGate:
        """The gate of a node inside a fedpriv simulation: checks nothing, keeps no ledger, keys its noise."""
        return cls(NodePolicy.simulation(), None)

    def __repr__(self) -> str:
        return f"NodeGate({self.policy.source}, ledger={self.ledger!r})"

    @property
    def in_simulation(self) -> bool:
        """Whether this node is part of a fedpriv simulation (no limit, no ledger)."""
        return self.policy.in_simulation

    @classmethod
    def for_node(cls, node_config: Mapping[str, Any], fixed: NodePolicy | None = None) -> NodeGate:
        """The gate of a node with ``node_config``: ``fixed`` (a runtime's policy), else the file the node config
        names under ``fedpriv-policy``, else the default policy (ValueError for a bad file)."""
        return cls.of(fixed if fixed is not None else node_policy(node_config), node_config.get("partition-id"))

    def terms(self, workload: Workload, config: Any) -> NodeTerms | None:
        """What ``config`` asks of this node, after checking it against the policy (:class:`PolicyRefusal`)."""
        if self.policy.in_simulation:
            return None
        key = (workload.name, config.digest())
        if key not in self._terms:
            terms = workload.deployment.node_terms(config)
            if terms is None:
                raise PolicyRefusal("task", workload.name, "this workload does not declare what it releases "
                                    "(WorkloadDeployment.node_terms), so a node under a policy does not serve it")
            self.policy.admit(terms)
            self._terms[key] = terms
        return self._terms[key]

    def admit(self, workload: Workload, config: Any) -> Any:
        """The config this node runs: ``config`` after checking it against the policy (:class:`PolicyRefusal`),
        with every path it names resolved inside the policy's data root (what the node opens)."""
        terms = self.terms(workload, config)
        if terms is None or not terms.paths:
            return config
        resolved = {}
        for key, path in terms.paths:
            value = str(config[key])
            if not value.endswith(path):
                raise ValueError(f"node terms name path {path!r} of {key}, which is {value!r}")
            resolved[key] = value[: len(value) - len(path)] + str(self.policy.resolve(key, path))
        return config.with_values(resolved)

    def randomness(self, config: Any) -> Randomness:
        """The node's randomness for a run of ``config``: keyed by its seed only where the policy allows keyed-noise."""
        return KeyedRandomness(int(config["seed"])) if self.policy.allows("keyed-noise") else SecretRandomness()

    def check(self, workload: Workload, setup: Setup, config: Any, request: Request, node: Node, *,
              run: Any) -> Release | None:
        """What answering ``request`` releases, checked against the ceiling and the ledger (nothing is charged)."""
        if self.policy.in_simulation:
            return None
        release = workload.deployment.release_of(setup, request, node)
        self.check_release(release, self.terms(workload, config), run=run)
        return release

    def charge(self, release: Release | None, workload: Workload, config: Any, *, run: Any) -> None:
        """Charge ``release`` (from :meth:`check`) to the ledger before the answer leaves; re-checked under its lock."""
        if release is not None and not self.policy.in_simulation:
            self.charge_release(release, self.terms(workload, config), run=run)

    def check_release(self, release: Release | None, terms: NodeTerms | None, *, run: Any) -> None:
        """Raise :class:`PolicyRefusal` if ``release`` of a run with ``terms`` is above the ceiling or beyond the ledger's
        budget and rules (nothing is charged); nothing to check in a simulation (``terms`` None)."""
        if release is None or terms is None or self.ledger is None:
            return
        self.policy.check_release(release)
        self.ledger.check(release, run=str(run), task=terms.task, steps=terms.steps,
                          budget=(self.policy.budget_epsilon, self.policy.budget_delta), step_key=terms.step_key)

    def charge_release(self, release: Release | None, terms: NodeTerms | None, *, run: Any) -> None:
        """Charge ``release`` of a run with ``terms`` to the ledger, under its lock (:class:`PolicyRefusal` if it no
        longer fits)."""
        if release is None or terms is None or self.ledger is None:
            return
        self.policy.check_release(release)
        self.ledger.charge(release, run=str(run), task=terms.task, steps=terms.steps,
                           budget=(self.policy.budget_epsilon, self.policy.budget_delta), step_key=terms.step_key)

    def reason(self, exc: BaseException) -> str:
        """What the server is told of ``exc``: a refusal in full; an error's text only where the policy allows
        ``error-details`` (it may quote local data), else its type (the node's log keeps the detail)."""
        if isinstance(exc, (PolicyRefusal, Refusal)):
            return str(exc)
        if isinstance(exc, LedgerError):
            return "this node's ledger cannot be used, so it releases nothing (see the node's log)"
        if self.policy.allows("error-details"):
            return f"{type(exc).__name__}: {exc}"
        return f"{type(exc).__name__} (the details stay in this node's log)"
