"""VFL-SGDMF (docs/federated_mf.md §4): equals the central algorithm at s = 1, stays in C_R, accounts right."""

from __future__ import annotations

import numpy as np
import pytest

import fedpriv.mf.vfl as vfl
from fedpriv.accounting import rdp
from fedpriv.accounting.parties import PartyAccount, global_epsilon
from fedpriv.data.rating_partition import train_test_split, vertical_partition
from fedpriv.data.ratings import Ratings, synthetic_ratings
from fedpriv.mf.central import run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set
from fedpriv.mf.fmf import init_shared
from fedpriv.mf.vfl import make_vfl_party, run_vfl
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness


@pytest.fixture(scope="module")
def split():
    r = synthetic_ratings(n_users=80, n_items=60, rank=3, density=0.25, noise_std=0.3, seed=11)
    return train_test_split(r, seed=11)


def _cfg(**kw):
    base = {"rank": 4, "rounds": 4, "local_steps": 5, "sampling_rate": 0.2, "step_size": 0.003, "epsilon": 2.0}
    return MfConfig(**{**base, **kw})


def _all_items(split):
    return [np.arange(split.train.n_items)]


@pytest.mark.parametrize("notion", ["per-rating", "per-user"])
@pytest.mark.parametrize("clip", ["embedding", "gradient"])
def test_vfl_with_one_party_equals_central_dp_bit_for_bit(split, notion, clip):
    cfg = _cfg(notion=notion, clip=clip, finetune_steps=3, theta=4 if notion == "per-user" else None)
    a = run_vfl(split, _all_items(split), cfg, seed=5)
    b = run_central(split, cfg.replace(algorithm="central-dp"), seed=5)
    assert a.test_mse == b.test_mse and a.train_mse == b.train_mse
    assert a.test_mse_before_finetune == b.test_mse_before_finetune
    assert [r.test_mse for r in a.rounds] == [r.test_mse for r in b.rounds]
    assert [r.epsilon for r in a.rounds] == [r.epsilon for r in b.rounds]
    assert a.epsilon == b.epsilon and a.noise_multiplier == b.noise_multiplier


def test_every_step_keeps_the_embeddings_in_the_constraint_set(split, record_outputs):
    outputs = record_outputs(vfl, "noisy_step")
    cfg = _cfg(parties=2, epsilon=0.5, step_size=0.1, finetune_steps=2)  # large noise and steps
    groups = vertical_partition(split.train, 2, seed=1)
    run_vfl(split, groups, cfg, seed=1)
    assert len(outputs) == 2 * (2 * 4 * 5 + 2)  # two blocks per Stage-2 step, one per Stage-3 step, 2 parties
    assert all(in_constraint_set(M, split.train.r_max) for M in outputs)
    # the same steps without Π (gradient clipping) leave C_R: the check above can fail
    outputs.clear()
    run_vfl(split, groups, cfg.replace(clip="gradient"), seed=1)
    assert not all(in_constraint_set(M, split.train.r_max) for M in outputs)


def test_same_seed_same_result_other_seed_other_result(split):
    groups = vertical_partition(split.train, 3, seed=0)
    cfg = _cfg(parties=3)
    a, b, c = (run_vfl(split, groups, cfg, seed=s) for s in (2, 2, 3))
    assert a.test_mse == b.test_mse and [r.test_mse for r in a.rounds] == [r.test_mse for r in b.rounds]
    assert a.test_mse != c.test_mse


@pytest.mark.parametrize("notion, rule", [("per-rating", "max"), ("per-user", "rdp-sum")])
def test_reported_epsilon_is_the_accountants_and_within_target(split, notion, rule):
    cfg = _cfg(parties=2, notion=notion, finetune_steps=4, epsilon=3.0)
    res = run_vfl(split, vertical_partition(split.train, 2, seed=0), cfg, seed=0)
    steps = cfg.total_rounds * cfg.local_steps + cfg.finetune_steps
    z = rdp.calibrate(3.0, cfg.delta, cfg.sampling_rate, steps)
    assert res.noise_multiplier == z
    per_party = rdp.epsilon(cfg.sampling_rate, z, steps, cfg.delta)
    assert res.party_epsilons == [per_party, per_party] and per_party <= 3.0
    acc = PartyAccount(cfg.sampling_rate, z, steps)
    assert res.epsilon == global_epsilon([acc, acc], cfg.delta, rule=rule)
    if notion == "per-user":
        assert res.source_epsilon == pytest.approx(np.sqrt(2) * per_party, rel=1e-12)
    else:
        assert res.epsilon == per_party and res.source_epsilon is None


def test_per_user_trimming_bounds_every_batch(split, monkeypatch):
    batches = []
    real = vfl.gradient_sums

    def spy(U, V, users, items, values, **kw):
        batches.append(np.asarray(users))
        return real(U, V, users, items, values, **kw)

    monkeypatch.setattr(vfl, "gradient_sums", spy)
    theta = 3
    cfg = _cfg(parties=2, notion="per-user", theta=theta, sampling_rate=0.5)
    run_vfl(split, vertical_partition(split.train, 2, seed=0), cfg, seed=0)
    assert batches and max(np.bincount(b).max(initial=0) for b in batches) <= theta
    # without trimming some user has more than θ ratings at a party in a batch: the check can fail
    batches.clear()
    run_vfl(split, vertical_partition(split.train, 2, seed=0), cfg.replace(notion="per-rating", theta=None), seed=0)
    assert max(np.bincount(b).max(initial=0) for b in batches) > theta


@pytest.mark.parametrize("algorithm", ["sgdmf", "local-only"])
def test_state_dict_round_trip_continues_bit_identically(split, algorithm):
    cfg = _cfg(parties=2, algorithm=algorithm, finetune_steps=2)
    items = vertical_partition(split.train, 2, seed=0)[1]
    shared = init_shared(cfg, split.train.n_users, split.train.r_max, 9)
    a = make_vfl_party(split, items, 1, cfg, 9)
    a.setup(shared)
    for t in (1, 2):
        a.train_round(shared, t)
    b = make_vfl_party(split, items, 1, cfg, 9)
    b.load_state_dict(a.state_dict())
    for t in (3, 4):
        np.testing.assert_array_equal(a.train_round(shared, t), b.train_round(shared, t))
    a.finetune(shared)
    b.finetune(shared)
    np.testing.assert_array_equal(a.V, b.V)
    assert a.test_error(shared) == b.test_error(shared) and a.account() == b.account()


def test_a_party_draws_from_its_nodes_randomness(split):
    """KeyedRandomness(s) gives the seed's bits (trimming, V_{F_k}, sampling, noise); a secret node randomness
    (ChaCha20) other ones, the same again for the same secret (a deployed party rebuilt per message)."""
    cfg = _cfg(parties=2, notion="per-user", finetune_steps=1)
    items = vertical_partition(split.train, 2, seed=0)[0]
    shared = init_shared(cfg, split.train.n_users, split.train.r_max, 9)

    def copies(source):
        party = make_vfl_party(split, items, 0, cfg, source)
        party.setup(shared)
        return party.V.copy(), party.train_round(shared, 1), party.train_round(shared, 2)

    seeded, keyed = copies(9), copies(KeyedRandomness(9))
    for a, b in zip(seeded, keyed, strict=True):
        np.testing.assert_array_equal(a, b)
    secret = bytes(range(32))
    own, again = copies(SecretRandomness(secret)), copies(SecretRandomness(secret))
    for a, b, c in zip(own, again, seeded, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    assert not np.array_equal(copies(SecretRandomness())[1], own[1])
    with pytest.raises(TypeError, match="seed must be a run seed"):
        make_vfl_party(split, items, 0, cfg, "9")


def test_non_private_fmf_beats_predicting_the_mean():
    r = synthetic_ratings(n_users=200, n_items=120, rank=3, density=0.2, noise_std=0.3, seed=3)
    split = train_test_split(r, seed=3)
    mean_mse = float(np.mean((split.test.values - split.train.values.mean()) ** 2))
    cfg = MfConfig(algorithm="fmf", epsilon=None, rank=3, parties=2, rounds=40, local_steps=10,
                   sampling_rate=0.1, step_size=0.003)
    res = run_vfl(split, vertical_partition(split.train, 2, seed=3), cfg, seed=3)
    assert res.epsilon is None and res.rounds[-1].epsilon is None
    assert res.test_mse < 0.5 * mean_mse
    assert res.rounds[-1].test_mse < res.rounds[0].test_mse


def test_local_only_never_synchronises(split):
    groups = vertical_partition(split.train, 2, seed=0)
    cfg = _cfg(parties=2, algorithm="local-only")
    parties = [make_vfl_party(split, g, k, cfg, 0) for k, g in enumerate(groups)]
    shared = init_shared(cfg, split.train.n_users, split.train.r_max, 0)
    for p in parties:
        p.setup(shared)
    junk = np.zeros_like(shared)  # whatever the server sends is ignored
    copies = [p.train_round(junk, 1) for p in parties]
    assert not np.array_equal(copies[0], copies[1])
    assert parties[0].test_error(junk) == parties[0].test_error(shared)
    res = run_vfl(split, groups, cfg, seed=0)
    assert res.epsilon == run_vfl(split, groups, cfg.replace(algorithm="sgdmf"), seed=0).epsilon


def _groups_error(split, groups, match, exc=ValueError):
    with pytest.raises(exc, match=match):
        run_vfl(split, groups, _cfg(parties=max(len(groups), 1)), seed=0)


def test_bad_groups_and_configs_raise(split):
    m = split.train.n_items
    _groups_error(split, [np.arange(m), np.zeros(0, dtype=np.int64)], r"groups\[1\] must be a non-empty")
    _groups_error(split, [np.arange(m), np.array([0])], "must partition")
    _groups_error(split, [np.arange(m - 1)], "must partition")
    _groups_error(split, [np.arange(m, dtype=float)], "integer", TypeError)
    with pytest.raises(ValueError, match="setting must be 'vfl'"):
        run_vfl(split, _all_items(split), MfConfig(setting="hfl", notion="per-user"), seed=0)
    with pytest.raises(ValueError, match="items must be sorted"):
        make_vfl_party(split, np.array([3, 1]), 0, _cfg(), 0)
    party = make_vfl_party(split, np.arange(m), 0, _cfg(), 0)
    with pytest.raises(RuntimeError, match="must be set up"):
        party.train_round(np.zeros((split.train.n_users, 4)), 1)
    party.setup(init_shared(_cfg(), split.train.n_users, 5.0, 0))
    with pytest.raises(ValueError, match="shared must be the user embedding"):
        party.train_round(np.zeros((3, 4)), 1)
    with pytest.raises(RuntimeError, match="must finish the 4 Stage-2 rounds"):
        party.finetune(party.U)


def test_a_party_without_training_ratings_raises():
    r = Ratings(users=np.array([0, 1, 1]), items=np.array([0, 0, 1]), values=np.array([1.0, 2.0, 3.0]),
                n_users=2, n_items=3, r_min=0.0, r_max=5.0)
    split = train_test_split(r, test_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="must hold at least one training rating"):
        make_vfl_party(split, np.array([2]), 1, _cfg(), 0)


def test_ratings_outside_the_declared_range_raise():
    with pytest.raises(ValueError, match="declared range"):
        Ratings(users=np.array([0]), items=np.array([0]), values=np.array([6.0]), n_users=1, n_items=1,
                r_min=0.0, r_max=5.0)


def test_step_weights_and_noise_follow_eq_4_4(split, monkeypatch):
    calls = []
    real = vfl.noisy_step

    def spy(M, G, **kw):
        calls.append((M.shape[0], kw["weight"], kw["sigma"], kw["normaliser"]))
        return real(M, G, **kw)

    monkeypatch.setattr(vfl, "noisy_step", spy)
    cfg = _cfg(parties=2, rounds=1, local_steps=1, finetune_steps=1, epsilon=1.0)
    groups = vertical_partition(split.train, 2, seed=0)
    party = make_vfl_party(split, groups[0], 0, cfg, 0)
    shared = init_shared(cfg, split.train.n_users, split.train.r_max, 0)
    party.setup(shared)
    party.train_round(shared, 1)
    party.finetune(shared)
    n, m, m_k, R = split.train.n_users, split.train.n_items, groups[0].size, split.train.r_max
    z = party.plan.z
    n_k = int(np.isin(split.train.items, groups[0]).sum())
    L = cfg.sampling_rate * n_k  # §3.5, A5
    joint, item = z * 2 * np.sqrt(2) * R**1.5, z * 2 * R**1.5  # §3.6
    assert calls[0] == (n, 1.0, pytest.approx(joint, rel=1e-12), pytest.approx(L, rel=1e-12))
    assert calls[1] == (m_k, m_k / m, pytest.approx(joint, rel=1e-12), pytest.approx(L, rel=1e-12))
    assert calls[2] == (m_k, m_k / m, pytest.approx(item, rel=1e-12), pytest.approx(L, rel=1e-12))
    assert len(calls) == 3 and party.weight == m_k
