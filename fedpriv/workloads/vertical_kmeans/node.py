"""What a run of vertical k-means asks of a deployed party's node, and what each of its answers releases.

docs/vertical_kmeans.md ("On a deployed node", §3, §10). :func:`node_terms` reads the run config
alone (no data, no file): the simulation-only features the method needs (``no-noise`` for the
non-private baselines and ablations, whose local centers or memberships are released without noise,
and for the ``datasketch`` hash backend, whose sketches carry no DP guarantee, §17 A9), the CSV file
the node would open, its sizes, and the repetitions (each a release step). :func:`repetition_release`
is what one count or encode request spends. :class:`VerticalKMeansDeployment` is the workload's
deployment: these two, and the parties' key file it provisions and names in each party's node config
(docs/vertical_kmeans.md, "How the parties get the hash key").
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fedpriv.clustering.methods import CENTRAL_METHODS, SKETCH_METHODS, budget_for, count_epsilon
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Refusal, Request
from fedpriv.workloads.vertical_kmeans import party_key
from fedpriv.workloads.vertical_kmeans.client import _number, _repetition
from fedpriv.workloads.vertical_kmeans.contract import COUNT, ENCODE, N_HAT, OP, OPS, REPETITION
from fedpriv.workloads.vertical_kmeans.data import VerticalKMeansView, kmeans_config
from fedpriv.workloads.vertical_kmeans.party_key import HASH_KEY_FILE, KEY_FILE_NAME, write_key_file

if TYPE_CHECKING:
    from fedpriv.workloads.vertical_kmeans import VerticalKMeansSetup

__all__ = ["VerticalKMeansDeployment", "node_terms", "repetition_release"]

#: Users of the mixed-gaussian generator when ``kmeans-samples`` is 0 (:func:`~.data.load_data`).
_DEFAULT_SAMPLES = 20000


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one party's node (module docstring)."""
    view = VerticalKMeansView.of(config)
    cfg = kmeans_config(view)
    traits = cfg.traits
    features: dict[str, tuple[str, Any]] = {}
    if cfg.method not in CENTRAL_METHODS and not traits.private:
        features["no-noise"] = ("kmeans-method", cfg.method)
    elif cfg.method in SKETCH_METHODS and cfg.hash_backend == "datasketch":
        features["no-noise"] = ("hash-backend", cfg.hash_backend)
    paths = (("kmeans-csv", view["kmeans-csv"]),) if view["kmeans-data"] == "csv" else ()
    sizes: list[tuple[str, str, int]] = [("clients", "parties", int(view["parties"])),
                                         ("rounds", "repetitions", int(view["repetitions"]))]
    if view["kmeans-data"] == "mixed-gaussian":
        n = int(view["kmeans-samples"]) or _DEFAULT_SAMPLES
        sizes.append(("data-values", "kmeans-samples × kmeans-dims", n * int(view["kmeans-dims"])))
    if cfg.method in SKETCH_METHODS:
        sizes.append(("steps", "sketch-repetitions", int(cfg.M)))
    return NodeTerms(task="vertical-kmeans", features=features, paths=paths, sizes=tuple(sizes),
                     release=_stated_release(view, cfg), steps=int(view["repetitions"]), step_key=REPETITION)


def _stated_release(view: Any, cfg: Any) -> tuple[str, float, float] | None:
    """A repetition's (ε, δ) as the keys state it: ε, and for the sketches δ_2 = δ/S with δ = ``kmeans-delta``, or
    δ = 1/n̂ (§14) at the smallest count n̂ = n − 10/ε_0 the count's Laplace noise reaches but with probability
    e^−10/2, for the generator's n (None where n comes only with the data); ε = ∞ for the non-private methods."""
    if cfg.method in CENTRAL_METHODS:
        return None
    if not cfg.traits.private:
        return ("kmeans-method", math.inf, 0.0)
    if cfg.method not in SKETCH_METHODS:
        return ("epsilon", float(cfg.epsilon), 0.0)
    n = int(view["kmeans-samples"]) or (_DEFAULT_SAMPLES if view["kmeans-data"] == "mixed-gaussian" else 0)
    if cfg.delta is None and n <= 1:
        return None
    eps0 = count_epsilon(cfg)
    delta = cfg.delta if cfg.delta is not None else 1.0 / max(2.0, n - (10.0 / eps0 if eps0 > 0 else 0.0))
    return ("epsilon", float(cfg.epsilon), delta / int(view["parties"]))


def repetition_release(setup: Any, request: Request) -> Release:
    """What party ℓ releases answering ``request`` (a count or encode of repetition r), as its ledger is charged.

    docs/vertical_kmeans.md §3.1, §10 (Li, Wang, Li, *Differentially Private Vertical Federated
    Clustering*, Theorem 5.3.2): each repetition is a fresh run of Algorithm 2 on the same data, so
    the repetitions compose (step r of the run, r = 1..``repetitions``). Within one:

    * ``count`` (the counting party only): n̂ = n + Lap(1/ε_0) is ε_0-DP, ε_0 = (1 − b)ε
      (part ``"count"``). Methods without an n̂ query return the exact n: ε = 0 for LDP-AGG, whose
      guarantee treats n and the id set as public (§9.2, §17 A7); ε = ∞ for the non-private baselines.
    * ``encode``: LocCluster (DPLSF, pure ε_1, §4) then MemEnc of the partition the released
      centers induce — the DPFM sketch (ε_2, δ_2) (§6, Smith–Song–Thakurta), the IND-LAP histogram
      (ε_2, §9.1) or the LDP-AGG reports (ε_2, per-user LDP, §9.2) — composed sequentially:
      (ε_1 + ε_2, δ_2) with the split of §3.1 at the request's n̂ (δ_2 = δ/S, δ = 1/n̂ by default)
      (part ``"encode"``). Non-private k-means centers (``kmeans`` local) or exact labels give ε = ∞,
      and so do the sketches of the ``datasketch`` backend, whose repetitions are not independent
      (§17 A9: the (ε_2, δ_2) proof assumes an ideal hash).

    The party's own releases are what its data risk: another party's answers and the server's
    weights and k-means are post-processing (§10). A request that is not a count or encode of
    1..``repetitions`` is refused (:class:`~fedpriv.workloads.messages.Refusal`), and so is any op
    of a central baseline, which has no party op.
    """
    cfg = setup.kmeans
    fields = request.message.get("config", {})
    op = fields.get(OP)
    if op not in OPS:
        raise Refusal(f"expected op in {OPS!r}, got {op!r}")
    r = _repetition(fields, setup.repetitions)
    if cfg.method in CENTRAL_METHODS:
        raise Refusal(f"expected no party op for the central baseline {cfg.method!r} (it runs on the server's data), "
                      f"got {op!r}")
    traits = cfg.traits
    if op == COUNT:
        eps0 = count_epsilon(cfg)
        if eps0 > 0:
            return Release(step=r, epsilon=eps0, key="epsilon", asked=cfg.epsilon, part=COUNT)
        epsilon = 0.0 if traits.encoding == "ldp" and traits.private else math.inf  # A7: LDP-AGG's n is public
        return Release(step=r, epsilon=epsilon, key="kmeans-method", asked=cfg.method, part=COUNT)
    n_hat = _number(fields, N_HAT)
    try:
        budget = budget_for(cfg, n_hat, setup.data.parties)
    except ValueError as exc:
        raise Refusal(f"expected an n-hat this party can derive its budget from, got {n_hat!r}: {exc}") from None
    if traits.local != "dplsf" or traits.encoding == "labels":
        return Release(step=r, epsilon=math.inf, key="kmeans-method", asked=cfg.method, part=ENCODE)
    if traits.encoding == "sketch" and cfg.hash_backend == "datasketch":
        return Release(step=r, epsilon=math.inf, delta=budget.delta2, key="hash-backend", asked=cfg.hash_backend,
                       part=ENCODE)
    delta = budget.delta2 if traits.encoding == "sketch" else 0.0
    return Release(step=r, epsilon=budget.eps1 + budget.eps2, delta=delta, key="epsilon", asked=cfg.epsilon,
                   part=ENCODE)


class VerticalKMeansDeployment(WorkloadDeployment):
    """Vertical k-means on deployed party nodes: the parties' key file, node terms and releases (module docstring)."""

    def provision(self, setup: Setup, directory: Path) -> Setup:
        """Write a fresh parties' key file into ``directory`` (for the parties' nodes only); the setup naming it."""
        path = write_key_file(Path(directory) / KEY_FILE_NAME, party_key.new_key_secret())
        return dataclasses.replace(cast("VerticalKMeansSetup", setup), key_file=path)

    def node_config(self, setup: Setup, client: int, clients: Sequence[int]) -> dict[str, Any]:
        """``partition-id``, ``num-partitions`` and, once provisioned, ``hash-key-file`` (the parties' key file)."""
        out = super().node_config(setup, client, clients)
        if setup.key_file is not None:  # type: ignore[attr-defined]
            out[HASH_KEY_FILE] = str(setup.key_file)  # type: ignore[attr-defined]
        return out

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release | None:
        """A count or encode releases the party's answer of its repetition (:func:`repetition_release`)."""
        return repetition_release(setup, request)
