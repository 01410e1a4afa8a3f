"""HFL-SGDMF (docs/federated_mf.md §5) and its baselines: stage contracts, accounting, determinism, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fedpriv.mf.hfl as hfl
from fedpriv.accounting.rdp import calibrate, epsilon
from fedpriv.data.rating_partition import horizontal_partition, train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set, init_embeddings, squared_error_sum
from fedpriv.mf.fmf import init_shared
from fedpriv.mf.hfl import (
    effective_config,
    local_step,
    make_hfl_party,
    noise_multiplier,
    pretrain_users,
    run_hfl,
)
from fedpriv.mf.result import pooled_mse
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rng import stream

SEED = 3
PARTIES = 3


@pytest.fixture(scope="module")
def split():
    r = synthetic_ratings(n_users=90, n_items=60, rank=3, density=0.25, noise_std=0.3, seed=11)
    return train_test_split(r, seed=5)


@pytest.fixture(scope="module")
def groups(split):
    return horizontal_partition(split.train, PARTIES, seed=7)


def config(**kw) -> MfConfig:
    base = dict(setting="hfl", algorithm="sgdmf", notion="per-user", epsilon=2.0, parties=PARTIES, rank=4,
                rounds=4, local_steps=5, sampling_rate=0.2, theta=5, pretrain_steps=60, pretrain_rate=0.05,
                local_finetune_steps=40)
    base.update(kw)
    return MfConfig(**base)


def shared0(split, cfg: MfConfig) -> np.ndarray:
    return init_shared(cfg, split.train.n_items, split.train.r_max, SEED)


def party(split, groups, cfg: MfConfig, k: int = 0):
    p = make_hfl_party(split, groups[k], k, cfg, SEED)
    return p


def test_u_fixed_during_stage2_and_moving_in_train_both(split, groups):
    cfg = config()
    V0 = shared0(split, cfg)
    p = party(split, groups, cfg)
    p.setup(V0)
    U = p.U.copy()
    p.train_round(V0, 1)
    assert np.array_equal(p.U, U)  # §5.2: U_{U_k} fixed in Stage 2
    both = party(split, groups, config(algorithm="train-both"))
    both.setup(V0)
    U = both.U.copy()
    both.train_round(V0, 1)
    assert not np.array_equal(both.U, U)  # train-both updates U in the same steps (§5.3)


@pytest.mark.parametrize("algorithm", ["sgdmf", "train-both", "fmf"])
def test_v_copy_in_constraint_set_after_every_step(split, groups, record_outputs, algorithm):
    outputs = record_outputs(hfl, "noisy_step")
    cfg = config(algorithm=algorithm, epsilon=0.5 if algorithm != "fmf" else None)
    p = party(split, groups, cfg, 1)
    V = shared0(split, cfg)
    p.setup(V)
    for t in (1, 2):
        V = p.train_round(V, t)
    assert len(outputs) == 2 * cfg.local_steps
    assert all(in_constraint_set(out, split.train.r_max) for out in outputs)
    assert in_constraint_set(p.U, split.train.r_max)


def test_trimming_only_in_stage2(split, groups, monkeypatch):
    cfg = config()
    p = party(split, groups, cfg, 2)
    theta = cfg.trimming
    assert p.stage2.user_counts().max() <= theta < p.train.user_counts().max()
    calls = []
    original = hfl.gradient_sums

    def recording(U, V, users, items, values, **kwargs):
        calls.append(np.asarray(users).copy())
        return original(U, V, users, items, values, **kwargs)

    monkeypatch.setattr(hfl, "gradient_sums", recording)
    V0 = shared0(split, cfg)
    p.setup(V0)
    # Stage 1 pre-trains on the untrimmed data (§3.3): same U as pre-training on p.train
    U_init = init_embeddings(p.n_users, cfg.rank, p.R, stream(SEED, 0, 2, "mf-init-local"))
    expected = pretrain_users(U_init, V0, p.train, cfg.pretrain_rate, cfg.pretrain_steps, p.R)
    on_trimmed = pretrain_users(U_init, V0, p.stage2, cfg.pretrain_rate, cfg.pretrain_steps, p.R)
    assert np.array_equal(p.U, expected) and not np.allclose(p.U, on_trimmed)
    V = V0
    for t in range(1, cfg.total_rounds + 1):
        V = p.train_round(V, t)
    stage2_calls = list(calls)
    assert len(stage2_calls) == cfg.total_rounds * cfg.local_steps
    assert sum(c.size for c in stage2_calls) > 0
    assert all(np.bincount(c, minlength=p.n_users).max(initial=0) <= theta for c in stage2_calls)
    calls.clear()
    p.finetune(V)
    assert len(calls) == cfg.local_finetune_steps
    assert all(c.size == len(p.train) > len(p.stage2) for c in calls)  # Stage 3: untrimmed


def test_aggregation_weights_are_user_counts(split, groups):
    cfg = config(rounds=1)
    parties = [party(split, groups, cfg, k) for k in range(PARTIES)]
    assert [p.weight for p in parties] == [float(g.size) for g in groups]
    V0 = shared0(split, cfg)
    for p in parties:
        p.setup(V0)
    copies = [p.train_round(V0, 1) for p in parties]
    n = sum(g.size for g in groups)
    V = sum((g.size / n) * c for g, c in zip(groups, copies, strict=True))  # §2.4: V ← Σ (n_k/n) V^(k)
    expected = pooled_mse([p.test_error(V) for p in parties])
    result = run_hfl(split, groups, cfg, SEED)
    assert result.rounds[0].test_mse == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("algorithm", ["sgdmf", "synsgd", "train-both"])
def test_epsilon_accounts_tt_prime_steps_and_max_over_parties(split, groups, algorithm):
    cfg = config(algorithm=algorithm)
    steps = cfg.total_rounds * cfg.local_steps
    z = calibrate(cfg.epsilon, cfg.delta, cfg.sampling_rate, steps)
    assert noise_multiplier(cfg) == z
    result = run_hfl(split, groups, cfg, SEED)
    eps = epsilon(cfg.sampling_rate, z, steps, cfg.delta)
    assert result.noise_multiplier == z
    assert result.epsilon == pytest.approx(eps, rel=1e-12)
    assert result.epsilon <= cfg.epsilon and result.epsilon > 0.99 * cfg.epsilon
    assert result.party_epsilons == pytest.approx([eps] * PARTIES, rel=1e-12)
    assert result.epsilon == max(result.party_epsilons)
    assert result.rounds[-1].epsilon == pytest.approx(eps, rel=1e-12)
    parties = result.info["parties"]
    assert [d["sensitivity"] for d in parties] == pytest.approx([cfg.trimming * 2 * 5.0**1.5] * PARTIES)


def test_epsilon_grows_with_rounds_and_source_mode(split, groups):
    cfg = config()
    result = run_hfl(split, groups, cfg, SEED)
    per_round = [rec.epsilon for rec in result.rounds]
    z = result.noise_multiplier
    expected = [epsilon(cfg.sampling_rate, z, t * cfg.local_steps, cfg.delta) for t in range(1, cfg.total_rounds + 1)]
    assert per_round == pytest.approx(expected, rel=1e-12)
    assert all(a < b for a, b in zip(per_round, per_round[1:]))


def test_same_seed_identical_and_other_seed_differs(split, groups):
    cfg = config(algorithm="train-both")
    a = run_hfl(split, groups, cfg, SEED)
    b = run_hfl(split, groups, cfg, SEED)
    c = run_hfl(split, groups, cfg, SEED + 1)
    assert [r.test_mse for r in a.rounds] == [r.test_mse for r in b.rounds]
    assert (a.test_mse, a.test_mse_before_finetune, a.train_mse) == (b.test_mse, b.test_mse_before_finetune,
                                                                    b.train_mse)
    assert a.test_mse_before_finetune != c.test_mse_before_finetune


@pytest.mark.parametrize("algorithm", ["sgdmf", "train-both", "local"])
def test_state_dict_round_trip_continues_bit_identically(split, groups, algorithm):
    cfg = config(algorithm=algorithm, epsilon=None if algorithm == "local" else 2.0)
    V0 = shared0(split, cfg)
    p1 = party(split, groups, cfg, 1)
    p1.setup(V0)
    V1 = p1.train_round(V0, 1)
    p2 = party(split, groups, cfg, 1)
    p2.load_state_dict(p1.state_dict())
    assert np.array_equal(p1.train_round(V1, 2), p2.train_round(V1, 2))
    assert p1.account() == p2.account()
    p1.finetune(V1)
    p2.finetune(V1)
    assert np.array_equal(p1.U, p2.U) and np.array_equal(p1.V, p2.V)
    assert p1.test_error(V1) == p2.test_error(V1)


def test_a_party_draws_from_its_nodes_randomness(split, groups):
    """KeyedRandomness(SEED) is SEED bit for bit (trimming, U init, sampling, noise); a secret one differs and is
    reproducible from its secret."""
    cfg = config()
    V0 = shared0(split, cfg)

    def run(source):
        p = hfl.make_hfl_party(split, groups[1], 1, cfg, source)
        p.setup(V0)
        return p.U.copy(), p.train_round(V0, 1)

    seeded, keyed = run(SEED), run(KeyedRandomness(SEED))
    for a, b in zip(seeded, keyed, strict=True):
        np.testing.assert_array_equal(a, b)
    secret = bytes(range(1, 33))
    own, again = run(SecretRandomness(secret)), run(SecretRandomness(secret))
    for a, b, c in zip(own, again, seeded, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_a21_warning_for_per_rating_paper(split, groups):
    with pytest.warns(UserWarning, match="A21"):
        p = party(split, groups, config(notion="per-rating-paper", theta=None))
    assert p.delta_sens == pytest.approx(2 * 5.0**1.5)  # the source's per-rating Δ, no θ
    assert p.stage2 is p.train  # no trimming without the per-user notion
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        party(split, groups, config())


def test_pretraining_lowers_training_error_with_v0_fixed(split, groups):
    cfg = config()
    V0 = shared0(split, cfg)
    p = party(split, groups, cfg)
    U_init = init_embeddings(p.n_users, cfg.rank, p.R, stream(SEED, 0, 0, "mf-init-local"))
    before, _ = squared_error_sum(U_init, V0, p.train)
    p.setup(V0)
    after, _ = p.train_error(V0)
    assert after < before
    assert np.array_equal(p.V, V0)  # V is not updated in Stage 1


def test_pretrain_users_equals_iterated_local_step(split, groups):
    cfg = config()
    p = party(split, groups, cfg)
    V0 = shared0(split, cfg)
    U = init_embeddings(p.n_users, cfg.rank, p.R, stream(SEED, 0, 0, "mf-init-local"))
    fast = pretrain_users(U, V0, p.train, 0.05, 25, p.R, l2=0.1)
    slow = U
    for _ in range(25):
        slow, V = local_step(slow, V0, p.train, 0.05, p.R, update_v=False, l2=0.1)
        assert V is V0
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_finetuning_lowers_test_mse_and_uses_local_model(split, groups):
    cfg = config(epsilon=1.0)
    result = run_hfl(split, groups, cfg, SEED)
    assert result.test_mse < result.test_mse_before_finetune
    p = party(split, groups, cfg)
    V0 = shared0(split, cfg)
    p.setup(V0)
    V = p.train_round(V0, 1)
    p.finetune(V)
    own = squared_error_sum(p.U, p.V, p.test)
    assert p.test_error(V) == own == p.test_error(np.zeros_like(V))  # after Stage 3: the party's own V^(k)


def test_synsgd_schedule_and_exact_average(split, groups):
    cfg = config(algorithm="synsgd")
    eff = effective_config(cfg)
    assert (eff.total_rounds, eff.local_steps) == (cfg.total_rounds * cfg.local_steps, 1)
    assert effective_config(eff) == eff
    result = run_hfl(split, groups, cfg, SEED)
    assert len(result.rounds) == eff.total_rounds
    assert result.info["joint_u"] and not result.info["pretrain"]
    pre = run_hfl(split, groups, cfg.replace(pretrain_u=True), SEED)
    assert pre.info["pretrain"] and not pre.info["joint_u"]


def test_local_baseline_ignores_broadcast_and_is_non_private(split, groups):
    cfg = config(algorithm="local", epsilon=None)
    V0 = shared0(split, cfg)
    a, b = party(split, groups, cfg), party(split, groups, cfg)
    a.setup(V0)
    b.setup(V0)
    assert np.array_equal(a.train_round(V0, 1), b.train_round(np.zeros_like(V0), 1))
    assert a.account() is None
    result = run_hfl(split, groups, cfg, SEED)
    assert result.epsilon is None and result.test_mse == result.test_mse_before_finetune
    assert result.test_mse < result.rounds[0].test_mse


def test_fmf_is_non_private_without_stage3(split, groups):
    result = run_hfl(split, groups, config(algorithm="fmf", epsilon=None), SEED)
    assert result.epsilon is None and result.noise_multiplier is None
    assert result.test_mse == result.test_mse_before_finetune
    assert result.test_mse < result.rounds[0].test_mse


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"users": np.array([], dtype=np.int64)}, "non-empty"),
        ({"users": np.array([0, 1, 1])}, "distinct"),
        ({"users": np.array([0, 10_000])}, r"must lie in \[0, 90\)"),
        ({"config": MfConfig(setting="vfl", parties=PARTIES)}, "setting must be 'hfl'"),
        ({"config": MfConfig(setting="hfl", algorithm="central-sgd", epsilon=None)}, "run_central"),
        ({"k": -1}, "k must be >= 0"),
    ],
)
def test_make_party_errors(split, groups, kwargs, match):
    args = {"users": groups[0], "k": 0, "config": config(), **kwargs}
    with pytest.raises(ValueError, match=match):
        make_hfl_party(split, args["users"], args["k"], args["config"], SEED)


def test_run_and_party_protocol_errors(split, groups):
    cfg = config()
    with pytest.raises(ValueError, match="one user array per party"):
        run_hfl(split, groups[:2], cfg, SEED)
    with pytest.raises(ValueError, match="disjoint"):
        run_hfl(split, [groups[0], groups[0], groups[2]], cfg, SEED)
    p = party(split, groups, cfg)
    V0 = shared0(split, cfg)
    with pytest.raises(ValueError, match="setup"):
        p.train_round(V0, 1)
    p.setup(V0)
    with pytest.raises(ValueError, match="t must be 1"):
        p.train_round(V0, 2)
    with pytest.raises(ValueError, match="shared must have shape"):
        p.train_round(V0[:-1], 1)
    bad = np.array(V0)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="shared must be finite"):
        p.train_round(bad, 1)
    state = p.state_dict()
    state["U"] = state["U"][:-1]
    with pytest.raises(ValueError, match=r"state\['U'\] must have shape"):
        p.load_state_dict(state)
