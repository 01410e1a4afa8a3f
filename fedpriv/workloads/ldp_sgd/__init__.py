"""Federated LDP-SGD (``task = "ldp-sgd"``): clients train locally and privatize their model updates.

Each round the server samples clients (``fraction-train``, at least ``min-clients``) and sends them
the global model; each client runs E clipped local SGD steps on its own partition, each privatized at
ε/E (``noise-schedule = "every_step"``, the default; ``"last_step"``, the source's schedule, privatizes only
the E-th step); privacy is on by default (``perturbation = "coordinatewise"``, ``mechanism = "piecewise"``,
ε = 1 per client per round); ``perturbation = "none"`` must be asked for. The server aggregates the valid uploads (FedAvg, median, trimmed mean, Krum,
Multi-Krum), optionally predicts the noise-induced deviation and re-calibrates (the analyzer,
HDR4ME), evaluates the new model on the held-out test set and charges the ledger.

Pieces: :mod:`.workload` (the workload), :mod:`.contract` (the messages), :mod:`.client` (local
training, the release's privatization — ``ldp_mod`` in Flower, middleware in process — and the
batched engine), :mod:`.server` (the protocol), :mod:`.report`. Engines in process: ``fast`` (clients one after
another, the per-client handler) and ``batched`` (chunks of clients as one vmap computation).
A node loads the dataset the config names (bundled, generated from the seed, or the files under
``data-dir`` on that node) and keeps only its own partition.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy): the contract loads without torch
    from fedpriv.workloads.ldp_sgd.workload import LdpSgd, LdpSgdSetup

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = ["LdpSgd", "LdpSgdSetup"]
