"""Which clients mask with which in a secure-aggregation instance, and what the choice guarantees (docs/secagg.md).

Two masking graphs (docs/federated_mf.md §6.6):

``"complete"``
    Bonawitz et al. 2017: every client agrees keys, secret-shares and masks with every other
    client, and shares its secrets ``t``-of-``n`` with ``t = ⌈(1−ω)n⌉``. Cost O(n) per client,
    O(n²) in all. Private against the honest-but-curious server colluding with fewer than ``t``
    clients, deterministically.
``"harary"``
    SecAgg+ (Bell et al., CCS 2020): a random ``k``-regular Harary graph. Ring positions
    ``p ± 1, …, p ± k/2`` (mod n) are neighbours, and a uniform random permutation drawn from the
    instance's public randomness (the keyed stream ``stream(seed, instance, SERVER,
    "secagg-graph")``, so every runtime builds the same graph) places the roster on the ring.
    Each client agrees keys and masks only with its ``k`` neighbours and shares its secrets
    ``t``-of-``(k+1)`` among itself and them. ``(k, t)`` come from :mod:`fedpriv.secagg.bounds`:
    private against the server colluding with at most ``⌊γn⌋`` clients except with probability
    ``2^−σ``, and a spurious halt (a dropped client with fewer than ``t`` surviving neighbours)
    with probability below ``2^−η``. Cost O(k + d) per client with ``k = O(log n)``.

``"auto"`` (the default) is the rule written down in docs/secagg.md: the Harary graph when
``n ≥`` :data:`AUTO_HARARY_MIN_CLIENTS` (100) and the bounds give a degree ``k < n − 1``, the
complete graph otherwise. Below 100 clients the complete graph costs little (under a second per
instance at d = 10,000 on 2 cores) and its guarantee is deterministic and tolerates up to ``t − 1``
colluding clients; from 100 clients on its O(n²) term dominates.

Both graphs keep the ``SA_ω`` halting rule of :mod:`fedpriv.secagg.base` on top: an instance halts
as soon as fewer than ``⌈(1−ω)n⌉`` clients are present at a step, so the sparse graph's
per-neighbourhood thresholds never release a sum over fewer survivors (docs/federated_mf.md §9 A30).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int, check_positive, check_probability
from fedpriv.rng import SERVER, stream
from fedpriv.secagg.base import survivor_threshold
from fedpriv.secagg.bounds import (
    CORRECTNESS_BITS,
    SECURITY_BITS,
    harary_bounds,
    harary_parameters,
)

__all__ = [
    "AUTO_HARARY_MIN_CLIENTS",
    "CORRUPT_FRACTION",
    "GRAPHS",
    "GRAPH_KEYS",
    "GRAPH_PURPOSE",
    "THREAT_MODEL",
    "GraphPolicy",
    "MaskingGraph",
    "SecAggGuarantee",
    "graph_policy",
]

#: Values of the ``secagg-graph`` configuration key.
GRAPHS: tuple[str, ...] = ("auto", "complete", "harary")
#: ``"auto"`` uses the Harary graph from this many clients on (docs/secagg.md, "Which graph").
AUTO_HARARY_MIN_CLIENTS = 100
#: Purpose of the keyed stream whose permutation places the roster on the Harary ring.
GRAPH_PURPOSE = "secagg-graph"
#: Default fraction γ of clients that may be corrupted and collude with the server (Bell et al.'s 5%).
CORRUPT_FRACTION = 0.05

#: The threat model every :class:`SecAggGuarantee` states.
THREAT_MODEL = (
    "honest-but-curious server: it follows the protocol (draws the graph from the public randomness, relays "
    "every message unchanged, reports the true sets of present clients) and tries to learn more than the sum; "
    "it may collude with at most max_corrupt_clients corrupted clients, which hand it their whole state; which "
    "clients drop out does not depend on the graph. Not covered: an active server, unless the instance is "
    "signed and every node verifies its peers (fedpriv.secagg.signing: signed keys and the consistency check; "
    "without them a lying server could substitute keys, or claim a client dropped to obtain both its mask key "
    "and its self-mask seed), or clients that deviate from the protocol (they can spoil the sum, not read "
    "others' inputs)"
)


@dataclass(frozen=True)
class MaskingGraph:
    """The public masking graph of one instance.

    Parameters
    ----------
    kind : {"complete", "harary"}
    degree : int
        ``k``, the neighbours of each client (``n − 1`` for the complete graph; even for Harary).
    share_threshold : int
        ``t``: each client's secrets are shared ``t``-of-``(k + 1)`` among itself and its neighbours.
    seed : int (default: 0)
        Run seed of the public randomness that places the roster on the Harary ring.
    """

    kind: str
    degree: int
    share_threshold: int
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", ("complete", "harary"))
        k = check_int(self.degree, "degree", minimum=2 if self.kind == "harary" else 0)
        if self.kind == "harary" and k % 2:
            raise ValueError(f"degree must be even for a Harary graph (k/2 ring neighbours on each side), got {k}")
        check_int(self.share_threshold, "share_threshold", minimum=1, maximum=k + 1)
        check_int(self.seed, "seed", minimum=0)

    @classmethod
    def complete(cls, num_clients: int, threshold: int) -> MaskingGraph:
        """Bonawitz et al.'s graph over ``num_clients`` with secrets shared ``threshold``-of-n."""
        n = check_int(num_clients, "num_clients", minimum=1)
        return cls("complete", n - 1, threshold)

    def check_roster(self, num_clients: int) -> None:
        """Raise unless the graph fits a roster of ``num_clients``."""
        n = check_int(num_clients, "num_clients", minimum=1)
        if self.kind == "complete" and self.degree != n - 1:
            raise ValueError(f"degree must be n − 1 = {n - 1} for the complete graph, got {self.degree}")
        if self.kind == "harary" and self.degree > n - 1:
            raise ValueError(f"degree must be <= n − 1 = {n - 1} for a Harary graph, got {self.degree}")

    def ring(self, num_clients: int, instance: int) -> np.ndarray:
        """Roster positions in ring order (identity for the complete graph)."""
        n = check_int(num_clients, "num_clients", minimum=1)
        if self.kind == "complete":
            return np.arange(n)
        return stream(self.seed, instance, SERVER, GRAPH_PURPOSE).permutation(n)

    def neighbour_positions(self, num_clients: int, instance: int) -> np.ndarray:
        """(n, k) int64: row ``r`` holds the sorted roster positions of roster position ``r``'s neighbours."""
        self.check_roster(num_clients)
        n, k = num_clients, self.degree
        if self.kind == "complete":
            full = np.broadcast_to(np.arange(n), (n, n))
            return full[~np.eye(n, dtype=bool)].reshape(n, n - 1)
        ring = self.ring(n, instance)  # ring[p] = roster position at ring position p
        where = np.empty(n, dtype=np.int64)
        where[ring] = np.arange(n)
        offsets = np.concatenate([np.arange(1, k // 2 + 1), -np.arange(1, k // 2 + 1)])
        out = ring[(where[:, None] + offsets[None, :]) % n]
        out.sort(axis=1)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Flat, ConfigRecord-compatible form."""
        return {"graph": self.kind, "degree": self.degree, "share-threshold": self.share_threshold,
                "graph-seed": self.seed}


@dataclass(frozen=True)
class SecAggGuarantee:
    """What one instance over ``num_clients`` guarantees, under :data:`THREAT_MODEL`.

    Attributes
    ----------
    graph : str
        ``"complete"`` or ``"harary"``.
    num_clients, degree, share_threshold : int
        ``n``, ``k`` and ``t`` (``k = n − 1`` and ``t = ⌈(1−ω)n⌉`` for the complete graph).
    survivor_threshold : int
        ``⌈(1−ω)n⌉``: the instance halts, releasing nothing, when fewer clients are present at a step.
    omega, corrupt_fraction : float
        ``ω`` (tolerated drop-outs) and ``γ`` (tolerated corrupted clients).
    max_corrupt_clients : int
        ``⌊γn⌋``.
    security_bits : float
        The server, with ``max_corrupt_clients`` colluders, learns nothing beyond the sum of the
        uploaders and who was present, except with probability ``2^−security_bits`` (``inf``: never).
    correctness_bits : float
        With at most ``⌊ωn⌋`` drop-outs, the instance halts although ``⌈(1−ω)n⌉`` clients stayed
        with probability at most ``2^−correctness_bits`` (``inf``: never).
    threat_model : str
    """

    graph: str
    num_clients: int
    degree: int
    share_threshold: int
    survivor_threshold: int
    omega: float
    corrupt_fraction: float
    max_corrupt_clients: int
    security_bits: float
    correctness_bits: float
    threat_model: str = THREAT_MODEL

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for summaries)."""
        return asdict(self)


@dataclass(frozen=True)
class GraphPolicy:
    """How an aggregator picks the masking graph of an instance from its roster size ``n`` and ``ω``.

    Parameters
    ----------
    graph : {"auto", "complete", "harary"} (default: "auto")
        ``"auto"``: Harary from :data:`AUTO_HARARY_MIN_CLIENTS` clients on when the bounds allow
        ``k < n − 1``, else complete.
    corrupt_fraction : float (default: 0.05)
        ``γ`` in [0, 1): clients that may be corrupted and collude with the server.
    degree, share_threshold : int (default: 0)
        Harary overrides of ``k`` (even) and ``t``; 0 takes them from :mod:`fedpriv.secagg.bounds`.
        An override must still meet ``security_bits`` (else ``ValueError``); a low correctness is
        reported in the guarantee (more spurious halts, never a leak).
    security_bits, correctness_bits : float (default: 40, 20)
        ``σ`` and ``η`` of :mod:`fedpriv.secagg.bounds`.
    """

    graph: str = "auto"
    corrupt_fraction: float = CORRUPT_FRACTION
    degree: int = 0
    share_threshold: int = 0
    security_bits: float = SECURITY_BITS
    correctness_bits: float = CORRECTNESS_BITS

    def __post_init__(self) -> None:
        check_choice(self.graph, "graph", GRAPHS)
        object.__setattr__(self, "corrupt_fraction", check_probability(
            self.corrupt_fraction, "corrupt_fraction", low_open=False, high_open=True))
        object.__setattr__(self, "degree", check_int(self.degree, "degree", minimum=0))
        object.__setattr__(self, "share_threshold", check_int(self.share_threshold, "share_threshold", minimum=0))
        object.__setattr__(self, "security_bits", check_positive(self.security_bits, "security_bits"))
        object.__setattr__(self, "correctness_bits", check_positive(self.correctness_bits, "correctness_bits"))
        if self.degree % 2:
            raise ValueError(f"degree must be even (k/2 ring neighbours on each side of a Harary ring), "
                             f"got {self.degree}")
        if (self.degree or self.share_threshold) and self.graph != "harary":
            raise ValueError(f"degree and share_threshold overrides need graph = 'harary', got graph = {self.graph!r} "
                             f"with degree = {self.degree}, share_threshold = {self.share_threshold}")

    def kind(self, num_clients: int, omega: float) -> str:
        """``"complete"`` or ``"harary"`` for a roster of ``num_clients`` (resolves ``"auto"``)."""
        n = check_int(num_clients, "num_clients", minimum=1)
        if self.graph != "auto":
            return self.graph
        if n < AUTO_HARARY_MIN_CLIENTS:
            return "complete"
        found = harary_parameters(n, corrupt_fraction=self.corrupt_fraction, dropout_fraction=omega,
                                  security_bits=self.security_bits, correctness_bits=self.correctness_bits)
        return "complete" if found is None else "harary"

    def guarantee(self, num_clients: int, omega: float) -> SecAggGuarantee:
        """The graph's parameters and what they guarantee for ``num_clients`` and ``ω`` (raises if unmet)."""
        n = check_int(num_clients, "num_clients", minimum=1)
        omega = check_probability(omega, "omega", low_open=False, high_open=True)
        t_all = survivor_threshold(n, omega)
        corrupt = math.floor(self.corrupt_fraction * n + 1e-9)
        guarantee = functools.partial(SecAggGuarantee, num_clients=n, survivor_threshold=t_all, omega=omega,
                                      corrupt_fraction=self.corrupt_fraction, max_corrupt_clients=corrupt)
        if self.kind(n, omega) == "complete":
            if corrupt >= t_all:
                raise ValueError(f"corrupt_fraction must leave ⌊γn⌋ < t = ⌈(1−ω)n⌉ for the complete graph (Bonawitz "
                                 f"et al. 2017: fewer than t colluding clients), got ⌊γn⌋ = {corrupt}, t = {t_all}")
            return guarantee("complete", degree=n - 1, share_threshold=t_all,
                             security_bits=math.inf, correctness_bits=math.inf)
        bounds = self._harary_bounds(n, omega)
        if bounds.security_bits < self.security_bits:
            raise ValueError(
                f"degree = {bounds.degree}, share_threshold = {bounds.share_threshold} give statistical security "
                f"2^-{bounds.security_bits:.1f} for n = {n}, γ = {self.corrupt_fraction}, ω = {omega}; security_bits "
                f"= {self.security_bits} needs a larger degree (or leave degree and share_threshold at 0)")
        return guarantee("harary", degree=bounds.degree, share_threshold=bounds.share_threshold,
                         security_bits=bounds.security_bits, correctness_bits=bounds.correctness_bits)

    def _harary_bounds(self, n: int, omega: float) -> Any:
        """The Harary ``(k, t)`` with their bounds: from the search, or the overrides."""
        kwargs = {"corrupt_fraction": self.corrupt_fraction, "dropout_fraction": omega}
        found = harary_parameters(n, security_bits=self.security_bits, correctness_bits=self.correctness_bits,
                                  **kwargs)
        if found is None and not self.degree:
            raise ValueError(f"no Harary degree k < n − 1 = {n - 1} meets security_bits = {self.security_bits} and "
                             f"correctness_bits = {self.correctness_bits} for γ = {self.corrupt_fraction}, ω = {omega}: "
                             f"use graph = 'complete' (or 'auto')")
        k = self.degree or found.degree  # type: ignore[union-attr]
        if k > n - 1:
            raise ValueError(f"degree must be <= n − 1 = {n - 1}, got {k}")
        t = self.share_threshold
        if not t:
            if found is not None and found.degree == k:
                t = found.share_threshold
            else:  # the smallest t >= 2 meeting σ for this k (correctness as it comes)
                t = next((c for c in range(2, k + 2) if harary_bounds(
                    n, k, c, **kwargs).log2_corrupt_neighbourhood < -(self.security_bits + 1)), k + 1)
        return harary_bounds(n, k, t, **kwargs)

    def resolve(self, num_clients: int, omega: float, *, seed: int) -> tuple[MaskingGraph, SecAggGuarantee]:
        """The instance's :class:`MaskingGraph` (public randomness from ``seed``) and its guarantee."""
        g = self.guarantee(num_clients, omega)
        if g.graph == "complete":
            return MaskingGraph.complete(num_clients, g.survivor_threshold), g
        return MaskingGraph("harary", g.degree, g.share_threshold, seed=check_int(seed, "seed", minimum=0)), g


#: The run-configuration keys of :class:`GraphPolicy`'s fields (σ and η keep their defaults there).
GRAPH_KEYS: dict[str, str] = {"graph": "secagg-graph", "corrupt_fraction": "secagg-corrupt",
                              "degree": "secagg-degree", "share_threshold": "secagg-threshold"}


def graph_policy(names: Mapping[str, str], **values: Any) -> GraphPolicy:
    """``GraphPolicy(**values)``; a bad value's error calls each parameter ``names[parameter]`` (its key or field)."""
    try:
        return GraphPolicy(**values)
    except ValueError as exc:
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
        raise ValueError(pattern.sub(lambda m: names[m.group(1)], str(exc))) from None
