"""End-to-end tests of vertical k-means on synthetic data (docs/vertical_kmeans.md §8.1, §15, §16, §19 items 11, 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering import vertical as vk
from fedpriv.clustering.metrics import relative_intersection_error
from fedpriv.clustering.vertical import (
    METHODS,
    PartyMessage,
    VerticalKMeansConfig,
    run_vertical_kmeans,
)
from fedpriv.data.vertical import VerticalData, load_vertical
from fedpriv.sketch.hashing import HashKey

KEY = HashKey(bytes(range(7, 39)))


@pytest.fixture(scope="module")
def mixed() -> dict[int, VerticalData]:
    return {s: load_vertical("mixed-gaussian", s, n=2000, seed=1) for s in (2, 4)}


@pytest.mark.parametrize("parties", [2, 4])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs(mixed: dict[int, VerticalData], method: str, parties: int) -> None:
    """§19 item 14 smoke test (n = 2000, M = 256) plus the item 11 ledger check."""
    data = mixed[parties]
    res = run_vertical_kmeans(data, VerticalKMeansConfig(method=method, M=256), seed=5, key=KEY)
    assert res.centers.shape == (5, 8) and np.all(np.abs(res.centers) <= 1)
    assert math.isfinite(res.metrics["cost"]) and res.metrics["cost"] > 0
    assert 0.0 <= res.metrics["v_measure"] <= 1.0
    assert res.privacy["within_budget"] is vk.TRAITS[method].private
    if method in vk.CENTRAL_METHODS:
        assert res.weights is None and res.kprimes == ()
        return
    assert len(res.kprimes) == parties and res.weights.shape == res.kprimes
    assert np.all(res.weights >= 0)
    total = res.n_hat if res.n_hat is not None else data.n  # Norm-Sub target: n̂, or the public n
    assert res.weights.sum() == pytest.approx(total, rel=1e-9)
    assert res.true_weights.sum() == data.n
    assert 0.0 <= res.metrics["relative_error"] <= 2.0 * total / data.n


@pytest.mark.parametrize("method", ["dpfmps-2pest", "ldp-agg-2pest", "vfl-kmeans"])
def test_message_protocol_matches_in_process_run(mixed: dict[int, VerticalData], method: str) -> None:
    """The Flower apps' order of calls, with messages through flat arrays, gives the in-process centers (§18)."""
    data, seed = mixed[4], 21
    cfg = VerticalKMeansConfig(method=method, M=128, epsilon=4.0)
    expected = run_vertical_kmeans(data, cfg, seed=seed, key=KEY)
    counter = vk.count_party(seed, data.parties)
    n_hat = vk.party_count(data.blocks[counter], vk.count_epsilon(cfg), vk.party_rng(seed, counter, "count"))
    kprime = vk.server_kprime(cfg, n_hat, data.parties)
    budget = vk.budget_for(cfg, n_hat, data.parties)
    messages = []
    for ell in reversed(range(data.parties)):  # arrival order does not matter
        msg = vk.party_encode(data.blocks[ell], data.ids, ell, cfg, kprime, budget, KEY, seed=seed)
        messages.append(PartyMessage.from_arrays(ell, msg.to_arrays()))
    weights = vk.server_weights(messages, n_hat, cfg, budget, seed=seed)
    centers = vk.server_centers(messages, weights, cfg, seed=seed)
    assert np.array_equal(centers, expected.centers)
    assert np.array_equal(weights, expected.weights)


def test_vfl_kmeans_is_close_to_central(mixed: dict[int, VerticalData]) -> None:
    """§2 non-private VFL with k' = k on well-separated data: cost within 20% of central k-means."""
    for seed in range(3):
        res = run_vertical_kmeans(mixed[2], VerticalKMeansConfig(method="vfl-kmeans"), seed=seed)
        assert res.kprimes == (5, 5)
        assert res.metrics["cost_ratio"] < 1.2


def test_dpfmps_2pest_approaches_vfl_at_large_epsilon(mixed: dict[int, VerticalData]) -> None:
    """At ε = 64 (M = 4096, auto k') DPFMPS-2PEst's cost ratio is near VFL's (≈ 1), far below ε = 1's.

    Measured (n = 2000, S = 2, seeds 0–2): ε = 1 gives ratios ≈ 45–67, ε = 64 gives ≈ 1.1–1.3;
    the bounds 2.0 and 10 leave wide margins either side.
    """
    data = mixed[2]
    ratio = {eps: np.mean([run_vertical_kmeans(data, VerticalKMeansConfig(epsilon=eps), seed=s, key=KEY)
                           .metrics["cost_ratio"] for s in range(3)]) for eps in (1.0, 64.0)}
    vfl = np.mean([run_vertical_kmeans(data, VerticalKMeansConfig(method="vfl-kmeans"), seed=s).metrics["cost_ratio"]
                   for s in range(3)])
    assert ratio[64.0] < 2.0 * vfl
    assert ratio[1.0] > 10.0 * ratio[64.0]


def test_two_party_est_beats_basic_est_at_four_parties(mixed: dict[int, VerticalData]) -> None:
    """§8.1 / §15.4 item 5: with S = 4, k = k' = 5, 2PEst's relative intersection error is below BasicEst's.

    Paired over 6 seeds on the same messages (same DP centers and sketches): the mean difference
    ``err_basic − err_2pest`` must exceed 5 standard errors of the mean. Measured: about 0.6 (t ≈ 8).
    Broken variants fail it: no 2PEst iterations (the independence start, t ≈ −0.6) or the biased
    ``estimator="hm_raw"`` (t ≈ −3.6). The literal unclipped update (A4) improves less (≈ 0.15 here).
    """
    data = mixed[4]
    cfg_2p = VerticalKMeansConfig(method="dpfmps-2pest", M=256, epsilon=4.0, kprime_rule="fixed", kprime=5)
    cfg_basic = VerticalKMeansConfig(method="dpfmps-basic", M=256, epsilon=4.0, kprime_rule="fixed", kprime=5)
    diffs = []
    for seed in range(6):
        n_hat = vk.party_count(data.blocks[0], vk.count_epsilon(cfg_2p), vk.party_rng(seed, 0, "count"))
        budget = vk.budget_for(cfg_2p, n_hat, data.parties)
        msgs = [vk.party_encode(b, data.ids, ell, cfg_2p, 5, budget, KEY, seed=seed) for ell, b in enumerate(data.blocks)]
        truth = vk.exact_weights([vk.assign(b, m.centers) for b, m in zip(data.blocks, msgs)], [m.k for m in msgs])
        err = {name: relative_intersection_error(vk.server_weights(msgs, n_hat, cfg, budget, seed=seed), truth, data.n)
               for name, cfg in (("2pest", cfg_2p), ("basic", cfg_basic))}
        diffs.append(err["basic"] - err["2pest"])
    d = np.array(diffs)
    assert d.mean() > 5 * d.std(ddof=1) / math.sqrt(d.size)
