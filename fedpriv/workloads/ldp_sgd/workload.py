"""The LDP-SGD workload (:class:`LdpSgd`): its setup, the nodes' data, the handlers and the server protocol."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedpriv.attacks.backdoor import TRIGGER_SIDE, triggered_test_set
from fedpriv.attacks.keys import ATTACK
from fedpriv.attacks.sgd_manipulation import check_sgd_manipulation
from fedpriv.attacks.validation import check_attack
from fedpriv.data import ClientSource, client_source, load_test_set
from fedpriv.data.config import DATA
from fedpriv.federated.aggregate import assumption_violation
from fedpriv.federated.config import LDP_SGD, LdpSgdConfig, is_factory_spec
from fedpriv.federated.local import build_perturbation
from fedpriv.federated.rules import rule_arguments
from fedpriv.federated.sampling import sample_clients
from fedpriv.federated.server_analysis import ServerAnalysis, proxy_gradients
from fedpriv.keys import compose
from fedpriv.models import build_model, get_flat, load_factory
from fedpriv.rundir import Committed
from fedpriv.workloads.base import BatchHandler, Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.driver import Middleware
from fedpriv.workloads.ldp_sgd.client import (
    DEFAULT_MEMORY_MB,
    ClientData,
    batch_handler,
    privatize,
    train_handler,
)
from fedpriv.workloads.ldp_sgd.contract import TASK
from fedpriv.workloads.ldp_sgd.node import LdpSgdDeployment
from fedpriv.workloads.ldp_sgd.report import LdpSgdReport
from fedpriv.workloads.ldp_sgd.report import summary as run_summary
from fedpriv.workloads.ldp_sgd.server import Server, serve
from fedpriv.workloads.protocol import Outcome

__all__ = ["ATTACKS_RUN", "LdpSgd", "LdpSgdSetup", "client_threads"]

#: The attacks this workload runs (docs/attacks.md).
ATTACKS_RUN = ("none", "sign-flip", "scaling", "gaussian", "label-flip", "backdoor", "ldp-manipulation")


def client_threads() -> int:
    """Torch threads of a one-client process: ``OMP_NUM_THREADS`` if set (Ray: an actor's reserved CPUs), else 1."""
    value = os.environ.get("OMP_NUM_THREADS", "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"OMP_NUM_THREADS (torch threads of a client process) must be an integer >= 1, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LdpSgdSetup(Setup):
    """A checked LDP-SGD run: its typed config (the data and the model are built by the nodes and the server)."""

    config: LdpSgdConfig


class _Clients(Mapping[int, ClientData]):
    """Every client's data in process, a view made on access (the source and the model built once)."""

    def __init__(self, config: LdpSgdConfig) -> None:
        self.source: ClientSource = client_source(config)
        self.model = build_model(config["model"], self.source.input_shape, self.source.num_classes,
                                 seed=config["seed"])

    def __getitem__(self, client: int) -> ClientData:
        return _client_data(self.source, client, self.model)

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.source)))


def _client_data(source: ClientSource, client: int, model: torch.nn.Module) -> ClientData:
    """Client ``client``'s own examples as tensors, with the run's model."""
    x, y = source.client(client)
    return ClientData(x=torch.from_numpy(x), y=torch.from_numpy(y), num_classes=source.num_classes, model=model)


@functools.lru_cache(maxsize=2)
def _process_clients(config: LdpSgdConfig) -> _Clients:
    """The clients of ``config`` as this process sees them: the source (its partition) and the model built once.

    A SuperNode's process serves one client; a Flower simulation actor serves every client it is handed, one
    message after another: without this, each message rebuilt the partition of all clients (O(N) per message,
    so O(N²) per round).
    """
    return _Clients(config)


def _own_partition(config: LdpSgdConfig, client: int) -> ClientData:
    """What a node of ``client`` holds: its own examples of the data the config names, and the model."""
    return _process_clients(config)[client]


def _triggered(config: LdpSgdConfig, x_test: torch.Tensor, y_test: torch.Tensor,
               num_classes: int) -> torch.Tensor | None:
    """The backdoor's triggered test inputs: measured under the backdoor and, as its baseline (what a clean model
    does with the trigger), without an attack on an image dataset whose classes hold the target."""
    measured = config["attack"] == "backdoor" or (
        config["attack"] == "none" and config["dataset"] in TRIGGER_SIDE
        and int(config["backdoor-target"]) < num_classes)
    if not measured:
        return None
    return triggered_test_set(x_test, y_test, target=int(config["backdoor-target"]),
                              side=TRIGGER_SIDE[config["dataset"]])


class LdpSgd(Workload):
    """Federated LDP-SGD (module docstring)."""

    name = TASK
    keys = compose(DATA, LDP_SGD, ATTACK)
    summary_line = "federated LDP-SGD training: clients privatize their model updates (coordinatewise, LDPVec, GeoDP)"
    engines = ("batched", "fast")
    report = LdpSgdReport()
    deployment = LdpSgdDeployment()

    def setup(self, config: Any) -> LdpSgdSetup:
        cfg = LdpSgdConfig.of(config)
        if cfg["min-clients"] > cfg["num-clients"]:
            raise ValueError(f"min-clients={cfg['min-clients']} exceeds num-clients={cfg['num-clients']}: no round "
                             "could get that many valid replies; lower min-clients")
        expected = len(sample_clients(cfg["seed"], 1, cfg["num-clients"], cfg["fraction-train"], cfg["min-clients"]))
        violation = assumption_violation(cfg["strategy"], expected, cfg["num-malicious"], **rule_arguments(cfg))
        if violation is not None:  # every round samples this many; drop-outs are checked per round
            raise ValueError(f"{violation} sampled per round (num-clients={cfg['num-clients']}, fraction-train="
                             f"{cfg['fraction-train']:g}, min-clients={cfg['min-clients']}): lower num-malicious, or "
                             "raise fraction-train or num-clients")
        build_perturbation(cfg, batch_size=cfg["batch-size"])  # every perturbation key checked now
        check_attack(cfg, self.name, ATTACKS_RUN)
        if cfg["attack"] == "ldp-manipulation":  # only a per-coordinate output box can be manipulated (§8)
            check_sgd_manipulation(cfg)
        if is_factory_spec(cfg["model"]):
            load_factory(cfg["model"])  # importable and callable now; what it returns is checked when built
        return LdpSgdSetup(workload=self.name, config=cfg)

    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.config["num-clients"]))

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        return _Clients(setup.config)

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        torch.set_num_threads(client_threads())  # one client per process (a SuperNode's ClientApp, a simulation actor)
        return _own_partition(setup.config, client)

    def load_server(self, setup: Setup) -> Server:
        config = setup.config
        test = load_test_set(config)
        model = build_model(config["model"], test.input_shape, test.num_classes, seed=config["seed"])
        x_test, y_test = torch.from_numpy(np.array(test.x)), torch.from_numpy(np.array(test.y))
        initial = get_flat(model).detach().cpu().numpy().astype(np.float32).copy()
        analysis = ServerAnalysis.from_config(config, initial.size, proxies=proxy_gradients(
            model, x_test, y_test, num_classes=test.num_classes, config=config))
        return Server(model=model, initial=initial, x_test=x_test, y_test=y_test, num_classes=test.num_classes,
                      analysis=analysis, perturbation=build_perturbation(config, batch_size=config["batch-size"]),
                      x_triggered=_triggered(config, x_test, y_test, test.num_classes),
                      backdoor_target=int(config["backdoor-target"]))

    def handler(self, setup: Setup) -> Handler:
        return train_handler(setup.config)

    def middleware(self, setup: Setup) -> list[Middleware]:
        """The release's privatization (what ``ldp_mod`` does in Flower)."""
        return [privatize(setup.config)]

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        if engine != "batched":
            torch.set_num_threads(1)  # tiny per-client models: one thread avoids oversubscription
            return None
        clients: _Clients = data  # type: ignore[assignment]
        return batch_handler(setup.config, clients.source, clients.model,
                             memory_mb=DEFAULT_MEMORY_MB if options.get("memory_mb") is None else options["memory_mb"],
                             threads=options.get("threads"))

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup.config, server, committed)

    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The final global model (the last committed one when a round failed)."""
        return outcome.arrays.get("params", outcome.committed_arrays.get("params", np.zeros(0, dtype=np.float32)))

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup.config, server, records, outcome)
