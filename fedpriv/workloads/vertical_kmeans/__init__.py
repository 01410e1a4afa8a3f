"""The vertical k-means workload (``task = "vertical-kmeans"``): DP vertical federated k-means, repeated.

S data parties (``parties``; client id ℓ = party ℓ, one node each) hold different columns of the
same n users. One repetition is one run of the thesis's Algorithm 2 (docs/vertical_kmeans.md §3.2) with
the configured method on a fixed dataset: the count round, the parties' encode round (DP local
centers and a DP Flajolet–Martin partition sketch, or a baseline's encoding), the server's weight
estimation and final k-means, then the offline evaluation of §16 (k-means cost over all n users,
its ratio to central non-private k-means, V-measure, relative error of the intersection sizes).
Repetition r runs with seed ``seed + r − 1`` and the hash key K_r; the data are drawn once, from
``seed``, and so is the V-measure's ground truth (``kmeans-truth``). Every repetition is committed
to the run directory (its metrics line, the centers, its privacy account); ``--resume`` continues
after the last one. ``summary.json`` holds mean ± std over the repetitions, the privacy account of
one run (repetitions are independent re-runs, not composed) and the data's shape;
``cost-ratio.png`` shows the cost ratio and V-measure per repetition.

Pieces: :mod:`.contract` (messages), :mod:`.client` (a party's handler), :mod:`.server` (the
protocol), :mod:`.party_key` (the parties' key file and the per-repetition hash keys),
:mod:`.data` (the typed config and the data), :mod:`.report` (summary, plots, tables:
:class:`.report.VerticalKMeansReport`), :mod:`.node` (the deployment:
:class:`.node.VerticalKMeansDeployment`).

**How the parties get the hash key, in every runtime** (docs/vertical_kmeans.md). The sketches need
a key K shared by the parties and never by the server (§5.5 R3). Each party's node config names a
**party key file** (``hash-key-file = "<path>"``: 32 random bytes, mode 0600) that every party holds
and the server does not; repetition r's key is ``K_r = HKDF-SHA256(file secret, info = config digest
and r)`` (:class:`~fedpriv.workloads.vertical_kmeans.party_key.PartyKey`), which every party derives
alone, so the keys are fresh per repetition and per configuration without any message.

* **Deployed** (``fedpriv deploy``, or SuperNodes you start): the deployment's ``provision``
  (:class:`~fedpriv.workloads.vertical_kmeans.node.VerticalKMeansDeployment`) writes a fresh key
  file into a directory only the parties' nodes read, and its ``node_config`` names it in each
  party's ``--node-config`` (besides
  ``partition-id`` and ``num-partitions``). The SuperLink and the ServerApp never see the file or
  its path; copy it to each party's host over a channel you trust when the parties run apart.
* **Flower's simulation engine** (``--engine flower``): the driver provisions the same way into a
  private temporary directory (removed when the run ends) and gives the simulated nodes the same node
  config entries.
* **In process** (``--engine fast``): the driver draws a fresh secret per run from the OS
  (:func:`~fedpriv.workloads.vertical_kmeans.party_key.new_key_secret`) and the parties' handlers
  derive K_r from it exactly as a node does from its file. It is never written to the run directory,
  so a resumed run draws a new secret for the repetitions it has left.

**A deployed party's own privacy** (docs/vertical_kmeans.md, "On a deployed node"): its node checks the run config against
its own policy (:func:`~fedpriv.workloads.vertical_kmeans.node.node_terms`), charges every count and
encode to its ledger before the answer leaves
(:func:`~fedpriv.workloads.vertical_kmeans.node.repetition_release`) and draws its noise from its own
randomness — keyed by the run seed only in a simulation (the three runtimes then agree bit for bit),
ChaCha20 keyed by a node secret otherwise (:func:`~fedpriv.workloads.vertical_kmeans.client.repetition_randomness`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.clustering.config import VERTICAL_KMEANS
from fedpriv.clustering.methods import CENTRAL_METHODS, SKETCH_METHODS, VerticalKMeansConfig, budget_for
from fedpriv.data.vertical import VerticalData
from fedpriv.rundir import Committed
from fedpriv.workloads.base import Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.vertical_kmeans import party_key
from fedpriv.workloads.vertical_kmeans.client import Party, handle_party
from fedpriv.workloads.vertical_kmeans.data import (
    VerticalKMeansView,
    check_truth,
    ground_truth,
    kmeans_config,
    load_data,
)
from fedpriv.workloads.vertical_kmeans.node import VerticalKMeansDeployment
from fedpriv.workloads.vertical_kmeans.party_key import HASH_KEY_FILE, KEY_FILE_NAME, PartyKey, read_key_file
from fedpriv.workloads.vertical_kmeans.report import DEFAULT_SWEEP, VerticalKMeansReport
from fedpriv.workloads.vertical_kmeans.report import summary as run_summary
from fedpriv.workloads.vertical_kmeans.server import serve

__all__ = ["DEFAULT_SWEEP", "KEY_FILE_NAME", "VerticalKMeans", "VerticalKMeansSetup", "VerticalKMeansView"]


def _digest(config: VerticalKMeansView) -> str:
    """``RunConfig.digest()`` from the typed view: SHA-256 of the values of the keys the workload reads (16 hex)."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class VerticalKMeansSetup(Setup):
    """A checked vertical k-means run: the data (column blocks), the method configuration, seed and repetitions.

    ``key_file`` is the parties' key file once the deployment's ``provision`` wrote one (the
    server's setup never has one).
    """

    data: VerticalData
    kmeans: VerticalKMeansConfig
    seed: int
    repetitions: int
    digest: str
    key_file: Path | None = None


class VerticalKMeans(Workload):
    """DP vertical federated k-means with Flajolet–Martin sketches (module docstring)."""

    name = "vertical-kmeans"
    keys = VERTICAL_KMEANS
    summary_line = "DP vertical federated k-means with Flajolet-Martin sketches"
    engines = ("fast",)
    unit = "repetition"
    report = VerticalKMeansReport()
    deployment = VerticalKMeansDeployment()

    def setup(self, config: Any) -> VerticalKMeansSetup:
        view = VerticalKMeansView.of(config)
        cfg = kmeans_config(view)
        data = load_data(view)
        check_truth(data, view)
        if cfg.method not in CENTRAL_METHODS:
            budget_for(cfg, data.n, data.parties)  # the §3.1 split and Lemma 6's precondition, with n for n̂
        return VerticalKMeansSetup(workload=self.name, config=view, data=data, kmeans=cfg, seed=view["seed"],
                                   repetitions=view["repetitions"], digest=_digest(view))

    def steps(self, config: Any) -> int:
        return int(config["repetitions"])

    # ------------------------------------------------------------------ nodes and data
    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.data.parties))  # type: ignore[attr-defined]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        """Every party's block and ids, and the parties' key: read from the provisioned file, else fresh from the OS."""
        s: Any = setup
        key = read_key_file(s.key_file) if s.key_file is not None else PartyKey(party_key.new_key_secret())
        return {ell: Party(block=block, ids=s.data.ids, key=key) for ell, block in enumerate(s.data.blocks)}

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        """Party ``client``'s own block and ids and its key from the node config's ``hash-key-file``."""
        s: Any = setup
        path = node_config.get(HASH_KEY_FILE)
        if path is None and s.kmeans.method in SKETCH_METHODS:
            raise ValueError(f"node config {HASH_KEY_FILE} must name the parties' key file for method "
                             f"{s.kmeans.method!r} (fedpriv deploy writes one; see docs/vertical_kmeans.md)")
        key = None if path is None else read_key_file(str(path))
        return Party(block=s.data.blocks[client], ids=s.data.ids, key=key)

    def load_server(self, setup: Setup) -> VerticalData:
        """The full data with the V-measure's ground truth as labels (the offline evaluation of §16; no key)."""
        s: Any = setup
        labels = ground_truth(s.data, s.config)
        if labels is s.data.labels:
            return s.data
        return VerticalData(blocks=s.data.blocks, ids=s.data.ids, labels=labels, name=s.data.name)

    # ------------------------------------------------------------------ the two sides
    def handler(self, setup: Setup) -> Handler:
        return handle_party(setup)

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup, server, committed)

    # ------------------------------------------------------------------ the run's result
    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The last repetition's centers (k, m)."""
        s: Any = setup
        return outcome.arrays.get("centers", np.zeros((0, sum(s.data.widths))))

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup, records, outcome)
