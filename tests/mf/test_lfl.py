"""LFL-SGDMF in process (docs/federated_mf.md §6): device functions, the server step, accounting, baselines, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.accounting.distributed import calibrate_sigma, rdp_accountant_epsilon
from fedpriv.accounting.rdp import integer_order_epsilon
from fedpriv.data.rating_partition import RatingSplit, train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set, init_embeddings, project
from fedpriv.mf.gradients import gradient_sums
from fedpriv.mf.lfl import (
    ROUNDING_TOLERANCE,
    LflServer,
    lfl_codec,
    lfl_plan,
    lfl_roster,
    one_round_release,
    pretrain_users,
    round1_uploads,
    round2_uploads,
    run_lfl,
)
from fedpriv.mf.lfl_device import (
    device_errors,
    fit_users,
    init_users,
    item_gradient_signals,
)
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rng import stream
from fedpriv.secagg.base import AggregationResult
from fedpriv.secagg.noise import combine_rounds

R5 = 5.0
RATINGS = synthetic_ratings(n_users=30, n_items=25, rank=3, density=0.3, seed=4)
SPLIT = train_test_split(RATINGS, seed=0)
IDS = lfl_roster(SPLIT.train)


def lfl(**kw) -> MfConfig:
    """A small LFL configuration (p = 3, T = 3, short local fitting)."""
    base = {"setting": "lfl", "notion": "per-user", "epsilon": 1.0, "rank": 3, "rounds": 3, "pretrain_steps": 30,
            "local_finetune_steps": 10, "lfl_step_size": 3.0}
    return MfConfig(**{**base, **kw})


def batch_and_alone(fn, users=(0, 7, 29)):
    """``fn(ids)`` for every device and for each of ``users`` alone: row u of the first must equal the second."""
    full = fn(IDS)
    for u in users:
        np.testing.assert_array_equal(fn(np.array([u]))[0], full[np.searchsorted(IDS, u)])
    return full


# --------------------------------------------------------------------------- device functions


def test_roster_is_every_user_with_a_training_rating():
    assert np.array_equal(IDS, np.arange(RATINGS.n_users))  # A25: every user keeps a training rating
    r = RATINGS.select((RATINGS.users != 4) & (RATINGS.users != 17))
    assert np.array_equal(lfl_roster(r), np.setdiff1d(np.arange(30), [4, 17]))


def test_device_functions_are_bit_identical_alone_and_in_a_batch():
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    U0 = batch_and_alone(lambda ids: init_users(ids, 3, R5, seed=2))
    U = batch_and_alone(lambda ids: fit_users(U0[ids], V, SPLIT.train, ids, steps=20, rate=0.05, R=R5))
    batch_and_alone(lambda ids: item_gradient_signals(U[ids], V, SPLIT.train, ids, seed=2, iteration=3))
    batch_and_alone(lambda ids: device_errors(U[ids], V, SPLIT.test, ids)[0])
    # the alone-call sees only the device's own ratings (what a Flower device holds)
    own = SPLIT.train.select(SPLIT.train.users == 7)
    np.testing.assert_array_equal(fit_users(U0[[7]], V, own, np.array([7]), steps=20, rate=0.05, R=R5)[0], U[7])


def test_a_devices_draws_come_from_its_nodes_randomness():
    """u⁰, the pick and both rounds' noise shares: KeyedRandomness(s) gives seed s's bits (the secure-aggregation
    module's keyed shares included); a secret randomness other ones, reproducible from the secret (round 2 cancels
    round 1's ξ_i only if the device keeps it)."""
    cfg = lfl()
    plan = lfl_plan(cfg, num_devices=IDS.size, n_items=RATINGS.n_items, R=R5)
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    ids, n1 = np.array([3, 11]), IDS.size

    def draws(source):
        U = pretrain_users(V, SPLIT.train, ids, cfg, source)
        signals = item_gradient_signals(U, V, SPLIT.train, ids, seed=source, iteration=2)
        return (U, signals, round1_uploads(plan, signals, ids, seed=source, iteration=2),
                round2_uploads(plan, ids, n1, seed=source, iteration=2))

    seeded, keyed = draws(5), draws(KeyedRandomness(5))
    for a, b in zip(seeded, keyed, strict=True):
        np.testing.assert_array_equal(a, b)
    secret = bytes(range(32))
    own, again = draws(SecretRandomness(secret)), draws(SecretRandomness(secret))
    for a, b, c in zip(own, again, seeded, strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
    # round 1 + round 2 = G_i + ξ'_i: the round-1 share cancels (the same secret's stream), ξ'_i from its own stream
    xi_prime = np.vstack([SecretRandomness(secret).numpy(2, int(i), "secagg-noise-2").standard_normal(plan.dim)
                          for i in ids]) * plan.noise.round2_std(n1)
    np.testing.assert_allclose(own[2] + own[3], own[1] + xi_prime, rtol=0, atol=1e-9 * plan.noise.round1_std())
    with pytest.raises(ValueError, match="at most n1 = 1"):
        round2_uploads(plan, ids, 1, seed=SecretRandomness(), iteration=0)


def test_a_secret_devices_noise_shares_have_the_calibrated_spread():
    """ξ_i of a secret randomness (ChaCha20) is N(0, ζ₁σ_v²): over every device's m·p coordinates the sample mean and
    standard deviation lie within 5 CLT standard errors (sd of a sample sd ≈ s/√(2N))."""
    cfg = lfl()
    plan = lfl_plan(cfg, num_devices=IDS.size, n_items=RATINGS.n_items, R=R5)
    signals = np.zeros((IDS.size, plan.dim))
    xi = round1_uploads(plan, signals, IDS, seed=SecretRandomness(), iteration=0).ravel()
    std, N = plan.noise.round1_std(), xi.size
    assert abs(xi.mean()) < 5 * std / math.sqrt(N)
    assert abs(xi.std() - std) < 5 * std / math.sqrt(2 * N)


def test_init_users_follows_the_keyed_stream_of_each_user():
    got = init_users(np.array([3, 11]), 4, R5, seed=9)
    want = init_embeddings(1, 4, R5, stream(9, 0, 11, "mf-lfl-init-user"))[0]
    np.testing.assert_array_equal(got[1], want)
    assert in_constraint_set(got, R5)


def test_one_local_step_is_the_projected_mean_gradient_step():
    """Oracle: gradient_sums of the per-rating gradients (§1.1), normalised by each device's count."""
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    U0 = init_users(IDS, 3, R5, seed=2)
    tr = SPLIT.train
    G_U, _ = gradient_sums(U0, V, tr.users, tr.items, tr.values)
    counts = np.bincount(tr.users, minlength=tr.n_users)[:, None]
    want = project(U0 - 0.05 * G_U / counts, R5)
    np.testing.assert_allclose(fit_users(U0, V, tr, IDS, steps=1, rate=0.05, R=R5), want, rtol=0, atol=1e-12)


def test_local_fitting_lowers_every_devices_training_loss_and_stays_in_c_r():
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    U0 = init_users(IDS, 3, R5, seed=2)
    before, _ = device_errors(U0, V, SPLIT.train, IDS)
    U = fit_users(U0, V, SPLIT.train, IDS, steps=50, rate=0.02, R=R5)
    after, _ = device_errors(U, V, SPLIT.train, IDS)
    assert np.all(after <= before + 1e-12) and np.all(after < before)
    assert in_constraint_set(U, R5)


def test_the_signal_is_one_bounded_item_gradient_of_a_training_rating():
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    U = init_users(IDS, 3, R5, seed=2)
    tr = SPLIT.train
    G = item_gradient_signals(U, V, tr, IDS, seed=5, iteration=0).reshape(IDS.size, tr.n_items, 3)
    for k, u in enumerate(IDS):
        rows = np.flatnonzero(np.any(G[k] != 0, axis=1))
        assert rows.size == 1  # G_i is the m×p zero matrix with one row j (§6.3)
        j = rows[0]
        mine = (tr.users == u) & (tr.items == j)
        assert mine.any()  # j is one of the device's training ratings
        x = tr.values[mine][0]
        np.testing.assert_allclose(G[k, j], -2.0 * (x - U[k] @ V[j]) * U[k], rtol=1e-12)
        assert np.linalg.norm(G[k, j]) <= 2 * R5**1.5


def test_the_picked_rating_is_uniform_over_the_devices_ratings():
    """Counts of each rating over N iterations ~ Binomial(N, 1/c): all within 5 standard errors."""
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    u = int(np.argmax(np.bincount(SPLIT.train.users)))
    own = SPLIT.train.select(SPLIT.train.users == u)
    U = init_users(np.array([u]), 3, R5, seed=2)
    n_iter, c = 3000, len(own)
    picks = np.array([np.flatnonzero(np.any(item_gradient_signals(U, V, own, np.array([u]), seed=1, iteration=t)
                                            .reshape(own.n_items, 3) != 0, axis=1))[0] for t in range(n_iter)])
    counts = np.array([np.sum(picks == j) for j in own.items])
    expected = n_iter / c
    assert np.all(np.abs(counts - expected) <= 5 * math.sqrt(expected * (1 - 1 / c)))


def test_a_device_without_training_ratings_sends_zeros():
    V = init_embeddings(RATINGS.n_items, 3, R5, stream(1, 0, 0, "test-v"))
    empty = SPLIT.train.select(SPLIT.train.users != 4)
    G = item_gradient_signals(init_users(np.array([4, 5]), 3, R5, seed=0), V, empty, np.array([4, 5]), seed=0,
                              iteration=0)
    assert not G[0].any() and G[1].any()


def test_a_signal_outside_the_sensitivity_bound_is_refused():
    V = np.full((RATINGS.n_items, 3), 3.0)  # rows outside C_R (‖v‖² = 27 > R)
    with pytest.raises(ValueError, match=r"item gradient must have norm <= 2R\^\(3/2\)"):
        item_gradient_signals(np.full((IDS.size, 3), 3.0), V, SPLIT.train, IDS, seed=0, iteration=0)


# --------------------------------------------------------------------------- the server step


def test_plan_calibrates_sigma_v_and_ldp_noise_gives_each_share_sigma_v():
    plan = lfl_plan(lfl(), num_devices=30, n_items=25, R=R5)
    assert plan.sensitivity == pytest.approx(2 * R5**1.5)
    assert plan.sigma == calibrate_sigma(1.0, 1e-5, sensitivity=plan.sensitivity, iterations=3)
    assert plan.noise.zeta1 == pytest.approx(1 / (0.7 * 30)) and plan.two_rounds
    ldp = lfl_plan(lfl(algorithm="ldp-noise"), num_devices=30, n_items=25, R=R5)
    assert ldp.noise.round1_std() == pytest.approx(ldp.sigma, rel=1e-12) and not ldp.two_rounds
    assert lfl_plan(lfl(epsilon=None), num_devices=30, n_items=25, R=R5).noise is None


def test_the_update_keeps_v_in_c_r_and_a_halted_iteration_changes_and_costs_nothing():
    cfg = lfl()
    plan = lfl_plan(cfg, num_devices=10, n_items=25, R=R5)
    server = LflServer(cfg, plan, seed=1)
    ids = np.arange(10)
    big = np.full(plan.dim, -1e4)  # a huge step: Π_V must bring every row back into C_R
    ok = AggregationResult(big, ids, {"upload": ids}, threshold=7)
    server.step(0, combine_rounds(plan.noise, ok, None))
    assert in_constraint_set(server.V, R5) and server.epsilon() > 0
    V, eps = server.V.copy(), server.epsilon()
    halted = AggregationResult(None, np.empty(0, np.int64), {"upload": ids[:5]}, threshold=7, halted_at="upload")
    extra = server.step(1, combine_rounds(plan.noise, halted, None))
    assert extra["halted"] and np.array_equal(server.V, V) and server.epsilon() == eps


def test_halted_iterations_in_a_run_leave_v_unchanged_and_are_not_charged():
    split = train_test_split(synthetic_ratings(n_users=10, n_items=15, rank=3, density=0.4, seed=1), seed=0)
    res = run_lfl(split, lfl(rounds=6, omega=0.3, dropout_rate=0.25), seed=2)
    halted = [r for r in res.rounds if r.extra["halted"]]
    assert halted and len(halted) < len(res.rounds), "pick a seed with halted and released iterations"
    for prev, rec in zip(res.rounds, res.rounds[1:], strict=False):
        if rec.extra["halted"]:
            assert rec.test_mse == prev.test_mse and rec.epsilon == prev.epsilon  # U fixed in Stage 2, V unchanged
    assert res.info["halted_iterations"] == [r.round - 1 for r in halted]
    assert res.info["ledger"]["iterations_halted"] == len(halted)


def test_epsilon_is_the_ledgers_composition_of_the_recorded_z_eff():
    res = run_lfl(SPLIT, lfl(dropout_rate=0.1), seed=3)
    zs = [r.extra["z_eff"] for r in res.rounds if not r.extra["halted"]]
    assert all(r.extra["z_eff"] == r.extra["sigma_eff"] / (2 * R5**1.5) for r in res.rounds if not r.extra["halted"])
    assert res.epsilon == rdp_accountant_epsilon(zs, 1e-5)
    # fedpriv.accounting.rdp's integer orders 2..256 are a subset of dp-accounting's grid: ε no smaller, close
    assert res.epsilon <= integer_order_epsilon(zs, 1e-5) <= res.epsilon * 1.02
    assert res.info["epsilon_integer_orders"] == integer_order_epsilon(zs, 1e-5)
    assert res.party_epsilons == [res.epsilon] and res.noise_multiplier == pytest.approx(res.info["sigma_v"] / (2 * R5**1.5))


def test_corrected_mode_meets_the_target_and_paper_mode_reports_both_numbers():
    corrected = run_lfl(SPLIT, lfl(), seed=1)
    paper = run_lfl(SPLIT, lfl(lfl_mode="paper"), seed=1)
    assert corrected.epsilon <= 1.0 and corrected.source_epsilon is None
    assert paper.epsilon > 1.0 * 1.05  # §6.4: round 2 leaks, the true ε exceeds the calibrated target
    assert paper.source_epsilon == pytest.approx(1.0, abs=1e-6)  # the source's claim: every release at σ_v
    assert paper.info["ledger"]["epsilon_at_target_sigma"] == paper.source_epsilon


def test_ldp_noise_charges_the_aggregate_at_sqrt_n1_sigma_v_and_reports_the_local_guarantee():
    res = run_lfl(SPLIT, lfl(algorithm="ldp-noise"), seed=1)
    sigma = res.info["sigma_v"]
    for r in res.rounds:
        assert r.extra["n2"] == 0 and r.extra["sigma_eff"] == pytest.approx(math.sqrt(r.extra["n1"]) * sigma)
    assert res.epsilon < 0.2 * 1.0  # n = 30 shares of σ_v each: far below the target
    assert res.info["local_epsilon"] == pytest.approx(1.0, abs=1e-6) and res.info["local_delta"] == 1e-5


def test_stage1_only_is_pretraining_with_v0_then_fine_tuning():
    cfg = lfl(algorithm="stage1-only", epsilon=None)
    res = run_lfl(SPLIT, cfg, seed=1)
    server = LflServer(cfg, lfl_plan(cfg, num_devices=IDS.size, n_items=RATINGS.n_items, R=R5), seed=1)
    U = pretrain_users(server.V, SPLIT.train, IDS, cfg, seed=1)
    sse, count = device_errors(U, server.V, SPLIT.test, IDS)
    assert res.rounds == [] and res.epsilon is None
    assert res.test_mse_before_finetune == pytest.approx(sse.sum() / count.sum(), rel=1e-12)


def test_non_private_lfl_learns_and_the_private_run_is_reproducible():
    res = run_lfl(SPLIT, lfl(epsilon=None, rounds=5, lfl_step_size=1.0), seed=1)
    assert res.epsilon is None and res.rounds[-1].test_mse < res.rounds[0].test_mse
    a, b = run_lfl(SPLIT, lfl(), seed=7), run_lfl(SPLIT, lfl(), seed=7)
    assert a.test_mse == b.test_mse and [r.test_mse for r in a.rounds] == [r.test_mse for r in b.rounds]
    assert run_lfl(SPLIT, lfl(), seed=8).test_mse != a.test_mse


def test_protocol_and_oracle_runs_release_the_same_iterations():
    split = train_test_split(synthetic_ratings(n_users=10, n_items=15, rank=3, density=0.4, seed=1), seed=0)
    kw = {"rounds": 2, "dropout_rate": 0.15}
    oracle = run_lfl(split, lfl(**kw), seed=3)
    proto = run_lfl(split, lfl(aggregator="protocol", **kw), seed=3)
    for a, b in zip(oracle.rounds, proto.rounds, strict=True):
        assert (a.extra["n1"], a.extra["n2"], a.extra["halted"]) == (b.extra["n1"], b.extra["n2"], b.extra["halted"])
        assert a.test_mse == pytest.approx(b.test_mse, rel=1e-6)  # sums equal up to the codec's step
    assert oracle.epsilon == proto.epsilon


def test_the_protocol_codec_takes_32_bits_only_when_rounding_is_negligible_next_to_the_noise():
    plan = lfl_plan(lfl(), num_devices=943, n_items=1682, R=R5)  # MovieLens-100k at ε = 1
    codec = lfl_codec(plan)
    assert codec.modulus_bits == 32 and codec.word_dtype == np.uint32
    assert math.sqrt(943) * codec.step / 2 <= ROUNDING_TOLERANCE * plan.sigma
    huge = lfl_plan(lfl(epsilon=1e5), num_devices=943, n_items=1682, R=R5)  # tiny σ_v: 32 bits too coarse
    assert lfl_codec(huge).modulus_bits == 64
    assert lfl_codec(lfl_plan(lfl(epsilon=None), num_devices=943, n_items=1682, R=R5)).modulus_bits == 64


def test_one_round_release_of_a_non_private_run_is_the_plain_sum():
    plan = lfl_plan(lfl(epsilon=None), num_devices=4, n_items=2, R=R5)
    ids = np.arange(4)
    r1 = AggregationResult(np.ones(6), ids[:3], {"upload": ids[:3]}, threshold=3)
    out = one_round_release(plan, r1, "corrected")
    assert out.n1 == 3 and out.sigma_eff is None and np.array_equal(out.total, np.ones(6))


def test_central_sgd_dispatches_to_the_central_baseline():
    res = run_lfl(SPLIT, lfl(algorithm="central-sgd", epsilon=None, rounds=2, clip="none"), seed=0)
    assert res.algorithm == "central-sgd" and res.setting == "lfl"


# --------------------------------------------------------------------------- bad input


def test_dropout_rate_at_or_above_omega_is_refused():
    with pytest.raises(ValueError, match=r"dropout_rate must be < omega = 0.3 .*got dropout_rate=0.3"):
        lfl(dropout_rate=0.3)


@pytest.mark.parametrize("kwargs, match", [
    ({"setting": "hfl"}, "config.setting must be 'lfl' for LFL-SGDMF, got 'hfl'"),
    ({"clip": "gradient"}, "clip must be 'embedding' for LFL"),
    ({"algorithm": "ldp-noise", "epsilon": None}, "epsilon must be set for algorithm 'ldp-noise'"),
])
def test_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_lfl(SPLIT, lfl(**kwargs), seed=0)


@pytest.mark.parametrize("call, match", [
    (lambda: fit_users(np.zeros((2, 3)), np.zeros((25, 3)), SPLIT.train, np.array([1, 1]), steps=1, rate=0.1, R=R5),
     "users must be distinct device ids, got 1 duplicate"),
    (lambda: fit_users(np.zeros((1, 3)), np.zeros((25, 3)), SPLIT.train, np.array([1, 2]), steps=1, rate=0.1, R=R5),
     r"U_rows must have one row per device \(2\), got 1"),
    (lambda: fit_users(np.zeros((1, 3)), np.zeros((25, 3)), SPLIT.train, np.array([99]), steps=1, rate=0.1, R=R5),
     r"users must lie in \[0, 30\)"),
    (lambda: fit_users(np.full((1, 3), np.nan), np.zeros((25, 3)), SPLIT.train, np.array([1]), steps=1, rate=0.1,
                       R=R5), "U_rows and V must be finite"),
    (lambda: item_gradient_signals(np.zeros((1, 3)), np.zeros((24, 3)), SPLIT.train, np.array([1]), seed=0,
                                   iteration=0), r"V must have one row per item of the ratings \(25\), got 24"),
])
def test_device_function_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_split_with_mismatched_index_spaces_is_refused():
    other = synthetic_ratings(n_users=31, n_items=25, rank=3, density=0.3, seed=4)
    with pytest.raises(ValueError, match="must share the user and item index spaces"):
        run_lfl(RatingSplit(SPLIT.train, other), lfl(), seed=0)
