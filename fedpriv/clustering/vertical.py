"""Vertical federated k-means, the thesis's Algorithm 2 (docs/vertical_kmeans.md §2, §3, §6, §9, §10, §16, §18).

The protocol is written once, as party-side and server-side functions over numpy arrays; the
vertical-kmeans workload (``fedpriv/workloads/vertical_kmeans/``: its server protocol and party
handler) calls them in this order in every runtime — in process ``simulations.runner.run`` with
``task = "vertical-kmeans"``, Flower's simulation engine, a deployment.

Order of a run (§3.2, §18)::

    c     = count_party(seed, S)                                   # server picks the counting party
    n_hat = party_count(block_c, count_epsilon(cfg), party_rng(seed, c, "count"))
    k'    = server_kprime(cfg, n_hat, S);  budget = budget_for(cfg, n_hat, S)
    msg_l = party_encode(block_l, ids, l, cfg, k', budget, key, seed=seed)      # every party l
    w     = server_weights(msgs, n_hat, cfg, budget, seed=seed)
    C     = server_centers(msgs, w, cfg, seed=seed)

Guarantees
----------
* Privacy (§10): with a private method, party ℓ's message is (ε_1 + ε_2, δ_2)-DP (DPLSF centers,
  then the sketch / histogram / LDP reports of the partition the released centers induce), the
  n̂ answer ε_0-DP, and everything the server does is post-processing, so the run is (ε, δ)-DP
  (IND-LAP and LDP-AGG: pure ε). :func:`privacy_record` records every release in a
  :class:`~fedpriv.accounting.budget.PrivacyAccount` and checks it against the budget.
* The secret hash key never reaches the server: no server-side function takes a
  :class:`~fedpriv.sketch.hashing.HashKey`, and a :class:`PartyMessage` holds only centers,
  integer registers, histograms, LDP reports or (non-private baselines) labels (§5.5 R3, §19 item 12).
* Randomness: party draws come from ``party_rng(seed, party, purpose)`` (keyed by the run seed) or, for a
  party that is a node, from its :class:`~fedpriv.node.randomness.Randomness` (:func:`party_stream`: keyed by the
  run seed in a simulation, the same bits as ``party_rng``; ChaCha20 keyed by a node secret when deployed); server
  draws from ``server_rng(seed, purpose)``; no global state. The hash key comes from the OS CSPRNG unless given.
* Grid order: node ``a = (a_1..a_S)`` is row ``ravel_multi_index(a, (k_1..k_S))`` of :func:`grid`
  (C order) and the same cell of every weight tensor; party ℓ's columns sit at its offset.

Decisions where the spec is silent [proposal]: labels in a :class:`PartyMessage` are in increasing
id order, so parties align without sending ids; the central baselines pad their centers to k rows
with copies of the first (cost unchanged, ties go to the lowest index); ``true_weights`` are the
exact intersection sizes of the same local partitions (§16).
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from fedpriv._validation import check_array, check_int, check_positive, check_rng
from fedpriv.accounting.budget import BudgetSplit, PrivacyAccount
from fedpriv.clustering.baselines import (
    ind_lap_histogram,
    ind_lap_weights,
    ldp_agg_reports,
    ldp_agg_weights,
)
from fedpriv.clustering.dplsf import dplsf
from fedpriv.clustering.kmeans import assign, distinct_rows, kmeans, weighted_kmeans
from fedpriv.clustering.methods import (
    CENTRAL_METHODS,
    METHODS,
    SKETCH_METHODS,
    TRAITS,
    MethodTraits,
    VerticalKMeansConfig,
    budget_for,
    count_epsilon,
    server_kprime,
)
from fedpriv.clustering.metrics import (
    kmeans_cost,
    relative_intersection_error,
    v_measure,
)
from fedpriv.clustering.noise import laplace
from fedpriv.clustering.party_message import PartyMessage, labels_array
from fedpriv.clustering.weights import basic_est, two_party_est
from fedpriv.data.vertical import VerticalData, check_unit_box
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.rng import SERVER, stream
from fedpriv.sketch.dpfm import DpfmParams
from fedpriv.sketch.hashing import HashKey
from fedpriv.sketch.partition import partition_sketch

__all__ = [
    "CENTRAL_METHODS",
    "METHODS",
    "SKETCH_METHODS",
    "TRAITS",
    "MethodTraits",
    "PartyMessage",
    "VerticalKMeansConfig",
    "budget_for",
    "central_reference_cost",
    "central_run",
    "count_epsilon",
    "count_party",
    "evaluate",
    "exact_weights",
    "grid",
    "party_count",
    "party_encode",
    "party_rng",
    "party_stream",
    "privacy_record",
    "server_centers",
    "server_kprime",
    "server_rng",
    "server_weights",
    "sketch_params",
]

_PURPOSE = "vertical-kmeans"
_REFERENCE_CACHE: OrderedDict[tuple[str, int, int], float] = OrderedDict()
_REFERENCE_CACHE_SIZE = 32


# --------------------------------------------------------------------------------------------
# keyed streams: the one place for the keys every runtime uses
# --------------------------------------------------------------------------------------------


def party_rng(seed: int, party: int, purpose: str) -> np.random.Generator:
    """Party ℓ's stream for ``purpose``: ``stream(seed, 0, party, "vertical-kmeans/<purpose>")``."""
    return stream(seed, 0, check_int(party, "party", minimum=0), f"{_PURPOSE}/{purpose}")


def party_stream(randomness: Randomness, party: int, purpose: str, *, step: int = 0) -> np.random.Generator:
    """Party ℓ's stream for ``purpose`` from ``randomness``: ``randomness.numpy(step, party, "vertical-kmeans/<purpose>")``.

    ``KeyedRandomness(seed)`` at step 0 gives :func:`party_rng`'s bits; a node's secret randomness gives
    ChaCha20 draws the server cannot recompute.
    """
    if not isinstance(randomness, Randomness):
        raise TypeError(f"randomness must be a fedpriv.node.randomness.Randomness, got {type(randomness).__name__}")
    return randomness.numpy(step, check_int(party, "party", minimum=0), f"{_PURPOSE}/{purpose}")


def server_rng(seed: int, purpose: str) -> np.random.Generator:
    """The server's stream for ``purpose``: ``stream(seed, 0, SERVER, "vertical-kmeans/<purpose>")``."""
    return stream(seed, 0, SERVER, f"{_PURPOSE}/{purpose}")




# --------------------------------------------------------------------------------------------
# party side
# --------------------------------------------------------------------------------------------


def count_party(seed: int, parties: int) -> int:
    """The party the server asks for n̂, uniform over ``parties`` from ``server_rng(seed, "count-party")`` (§3.2 3a)."""
    parties = check_int(parties, "parties", minimum=1)
    return int(server_rng(seed, "count-party").integers(parties))


def party_count(block: np.ndarray, epsilon0: float, rng: np.random.Generator) -> float:
    """``n + Lap(1/ε_0)`` (§3.2 3a, sensitivity 1); ``epsilon0 = 0`` returns the exact public n.

    ``epsilon0 = 0`` is for methods whose n is public or that are not private
    (:func:`~fedpriv.clustering.methods.count_epsilon` says which).
    """
    arr = np.asarray(block)
    if arr.ndim != 2:
        raise ValueError(f"block must be a 2-D array (rows, attributes), got shape {arr.shape}")
    epsilon0 = check_positive(epsilon0, "epsilon0", allow_zero=True)
    n = float(arr.shape[0])
    if epsilon0 == 0:
        return n
    return n + float(laplace(1.0 / epsilon0, None, check_rng(rng)))  # §3.2 3a


def sketch_params(cfg: VerticalKMeansConfig, budget: BudgetSplit) -> DpfmParams:
    """Sketch parameters (M, γ, ε_2, δ_2) shared by the parties (MemEnc) and the server (WeightEst)."""
    return DpfmParams(M=cfg.M, gamma=cfg.gamma, epsilon=budget.eps2, delta=budget.delta2)


def _check_ids(ids: Any, n: int) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"ids must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if arr.shape[0] != n:
        raise ValueError(f"ids must have one entry per row of block ({n}), got {arr.shape[0]}")
    if np.unique(arr).size != n:
        raise ValueError(f"ids must be unique, got {n - np.unique(arr).size} duplicate(s)")
    return arr.astype(np.int64, copy=False)


def _check_key_use(cfg: VerticalKMeansConfig, key: Any) -> None:
    if cfg.method in SKETCH_METHODS and not isinstance(key, HashKey):
        raise TypeError(f"key must be the parties' shared HashKey for method {cfg.method!r}, "
                        f"got {type(key).__name__}")


def _local_centers(block: np.ndarray, cfg: VerticalKMeansConfig, kprime: int, budget: BudgetSplit,
                   rng: np.random.Generator) -> np.ndarray:
    """LocCluster (§3.2 step 1): DPLSF with ε_1 (§4.2) or non-private k-means (§2, §9.3), drawing from ``rng``."""
    if cfg.traits.local == "kmeans":
        return distinct_rows(kmeans(block, kprime, rng=rng, restarts=cfg.restarts))[0]
    return dplsf(block, kprime, budget.eps1, rng, preset=cfg.dplsf_preset).centers


def _party_randomness(seed: int | None, randomness: Randomness | None) -> Randomness:
    """The randomness a party encodes with: exactly one of ``seed`` (keyed by the run seed) and ``randomness``."""
    if (seed is None) == (randomness is None):
        raise TypeError("party_encode takes exactly one of seed (keyed by the run seed) and randomness (a node's), "
                        f"got seed={seed!r} and randomness={randomness!r}")
    return KeyedRandomness(seed) if randomness is None else randomness  # type: ignore[arg-type]


def _encode(block: Any, ids: Any, party: int, cfg: VerticalKMeansConfig, kprime: int, budget: BudgetSplit,
            key: HashKey | None, randomness: Randomness, step: int = 0) -> PartyMessage:
    """Party ℓ's message; every draw from ``randomness`` at ``step``."""
    if not isinstance(cfg, VerticalKMeansConfig):
        raise TypeError(f"cfg must be a VerticalKMeansConfig, got {type(cfg).__name__}")
    if cfg.traits.local == "central":
        raise ValueError(f"method must be a vertical method for party_encode, got the central baseline {cfg.method!r}")
    if not isinstance(budget, BudgetSplit):
        raise TypeError(f"budget must be a BudgetSplit, got {type(budget).__name__}")
    block = check_unit_box(block, "block")
    ids = _check_ids(ids, block.shape[0])
    party = check_int(party, "party", minimum=0)
    kprime = check_int(kprime, "kprime", minimum=1)
    _check_key_use(cfg, key)

    def rng(purpose: str) -> np.random.Generator:
        return party_stream(randomness, party, purpose, step=step)

    centers = _local_centers(block, cfg, kprime, budget, rng("loc-cluster"))
    k_l = centers.shape[0]
    labels = assign(block, centers)  # §6: nearest released center, ties → lowest index
    encoding = cfg.traits.encoding
    if encoding == "sketch":  # MemEnc = DPFMPS-Gen (§6)
        shared = cast(HashKey, key)  # _check_key_use: every sketch method holds the parties' HashKey
        sketch = partition_sketch(ids, labels, k_l, shared, sketch_params(cfg, budget),
                                  rng("phantoms"), backend=cfg.hash_backend)
        message = PartyMessage(party, centers, sketch=sketch)
    elif encoding == "histogram":  # IND-LAP (§9.1)
        hist = ind_lap_histogram(labels, k_l, budget.eps2, rng("ind-lap"))
        message = PartyMessage(party, centers, histogram=hist)
    elif encoding == "ldp":  # LDP-AGG (§9.2)
        reports = ldp_agg_reports(labels, k_l, budget.eps2, rng("ldp-agg"), ids=ids)
        message = PartyMessage(party, centers, reports=reports)
    else:  # exact memberships (§2, §9.3 ablation), in increasing id order
        message = PartyMessage(party, centers, labels=labels[np.argsort(ids, kind="stable")])
    return message


def party_encode(block: np.ndarray, ids: np.ndarray, party: int, cfg: VerticalKMeansConfig, kprime: int,
                 budget: BudgetSplit, key: HashKey | None, *, seed: int | None = None,
                 randomness: Randomness | None = None, step: int = 0) -> PartyMessage:
    """Party ℓ's encode round (§3.2 steps 1–2): LocCluster, assignment, then MemEnc by method.

    ``block`` is the party's (n, m_ℓ) column block in [−1, 1], ``ids`` its row ids; ``key`` is
    required by :data:`SKETCH_METHODS` and ignored otherwise. Its draws (DPLSF, phantoms, IND-LAP
    or LDP-AGG noise) come from :func:`party_stream` of exactly one of ``seed`` (the keyed
    streams ``party_rng(seed, party, purpose)``, a simulated party's) and ``randomness``
    (a node's own, at ``step``).
    """
    step = check_int(step, "step", minimum=0)
    return _encode(block, ids, party, cfg, kprime, budget, key, _party_randomness(seed, randomness), step)


# --------------------------------------------------------------------------------------------
# server side (post-processing: no hash key anywhere)
# --------------------------------------------------------------------------------------------


def grid(centers: Sequence[np.ndarray]) -> np.ndarray:
    """Grid nodes ``(Π k_ℓ, m)``: node a = (c^(1)_{a_1} | … | c^(S)_{a_S}), C order over (a_1..a_S) (§3.2 3c)."""
    if isinstance(centers, np.ndarray) or not isinstance(centers, Sequence) or len(centers) == 0:
        raise ValueError("centers must be a non-empty sequence of (k_l, m_l) arrays, one per party")
    blocks = []
    for ell, c in enumerate(centers):
        arr = check_array(c, f"centers[{ell}]")
        if arr.ndim != 2:
            raise ValueError(f"centers[{ell}] must be a 2-D array (k_l, m_l), got shape {arr.shape}")
        blocks.append(arr)
    index = np.indices(tuple(b.shape[0] for b in blocks)).reshape(len(blocks), -1)  # C order over a
    return np.hstack([b[idx] for b, idx in zip(blocks, index)])


def exact_weights(labels: Sequence[np.ndarray], kprimes: Sequence[int]) -> np.ndarray:
    """True intersection sizes ``|∩_ℓ M^(ℓ)_{a_ℓ}|`` of aligned partitions, shape (k_1..k_S) (w*, §2, §16)."""
    if isinstance(labels, np.ndarray) or not isinstance(labels, Sequence) or len(labels) == 0:
        raise ValueError("labels must be a non-empty sequence of 1-D label arrays, one per party")
    if len(kprimes) != len(labels):
        raise ValueError(f"kprimes must have one entry per party ({len(labels)}), got {len(kprimes)}")
    shape = tuple(check_int(k, f"kprimes[{ell}]", minimum=1) for ell, k in enumerate(kprimes))
    arrays = [labels_array(lab, k, f"labels[{ell}]") for ell, (lab, k) in enumerate(zip(labels, shape))]
    n = arrays[0].shape[0]
    for ell, arr in enumerate(arrays):
        if arr.shape[0] != n:
            raise ValueError(f"labels[{ell}] must have {n} entries like labels[0], got {arr.shape[0]}")
    cells = np.ravel_multi_index(tuple(arrays), shape)
    return np.bincount(cells, minlength=int(np.prod(shape))).reshape(shape).astype(np.float64)


def _ordered(messages: Sequence[PartyMessage]) -> list[PartyMessage]:
    """Messages sorted by party; the parties must be exactly 0..S−1 with S ≥ 2."""
    msgs = list(messages)
    for i, m in enumerate(msgs):
        if not isinstance(m, PartyMessage):
            raise TypeError(f"messages[{i}] must be a PartyMessage, got {type(m).__name__}")
    msgs.sort(key=lambda m: m.party)
    parties = [m.party for m in msgs]
    if len(msgs) < 2 or parties != list(range(len(msgs))):
        raise ValueError(f"messages must come from parties 0..S-1 with S >= 2, one each, got parties {parties}")
    return msgs


def _payload(msgs: list[PartyMessage], name: str, method: str) -> list[Any]:
    values = [getattr(m, name) for m in msgs]
    missing = [m.party for m, v in zip(msgs, values) if v is None]
    if missing:
        raise ValueError(f"messages must carry a {name!r} for method {method!r}, got none from parties {missing}")
    return values


def server_weights(messages: Sequence[PartyMessage], n_hat: float, cfg: VerticalKMeansConfig,
                   budget: BudgetSplit, *, seed: int) -> np.ndarray:
    """Grid weights, shape (k_1..k_S), by method: 2PEst / BasicEst / IND-LAP / LDP-AGG(-2PEst) / exact.

    Sketch and IND-LAP weights sum to ``n_hat``; LDP-AGG's to the public number of reported ids (A7)
    and exact weights to n (``n_hat`` is not used by those).
    """
    msgs = _ordered(messages)
    if not isinstance(cfg, VerticalKMeansConfig):
        raise TypeError(f"cfg must be a VerticalKMeansConfig, got {type(cfg).__name__}")
    kind = cfg.traits.weights
    rng = server_rng(seed, "weights")
    if kind in ("2pest", "basic"):
        sketches = _payload(msgs, "sketch", cfg.method)
        params = sketch_params(cfg, budget)
        if kind == "basic":  # Algorithm 5 (§7)
            return basic_est(sketches, n_hat, params, estimator=cfg.estimator)
        return two_party_est(sketches, n_hat, params, rng=rng, iterations=cfg.twopest_iterations,  # Algorithm 6
                             update=cfg.update, estimator=cfg.estimator)
    if kind == "ind":  # §9.1
        return ind_lap_weights(_payload(msgs, "histogram", cfg.method), n_hat)
    if kind in ("ldp-2pest", "ldp"):  # §9.2: n is public here (A7)
        reports = _payload(msgs, "reports", cfg.method)
        return ldp_agg_weights(reports, int(reports[0].ids.size), pairwise=kind == "ldp-2pest", rng=rng,
                               iterations=cfg.twopest_iterations, update=cfg.update)
    if kind == "exact":  # §2
        return exact_weights(_payload(msgs, "labels", cfg.method), [m.k for m in msgs])
    raise ValueError(f"method must be a vertical method for server_weights, got {cfg.method!r}")


def server_centers(messages: Sequence[PartyMessage], weights: np.ndarray, cfg: VerticalKMeansConfig, *,
                   seed: int) -> np.ndarray:
    """The k final centers (k, m): weighted k-means on the grid (§3.2 step 4, §3.4)."""
    msgs = _ordered(messages)
    shape = tuple(m.k for m in msgs)
    w = check_array(weights, "weights")
    if w.shape != shape:
        raise ValueError(f"weights must have the grid shape {shape}, got {w.shape}")
    nodes = grid([m.centers for m in msgs])
    return weighted_kmeans(nodes, w.ravel(), cfg.k, rng=server_rng(seed, "final-kmeans"), restarts=cfg.restarts)


# --------------------------------------------------------------------------------------------
# baselines, privacy account and the offline evaluation
# --------------------------------------------------------------------------------------------


def _data_digest(data: VerticalData) -> str:
    h = hashlib.blake2b(digest_size=16)
    for b in data.blocks:
        h.update(repr(b.shape).encode())
        h.update(np.ascontiguousarray(b).tobytes())
    h.update(np.ascontiguousarray(data.ids).tobytes())
    return h.hexdigest()


def central_reference_cost(data: VerticalData, k: int, *, seed: int) -> float:
    """Cost of central non-private k-means (10 restarts) on ``data.x``; cached per (data, k, seed) (§9.3)."""
    if not isinstance(data, VerticalData):
        raise TypeError(f"data must be a VerticalData, got {type(data).__name__}")
    k = check_int(k, "k", minimum=1)
    cache_key = (_data_digest(data), k, check_int(seed, "seed", minimum=0))
    if cache_key in _REFERENCE_CACHE:
        _REFERENCE_CACHE.move_to_end(cache_key)
        return _REFERENCE_CACHE[cache_key]
    x = data.x
    cost = kmeans_cost(x, kmeans(x, k, rng=server_rng(seed, "central-kmeans")))
    _REFERENCE_CACHE[cache_key] = cost
    if len(_REFERENCE_CACHE) > _REFERENCE_CACHE_SIZE:
        _REFERENCE_CACHE.popitem(last=False)
    return cost


def _central(data: VerticalData, cfg: VerticalKMeansConfig, seed: int,
             account: PrivacyAccount, non_private: list[str]) -> np.ndarray:
    """Central baselines on the full data (§9.3), padded to k rows."""
    x = data.x
    if cfg.method == "central-kmeans":
        centers = kmeans(x, cfg.k, rng=server_rng(seed, "central-kmeans"), restarts=cfg.restarts)
        non_private.append("central_kmeans")
    else:
        local = dplsf(x, cfg.k, cfg.epsilon, server_rng(seed, "central-dplsf"), preset=cfg.dplsf_preset)
        account.record("central_dplsf", local.epsilon, 0.0, 1)
        centers = local.centers
    pad = np.repeat(centers[:1], cfg.k - centers.shape[0], axis=0)
    return np.vstack([centers, pad])


def _record_parties(cfg: VerticalKMeansConfig, budget: BudgetSplit, parties: int, account: PrivacyAccount,
                    non_private: list[str]) -> None:
    """Record LocCluster and MemEnc of the S parties (§10)."""
    traits = cfg.traits
    if traits.local == "dplsf":
        account.record("loc_cluster", budget.eps1, 0.0, parties)
    else:
        non_private.append("loc_cluster")
    if traits.encoding == "sketch":
        account.record("mem_enc", budget.eps2, budget.delta2, parties)
    elif traits.encoding in ("histogram", "ldp"):
        account.record("mem_enc", budget.eps2, 0.0, parties)
    else:
        non_private.append("mem_enc")


def _caveats(cfg: VerticalKMeansConfig) -> list[str]:
    """Conditions of the run that void or weaken the stated guarantee (§10 preconditions, A7, A9)."""
    out = []
    if cfg.method in SKETCH_METHODS and cfg.hash_backend == "datasketch":
        out.append("A9: the datasketch backend's repetitions are not independent; the (eps2, delta2) "
                   "guarantee of the sketches assumes an ideal hash")
    if cfg.traits.encoding == "ldp":
        out.append("A7: LDP-AGG treats the id universe (and n) as public")
    return out


def _privacy(cfg: VerticalKMeansConfig, account: PrivacyAccount, non_private: list[str], budget_eps: float,
             budget_delta: float, split: dict[str, float] | None) -> dict[str, Any]:
    """The privacy dict of a run from its account; raises ``BudgetExceededError`` on overspend."""
    account.check((budget_eps, budget_delta))
    private = not non_private
    spent_eps, spent_delta = account.total()
    return dict(private=private, epsilon=spent_eps if private else math.inf, delta=spent_delta,
                budget=dict(epsilon=budget_eps, delta=budget_delta), within_budget=private,
                releases=account.to_dict()["releases"], non_private=list(non_private), split=split,
                hash_backend=cfg.hash_backend if cfg.method in SKETCH_METHODS else None,
                caveats=_caveats(cfg))


def privacy_record(cfg: VerticalKMeansConfig, budget: BudgetSplit, parties: int) -> dict[str, Any]:
    """The privacy account of a vertical (non-central) run (§10): what the workload commits as ``privacy``.

    ``private`` (whole run DP), ``epsilon``/``delta`` spent (ε = inf when a component is not
    private), ``budget`` (ε, δ), ``within_budget`` (private and spent ≤ budget), ``releases``,
    ``non_private`` (components released without DP), ``split``, ``hash_backend`` and ``caveats``
    (preconditions of the guarantee this run does not meet, e.g. A9).

    Releases: n̂ (if queried, ε_0), LocCluster (ε_1) and MemEnc (ε_2, δ_2 for the sketches) at each
    of the S parties, composed sequentially; a component released without DP makes the run
    non-private (``epsilon = inf``). Raises if the spend exceeds the budget. It depends only on
    public parameters, so the server computes it without seeing any party's data.
    """
    account = PrivacyAccount()
    non_private: list[str] = []
    eps0 = count_epsilon(cfg)
    if eps0 > 0:
        account.record("n_hat", eps0, 0.0, 1)
    _record_parties(cfg, budget, parties, account, non_private)
    split = dict(b=budget.b, eps0=eps0, eps1=budget.eps1, eps2=budget.eps2, delta2=budget.delta2)
    return _privacy(cfg, account, non_private, budget.epsilon, budget.delta, split)


def central_run(data: VerticalData, cfg: VerticalKMeansConfig, *, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """A central baseline (§9.3) on the full data: its k centers (padded) and its privacy account."""
    if cfg.traits.local != "central":
        raise ValueError(f"method must be a central baseline for central_run, got {cfg.method!r}")
    account = PrivacyAccount()
    non_private: list[str] = []
    centers = _central(data, cfg, seed, account, non_private)
    return centers, _privacy(cfg, account, non_private, cfg.epsilon, 0.0, None)


def evaluate(data: VerticalData, cfg: VerticalKMeansConfig, centers: np.ndarray, *, seed: int,
             weights: np.ndarray | None = None, true_weights: np.ndarray | None = None) -> dict[str, float]:
    """The offline evaluation of §16 (simulation only, on the full data): cost, cost ratio, V-measure, relative error.

    ``cost_ratio`` is against central non-private k-means with the same seed; ``v_measure`` needs
    ``data.labels``; ``relative_error`` needs the estimated and the true grid weights.
    """
    x = data.x
    cost = kmeans_cost(x, centers)
    reference = central_reference_cost(data, cfg.k, seed=seed)
    metrics = dict(cost=cost, cost_ratio=cost / reference if reference > 0 else (1.0 if cost == 0 else math.inf))
    if data.labels is not None:
        metrics["v_measure"] = v_measure(data.labels, assign(x, centers))
    if weights is not None:
        if true_weights is None:
            raise ValueError("true_weights must be given with weights (relative_error compares the two), got None")
        metrics["relative_error"] = relative_intersection_error(weights, true_weights, data.n)
    return metrics
