"""Unit tests of the vertical k-means pipeline (docs/vertical_kmeans.md §2, §3, §6, §9, §10, §16, §19 items 11, 12)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from fedpriv.accounting.budget import BudgetSplit
from fedpriv.clustering import vertical as vk
from fedpriv.clustering.kprime import auto_kprime
from fedpriv.clustering.vertical import (
    METHODS,
    SKETCH_METHODS,
    PartyMessage,
    VerticalKMeansConfig,
    budget_for,
    count_epsilon,
    count_party,
    exact_weights,
    grid,
    party_count,
    party_encode,
    party_rng,
    server_kprime,
    server_rng,
)
from fedpriv.config import RunConfig
from fedpriv.data.vertical import VerticalData, load_vertical
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.sketch.hashing import HashKey
from tests.workloads._vertical_kmeans import WORKLOAD, run_commits

SECRET = bytes(range(100, 132))
KEY = HashKey(SECRET)


@pytest.fixture(scope="module")
def data2() -> VerticalData:
    return load_vertical("mixed-gaussian", 2, n=600, seed=3)


def _block(n: int = 50, m: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(n, m))


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(k=0), "k must be >= 1"),
        (dict(epsilon=0.0), "epsilon must be > 0"),
        (dict(epsilon=math.inf), "epsilon must be > 0"),
        (dict(delta=0.0), "delta must be in the open interval"),
        (dict(delta=1.0), "delta must be in the open interval"),
        (dict(method="dpfmps"), "method must be one of"),
        (dict(kprime=0, kprime_rule="fixed"), "kprime must be >= 1"),
        (dict(kprime=3), "kprime must be None unless kprime_rule='fixed'"),
        (dict(kprime_rule="R3"), "kprime_rule must be one of"),
        (dict(b=0.0), "b must be > 0"),
        (dict(b=1.5), r"b must be in \(0, 1\]"),
        (dict(b=1.0), "b must be < 1 for method 'dpfmps-2pest'"),
        (dict(b=1.0, method="ind-lap"), "b must be < 1 for method 'ind-lap'"),
        (dict(M=0), "M must be >= 1"),
        (dict(gamma=-1.0), "gamma must be > 0"),
        (dict(estimator="hm"), "estimator must be one of"),
        (dict(dplsf_preset="fast"), "dplsf_preset must be one of"),
        (dict(hash_backend="sha"), "hash_backend must be one of"),
        (dict(twopest_iterations=-1), "twopest_iterations must be >= 0"),
        (dict(update="mult"), "update must be one of"),
        (dict(restarts=0), "restarts must be >= 1"),
    ],
)
def test_config_rejects(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VerticalKMeansConfig(**kwargs)


def test_config_defaults_and_accepted_values() -> None:
    cfg = VerticalKMeansConfig()
    assert (cfg.k, cfg.epsilon, cfg.delta, cfg.method, cfg.kprime_rule, cfg.b, cfg.M) == (
        5, 1.0, None, "dpfmps-2pest", "R1", 0.98, 4096)
    assert set(METHODS) == set(vk.TRAITS)
    for method in METHODS:  # b = 1 is fine where no n̂ query is made
        if not vk.TRAITS[method].counts:
            assert VerticalKMeansConfig(method=method, b=1.0).b == 1.0
    assert VerticalKMeansConfig(kprime=3, kprime_rule="fixed").kprime == 3
    with pytest.raises(TypeError, match="k must be an integer"):
        VerticalKMeansConfig(k=2.5)


# --------------------------------------------------------------------------------------------
# budget, count, k'
# --------------------------------------------------------------------------------------------


def test_budget_for_each_method_family() -> None:
    split = budget_for(VerticalKMeansConfig(epsilon=2.0), 1000.0, 4)
    assert (split.epsilon, split.delta, split.b) == (2.0, 1e-3, 0.98)  # δ = 1/n̂ (§14)
    assert split.eps0 == pytest.approx(0.04) and split.eps2 == pytest.approx(0.98 * 2 / 8)
    assert split.delta2 == pytest.approx(2.5e-4)
    assert budget_for(VerticalKMeansConfig(delta=1e-6), 1000.0, 2).delta == 1e-6
    ind = budget_for(VerticalKMeansConfig(method="ind-lap"), 1000.0, 2)
    assert (ind.delta, ind.b) == (0.0, 0.98)
    ldp = budget_for(VerticalKMeansConfig(method="ldp-agg-2pest"), 1000.0, 2)
    assert (ldp.delta, ldp.b, ldp.eps0, ldp.eps2) == (0.0, 1.0, 0.0, 0.25)  # §9.2: ε_2 = ε/(2S)
    with pytest.raises(ValueError, match="n_or_n_hat must be > 1"):
        budget_for(VerticalKMeansConfig(), 0.5, 2)
    with pytest.raises(ValueError, match="Lemma 6"):  # ε_2 = 0.98·100/4 > 2 ln(2·1000)
        budget_for(VerticalKMeansConfig(epsilon=100.0), 1000.0, 2)


def test_count_epsilon() -> None:
    assert count_epsilon(VerticalKMeansConfig(epsilon=2.0)) == pytest.approx(0.04)
    for method in ("ldp-agg", "vfl-kmeans", "dplsf+exact", "central-dplsf"):
        assert count_epsilon(VerticalKMeansConfig(method=method)) == 0.0


def test_party_count_is_laplace_around_n() -> None:
    block, eps0, draws = _block(n=500), 0.1, 4000
    rng = party_rng(5, 1, "count")
    noise = np.array([party_count(block, eps0, rng) for _ in range(draws)]) - 500
    scale = 1 / eps0  # Lap(1/ε_0): mean 0, sd √2·scale, E|X| = scale
    assert abs(noise.mean()) < 5 * math.sqrt(2) * scale / math.sqrt(draws)
    assert abs(np.abs(noise).mean() - scale) < 5 * scale / math.sqrt(draws)  # Var|X| = scale²
    assert party_count(block, 0.0, rng) == 500.0  # exact public count
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="epsilon0 must be >= 0"):
            party_count(block, bad, rng)
    with pytest.raises(ValueError, match="block must be a 2-D array"):
        party_count(np.zeros(3), 1.0, rng)


def test_count_party_and_streams_are_keyed() -> None:
    picks = {count_party(seed, 4) for seed in range(40)}
    assert picks == {0, 1, 2, 3}
    assert count_party(7, 4) == count_party(7, 4)
    a, b = party_rng(1, 0, "x").random(4), party_rng(1, 0, "x").random(4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, party_rng(1, 1, "x").random(4))
    assert not np.array_equal(a, party_rng(1, 0, "y").random(4))
    assert not np.array_equal(server_rng(1, "x").random(4), a)


def test_server_kprime_rules() -> None:
    cfg = VerticalKMeansConfig(epsilon=1.5)
    assert server_kprime(cfg, 50000.0, 3) == auto_kprime(50000.0, 1.5, 3, 5) == 6  # §8.2 test vector
    assert server_kprime(VerticalKMeansConfig(kprime_rule="R2", epsilon=1.0), 10000.0, 2) == 5
    assert server_kprime(VerticalKMeansConfig(epsilon=1.0), 10000.0, 2) == 4
    assert server_kprime(VerticalKMeansConfig(kprime_rule="fixed"), 10.0, 2) == 5
    assert server_kprime(VerticalKMeansConfig(kprime_rule="fixed", kprime=7), 10.0, 2) == 7
    assert server_kprime(VerticalKMeansConfig(method="vfl-kmeans", k=4), 1e5, 2) == 4  # §2: k' = k
    with pytest.raises(ValueError, match="central baseline"):
        server_kprime(VerticalKMeansConfig(method="central-kmeans"), 1e4, 2)


# --------------------------------------------------------------------------------------------
# grid and exact weights
# --------------------------------------------------------------------------------------------


def test_grid_is_c_order_with_party_offsets() -> None:
    c = [np.array([[1.0], [2.0]]), np.array([[10.0, 11.0], [20.0, 21.0], [30.0, 31.0]]), np.array([[-1.0], [-2.0]])]
    g = grid(c)
    assert g.shape == (12, 4)
    for a in np.ndindex(2, 3, 2):
        row = np.ravel_multi_index(a, (2, 3, 2))
        assert np.array_equal(g[row], np.concatenate([c[0][a[0]], c[1][a[1]], c[2][a[2]]]))
    with pytest.raises(ValueError, match="non-empty sequence"):
        grid([])
    with pytest.raises(ValueError, match=r"centers\[1\] must be a 2-D array"):
        grid([c[0], np.zeros(3)])


def test_exact_weights_counts_intersections() -> None:
    l1 = np.array([0, 0, 1, 1, 1, 2])
    l2 = np.array([1, 0, 1, 1, 0, 1])
    w = exact_weights([l1, l2], [3, 2])
    expected = np.zeros((3, 2))
    for a, b in zip(l1, l2):
        expected[a, b] += 1
    assert np.array_equal(w, expected) and w.sum() == 6
    with pytest.raises(ValueError, match=r"labels\[1\] must have 6 entries"):
        exact_weights([l1, l2[:5]], [3, 2])
    with pytest.raises(ValueError, match=r"labels\[0\] must lie in \[0, 1\]"):
        exact_weights([l1, l2], [2, 2])
    with pytest.raises(ValueError, match="kprimes must have one entry per party"):
        exact_weights([l1, l2], [3])


# --------------------------------------------------------------------------------------------
# party side: data validation and messages
# --------------------------------------------------------------------------------------------


def _budget(cfg: VerticalKMeansConfig, n: float = 600.0, parties: int = 2) -> BudgetSplit:
    return budget_for(cfg, n, parties)


@pytest.mark.parametrize(
    "block, ids, match",
    [
        (np.full((5, 2), np.nan), np.arange(5), "block must be finite"),
        (np.full((5, 2), 1.5), np.arange(5), r"block must lie in the domain \[-1, 1\], got 10 value"),
        (np.zeros((5, 2)), np.arange(4), r"ids must have one entry per row of block \(5\)"),
        (np.zeros((5, 2)), np.array([0, 1, 2, 3, 3]), "ids must be unique"),
        (np.zeros(5), np.arange(5), "block must be a 2-D array"),
    ],
)
def test_party_encode_validates_data(block: np.ndarray, ids: np.ndarray, match: str) -> None:
    cfg = VerticalKMeansConfig(method="ind-lap")
    with pytest.raises(ValueError, match=match):
        party_encode(block, ids, 0, cfg, 2, _budget(cfg), None, seed=0)


def test_vertical_data_validation() -> None:
    with pytest.raises(ValueError, match="parties must be >= 2"):
        load_vertical("mixed-gaussian", 1, n=100)
    ids = np.arange(4)
    with pytest.raises(ValueError, match=r"blocks\[1\] must have 4 rows"):
        VerticalData((np.zeros((4, 1)), np.zeros((3, 1))), ids, None, "t")
    with pytest.raises(ValueError, match="must be finite"):
        VerticalData((np.zeros((4, 1)), np.full((4, 1), np.nan)), ids, None, "t")
    with pytest.raises(ValueError, match=r"must lie in the domain \[-1, 1\]"):
        VerticalData((np.zeros((4, 1)), np.full((4, 1), -2.0)), ids, None, "t")
    with pytest.raises(ValueError, match="parties must be >= 2, got 1"):  # a vertical run needs two parties
        RunConfig.from_mapping({"task": "vertical-kmeans", "parties": 1, "sketch-repetitions": 16})


def test_sketch_methods_need_the_key_and_others_ignore_it(data2: VerticalData) -> None:
    cfg = VerticalKMeansConfig(M=32)
    with pytest.raises(TypeError, match="key must be the parties' shared HashKey"):
        party_encode(data2.blocks[0], data2.ids, 0, cfg, 3, _budget(cfg), None, seed=0)
    msg = party_encode(data2.blocks[0], data2.ids, 0, cfg, 3, _budget(cfg), KEY, seed=0)
    assert msg.sketch.shape == (32, msg.k) and msg.sketch.dtype == np.uint8
    cfg_ind = VerticalKMeansConfig(method="ind-lap")
    msg = party_encode(data2.blocks[0], data2.ids, 0, cfg_ind, 3, _budget(cfg_ind), None, seed=0)
    assert msg.histogram.shape == (msg.k,) and msg.sketch is None


@pytest.mark.parametrize("method", ["dpfmps-2pest", "ind-lap", "ldp-agg-2pest"])
def test_party_encode_draws_from_a_nodes_randomness(data2: VerticalData, method: str) -> None:
    """``randomness=KeyedRandomness(s)`` at step 0 is ``seed=s`` bit for bit (the simulation); a node's secret
    randomness (ChaCha20) releases other noise, keyed by its secret and the step."""
    cfg = VerticalKMeansConfig(method=method, M=32)
    args = (data2.blocks[1], data2.ids, 1, cfg, 3, _budget(cfg), KEY)
    seeded = party_encode(*args, seed=7).to_arrays()
    keyed = party_encode(*args, randomness=KeyedRandomness(7)).to_arrays()
    assert seeded.keys() == keyed.keys()
    for name in seeded:
        np.testing.assert_array_equal(keyed[name], seeded[name])
    secret = bytes(range(32))
    own = party_encode(*args, randomness=SecretRandomness(secret), step=2).to_arrays()
    assert not np.array_equal(own["centers"], seeded["centers"])
    again = party_encode(*args, randomness=SecretRandomness(secret), step=2).to_arrays()
    other_step = party_encode(*args, randomness=SecretRandomness(secret), step=3).to_arrays()
    np.testing.assert_array_equal(again["centers"], own["centers"])
    assert not np.array_equal(other_step["centers"], own["centers"])
    assert np.array_equal(vk.party_stream(KeyedRandomness(7), 1, "x").random(4), party_rng(7, 1, "x").random(4))


@pytest.mark.parametrize("kwargs", [{}, {"seed": 1, "randomness": KeyedRandomness(1)}])
def test_party_encode_takes_exactly_one_source_of_randomness(data2: VerticalData, kwargs: dict) -> None:
    cfg = VerticalKMeansConfig(method="ind-lap")
    with pytest.raises(TypeError, match="exactly one of seed .* and randomness"):
        party_encode(data2.blocks[0], data2.ids, 0, cfg, 3, _budget(cfg), None, **kwargs)


def test_labels_are_sent_in_id_order(data2: VerticalData) -> None:
    cfg = VerticalKMeansConfig(method="vfl-kmeans")
    block, ids = data2.blocks[0], data2.ids
    msg = party_encode(block, ids, 0, cfg, 5, _budget(cfg), None, seed=1)
    perm = np.random.default_rng(0).permutation(ids.size)
    shuffled = party_encode(block[perm], ids[perm] + 1000, 0, cfg, 5, _budget(cfg), None, seed=1)
    # data2's ids are 0..n−1 in row order: sorted by id, the shuffled party's labels are in block's row order
    assert np.array_equal(ids, np.arange(ids.size))
    assert np.array_equal(vk.assign(block, shuffled.centers), shuffled.labels)
    assert np.array_equal(vk.assign(block, msg.centers), msg.labels)


@pytest.mark.parametrize("method", ["dpfmps-2pest", "ind-lap", "ldp-agg-2pest", "vfl-kmeans"])
def test_message_array_round_trip(data2: VerticalData, method: str) -> None:
    cfg = VerticalKMeansConfig(method=method, M=32)
    msg = party_encode(data2.blocks[1], data2.ids, 1, cfg, 3, _budget(cfg), KEY, seed=2)
    arrays = msg.to_arrays()
    assert all(isinstance(v, np.ndarray) for v in arrays.values())
    back = PartyMessage.from_arrays(1, arrays)
    for name in ("centers", "sketch", "histogram", "labels"):
        a, b = getattr(msg, name), getattr(back, name)
        assert (a is None and b is None) or (np.array_equal(a, b) and a.dtype == b.dtype)
    if msg.reports is not None:
        for name in ("ids", "values", "oracle", "k", "epsilon", "g"):
            assert np.array_equal(getattr(msg.reports, name), getattr(back.reports, name))


def test_message_round_trip_with_olh_reports() -> None:
    from fedpriv.clustering.baselines import ldp_agg_reports

    labels = np.arange(40) % 20
    reports = ldp_agg_reports(labels, 20, 0.1, np.random.default_rng(0), ids=np.arange(40))
    assert reports.oracle == "olh"  # k − 2 = 18 ≥ 3e^0.1
    msg = PartyMessage(0, np.zeros((20, 1)), reports=reports)
    back = PartyMessage.from_arrays(0, msg.to_arrays())
    assert np.array_equal(back.reports.hash_keys, reports.hash_keys) and back.reports.g == reports.g


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(centers=np.zeros(3)), "centers must be a 2-D array"),
        (dict(centers=np.zeros((2, 1)), sketch=np.zeros((4, 3), dtype=np.uint8)), r"sketch must be .*\(M, 2\)"),
        (dict(centers=np.zeros((2, 1)), sketch=np.zeros((4, 2))), "sketch must be an unsigned-integer"),
        (dict(centers=np.zeros((2, 1)), histogram=np.zeros(3)), r"histogram must have shape \(2,\)"),
        (dict(centers=np.zeros((2, 1)), labels=np.array([0, 2])), r"labels must lie in \[0, 1\]"),
        (dict(centers=np.zeros((2, 1)), party=-1), "party must be >= 0"),
    ],
)
def test_party_message_rejects(kwargs: dict, match: str) -> None:
    kwargs = dict(party=0) | kwargs
    with pytest.raises(ValueError, match=match):
        PartyMessage(**kwargs)
    with pytest.raises(ValueError, match="arrays must hold 'centers'"):
        PartyMessage.from_arrays(0, {"centers": np.zeros((1, 1)), "key": np.zeros(1)})


# --------------------------------------------------------------------------------------------
# the secret key never reaches the server (§19 item 12)
# --------------------------------------------------------------------------------------------


def test_evaluate_needs_true_weights_beside_weights(data2: VerticalData) -> None:
    cfg = VerticalKMeansConfig(method="dpfmps-2pest")
    centers = data2.x[:cfg.k]
    with pytest.raises(ValueError, match="true_weights must be given with weights"):
        vk.evaluate(data2, cfg, centers, seed=0, weights=np.ones(4))


SERVER_FUNCTIONS = (vk.server_weights, vk.server_centers, vk.server_kprime, vk.budget_for, vk.count_party,
                    vk.grid, vk.exact_weights, vk.sketch_params, vk.server_rng)


@pytest.mark.parametrize("fn", SERVER_FUNCTIONS, ids=lambda f: f.__name__)
def test_server_functions_take_no_hash_key(fn) -> None:
    sig = inspect.signature(fn)
    for p in sig.parameters.values():
        assert "key" not in p.name.lower()
        assert "HashKey" not in str(p.annotation)


@pytest.mark.parametrize("method", SKETCH_METHODS)
def test_messages_hold_no_key_bytes(data2: VerticalData, method: str) -> None:
    cfg = VerticalKMeansConfig(method=method, M=64)
    msg = party_encode(data2.blocks[0], data2.ids, 0, cfg, 3, _budget(cfg), KEY, seed=4)
    secrets = [SECRET, KEY._derive("prf-aes256", 32), KEY._derive("datasketch-hash", 32)]
    for value in vars(msg).values():
        assert not isinstance(value, HashKey)
    planted = np.frombuffer(b"xx" + SECRET + b"yy", dtype=np.uint8)  # control: the scan finds planted key bytes
    assert SECRET[:16] in planted.tobytes()
    for name, arr in msg.to_arrays().items():
        raw = arr.tobytes()
        for secret in secrets:
            for half in (secret[:16], secret[16:]):  # any 16-byte window of the key material
                assert half not in raw, f"key bytes found in message array {name!r}"


# --------------------------------------------------------------------------------------------
# run: determinism, privacy ledger, reference cost
# --------------------------------------------------------------------------------------------


def _run(method: str = "dpfmps-2pest", repetitions: int = 1, seed: int = 3, **values):
    """The workload's run in process on ``data2`` (data seed 3) unless ``seed`` says otherwise: every commit."""
    setup = WORKLOAD.setup(RunConfig.from_mapping({"task": "vertical-kmeans", "kmeans-samples": 600, "seed": seed,
                                                   "kmeans-method": method, "repetitions": repetitions, **values}))
    commits, outcome = run_commits(setup)
    assert outcome.error is None
    return commits


def test_the_runs_data_are_data2(data2: VerticalData) -> None:
    setup = WORKLOAD.setup(RunConfig.from_mapping({"task": "vertical-kmeans", "kmeans-samples": 600, "seed": 3}))
    assert all(np.array_equal(a, b) for a, b in zip(setup.data.blocks, data2.blocks, strict=True))


def test_same_seed_and_key_give_identical_centers() -> None:
    values = {"sketch-repetitions": 64, "epsilon": 4.0, "repetitions": 2}
    a, b = _run(**values), _run(**values)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.arrays["centers"], y.arrays["centers"])
        assert x.record["relative-error"] == y.record["relative-error"]  # the same weights
    assert not np.array_equal(a[0].arrays["centers"], a[1].arrays["centers"])  # repetition 2: seed 4


@pytest.mark.parametrize("method", METHODS)
def test_privacy_ledger(method: str) -> None:
    (commit,) = _run(method, **{"sketch-repetitions": 32, "epsilon": 2.0})
    p = commit.state["privacy"]
    assert p["private"] is vk.TRAITS[method].private
    if p["private"]:  # §10: the run spends exactly its budget, never more (§19 item 11)
        assert p["within_budget"] and not p["non_private"]
        assert p["epsilon"] == pytest.approx(2.0, rel=1e-12)
        assert p["delta"] <= p["budget"]["delta"] * (1 + 1e-12)
    else:
        assert not p["within_budget"] and p["epsilon"] == math.inf and p["non_private"]
    if method in SKETCH_METHODS:
        assert p["delta"] == pytest.approx(1.0 / commit.record["n-hat"])  # δ = 1/n̂
        assert p["hash_backend"] == "prf"
    names = [r["name"] for r in p["releases"]]
    assert ("n_hat" in names) is vk.TRAITS[method].counts


def test_central_reference_cost_is_cached_and_matches_central_kmeans(data2: VerticalData) -> None:
    ref = vk.central_reference_cost(data2, 5, seed=9)
    assert vk.central_reference_cost(data2, 5, seed=9) == ref
    (commit,) = _run("central-kmeans", repetitions=7)[-1:]  # repetition 7 runs with seed 3 + 7 − 1 = 9
    assert commit.record["seed"] == 9 and commit.record["cost-ratio"] == pytest.approx(1.0)
    assert commit.arrays["centers"].shape == (5, 8)


def test_datasketch_runs_are_marked() -> None:
    (commit,) = _run(**{"sketch-repetitions": 16, "hash-backend": "datasketch", "epsilon": 4.0})
    assert commit.state["privacy"]["hash_backend"] == "datasketch"
    assert any(c.startswith("A9") for c in commit.state["privacy"]["caveats"])
    assert _run(**{"sketch-repetitions": 16})[0].state["privacy"]["caveats"] == []
