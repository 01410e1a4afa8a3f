"""The workload interface: what one workload declares so that every runtime can run it (docs/architecture.md).

A workload (ldp-sgd, mean, secure-sum, vertical-kmeans, distribution, online-sgd, mf, or yours) is
one :class:`Workload` subclass registered under its name (:mod:`fedpriv.workloads.registry`). It
declares

* its **config**: its own key table (``keys``) and a typed view of it (:meth:`Workload.setup` turns
  the flat :class:`~fedpriv.config.RunConfig` into the workload's checked :class:`Setup`);
* its **nodes**: which client ids take part (:meth:`Workload.clients`) and how a node loads *only its
  own* data from its node config (:meth:`Workload.load_client`) — no dataset object crosses a process
  boundary;
* its **client handler** (:meth:`Workload.handler`): a function of (request, node) → reply
  message, Flower-free, with the node's own data, a state kept across its requests and the node's
  randomness (keyed by the run seed in a simulation, secret on a deployed node);
* its **server protocol** (:meth:`Workload.protocol`): a generator that yields
  :class:`~fedpriv.workloads.protocol.Exchange` (requests; it is sent the replies),
  :class:`~fedpriv.workloads.protocol.Relay` (clients asked one after another; it is sent the
  final state) and
  :class:`~fedpriv.workloads.protocol.Commit` (a finished round; it is sent the committed
  record) steps, started fresh or from the last commit of a run directory, and the run's summary
  (:meth:`Workload.summary`).

Two parts of a workload are objects of their own, named as class attributes, each given what it reads
(the setup, the run config, the records) rather than the workload:

* :attr:`Workload.deployment`, a :class:`~fedpriv.workloads.deployment.WorkloadDeployment`: the node
  config each SuperNode is started with, the secrets the nodes share and the server must not hold,
  and what a run asks of a **deployed node** and what each request would release (the facts the
  node's own policy and ledger check, :mod:`fedpriv.node`, docs/threat_model.md);
* :attr:`Workload.report`, a :class:`~fedpriv.workloads.report.WorkloadReport`: the plots, the
  progress text, the terminal tables and ``fedpriv compare``'s sweep, rows and plots.

The in-process driver (:mod:`fedpriv.workloads.driver`), the one generic Flower ServerApp
(``strategies/server_app.py``) and ClientApp (``clients/app.py``) run these same pieces, so the
three runtimes run the same code. An in-process :meth:`Workload.batch_handler` may answer a
broadcast to many clients at once (e.g. the batched engine of federated LDP-SGD); it must give the
same bits as the handler called per client (a test per workload checks it); an in-process
:meth:`Workload.relay_handler` may run a relay (a stream of clients, each asked with the state the
replies before it left) in one vectorized call, with the same final state as asking one client
after another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from fedpriv.keys import KeyTable
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Message, Request
from fedpriv.workloads.report import WorkloadReport

if TYPE_CHECKING:
    from fedpriv.node.randomness import Randomness
    from fedpriv.rundir import Committed
    from fedpriv.workloads.protocol import Batch, Broadcast, Outcome, Relay, Step

__all__ = ["BatchHandler", "Handler", "Node", "RelayHandler", "Setup", "Workload"]


@dataclass
class Node:
    """One client as its handler sees it: its client id, its own data, state kept across its requests, its randomness.

    ``state`` persists across the requests of one run (Flower: the node's ``context.state``); its
    values must be what a :class:`~fedpriv.workloads.messages.Message` can carry (arrays, scalars,
    strings, bytes and lists of them), because a deployed node keeps it between processes.
    ``randomness`` is where every draw of the handler comes from: keyed by the run seed in a
    simulation, a node secret on a deployed node (:mod:`fedpriv.node.randomness`); the runtime sets
    it, never a message.
    """

    client: int
    data: Any
    state: dict[str, Any] = field(default_factory=dict)
    randomness: Randomness = field(kw_only=True)


#: A client handler: (request, node) → the reply message; raises Refusal (or any error) for an error reply.
Handler = Callable[[Request, Node], Message]
#: A batch handler (in process only): one broadcast to many clients answered at once, as their replies stacked.
BatchHandler = Callable[["Broadcast"], "Batch"]
#: A relay handler (in process only): a relay of clients asked one after another run at once, as its final state.
RelayHandler = Callable[["Relay"], Any]


@dataclass(frozen=True)
class Setup:
    """A checked run of a workload: its name, its typed config and anything derived from it (subclass it)."""

    workload: str
    config: Any


ProtocolGen = Generator["Step", Any, "Outcome"]


class Workload(ABC):
    """One workload (see the module docstring); subclasses set ``name`` and ``keys`` and implement the methods."""

    #: Registry name and value of the ``task`` key.
    name: ClassVar[str]
    #: Its own key table (without the common keys of :data:`fedpriv.keys.COMMON`).
    keys: ClassVar[KeyTable]
    #: One line on what it does (the caption of ``fedpriv keys TASK``).
    summary_line: ClassVar[str] = ""
    #: In-process engines it supports besides the Flower runtimes ("fast" always; "batched" where it has a batch handler).
    engines: ClassVar[tuple[str, ...]] = ("fast",)
    #: What one committed step is called in progress lines: "round", "repetition", "trial", ...
    unit: ClassVar[str] = "round"
    #: Whether a run continues after its last commit (False: an unfinished run restarts from round 1,
    #: ``RunDirectory.restart``, and a finished one is returned as stored; ``restart_reason`` says why).
    resumable: ClassVar[bool] = True
    restart_reason: ClassVar[str] = ""
    #: Its report: plots, progress text, terminal tables and ``fedpriv compare``'s sweep (default: none of them).
    report: ClassVar[WorkloadReport] = WorkloadReport()
    #: Its deployment: node configs, node secrets, node terms and releases (default: no node terms, so a node under a
    #: policy refuses it).
    deployment: ClassVar[WorkloadDeployment] = WorkloadDeployment()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass that defines a method of the report or the deployment on itself (it would never run)."""
        super().__init_subclass__(**kwargs)
        for part, kind in (("report", WorkloadReport), ("deployment", WorkloadDeployment)):
            misplaced = sorted(n for n in vars(kind) if not n.startswith("_") and n in vars(cls))
            if misplaced:
                what = "is a method" if len(misplaced) == 1 else "are methods"
                raise TypeError(f"workload {cls.__name__}: {', '.join(misplaced)} {what} of its {part} "
                                f"({kind.__name__}), not of the workload: define them on a {kind.__name__} subclass "
                                f"and set {part} = an instance of it (docs/architecture.md, 'Adding a workload')")

    # ------------------------------------------------------------------ config
    @abstractmethod
    def setup(self, config: Any) -> Setup:
        """The checked setup of ``config`` (a :class:`~fedpriv.config.RunConfig`): raises ValueError naming a bad key."""

    def check_engine(self, setup: Setup, engine: str) -> None:
        """Raise ValueError when ``setup`` cannot run on ``engine`` (one of :attr:`engines` or "flower"; checked
        before anything is written). Default: every engine runs every setup."""
        return None

    def steps(self, config: Any) -> int:
        """How many commits a whole run of ``config`` makes (the progress total; from the keys alone, no data)."""
        return int(config["rounds"])

    # ------------------------------------------------------------------ nodes and data
    @abstractmethod
    def clients(self, setup: Setup) -> list[int]:
        """The client ids of the run's nodes, one node each."""

    @abstractmethod
    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        """Every client's own data, for the in-process driver (built once; a view per client)."""

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        """One node's own data, on that node (default: built like :meth:`load_clients`, keeping only its own)."""
        return self.load_clients(setup)[client]

    def load_server(self, setup: Setup) -> Any:
        """What the server holds (a test set, the truth a simulation is scored against); default None."""
        return None

    # ------------------------------------------------------------------ the two sides
    @abstractmethod
    def handler(self, setup: Setup) -> Handler:
        """The client handler (the same function in every runtime)."""

    def middleware(self, setup: Setup) -> list[Any]:
        """Client-side middleware the in-process engines wrap the handler in (the twins of the Flower mods the
        module-level ClientApp installs; :data:`fedpriv.workloads.driver.Middleware`); default none."""
        return []

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        """An in-process handler of a :class:`~fedpriv.workloads.protocol.Broadcast` for ``engine`` over every client's
        ``data`` (:meth:`load_clients`), or None (default: the handler per client, stacked); ``options`` are the
        engine's (e.g. ``memory_mb``)."""
        return None

    def relay_handler(self, setup: Setup, engine: str, data: Mapping[int, Any]) -> RelayHandler | None:
        """An in-process runner of a :class:`~fedpriv.workloads.protocol.Relay` for ``engine`` over every client's
        ``data``, returning the state :meth:`~fedpriv.workloads.protocol.Relay.run` would (default None: one
        client after another)."""
        return None

    @abstractmethod
    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        """The server protocol, fresh (``committed.round == 0``) or continuing after ``committed``."""

    # ------------------------------------------------------------------ the run's result
    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """What ``fedpriv.run`` returns as the run's result array: the outcome's first array, else the last commit's."""
        import numpy as np

        return next(iter(outcome.arrays.values()), next(iter(outcome.committed_arrays.values()), np.zeros(0)))

    @abstractmethod
    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        """The workload's part of ``summary.json`` (status, timings, config and versions are added around it)."""
