"""The generic FMF loop and its server side (docs/federated_mf.md §2.2–§2.4, §3.7.3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedpriv.accounting import rdp
from fedpriv.accounting.parties import PartyAccount, global_epsilon
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set, project
from fedpriv.mf.fmf import (
    FmfParty,
    FmfServer,
    UserBatches,
    aggregate,
    check_rating_range,
    composition_rule,
    init_shared,
    noise_multiplier,
    run_fmf,
    source_rule,
)
from fedpriv.rng import stream

R = 5.0


def test_aggregate_is_the_weighted_average_and_stays_in_the_constraint_set():
    rng = stream(1, 0, 0, "test")
    copies = [project(rng.standard_normal((30, 4)) * 2, R) for _ in range(3)]
    weights = [5.0, 1.0, 2.0]
    out = aggregate(copies, weights)
    expected = sum(w * c for w, c in zip(weights, copies, strict=True)) / sum(weights)
    np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-15)
    assert in_constraint_set(out, R)
    # a single copy comes back unchanged (VFL with s = 1 is the central algorithm)
    np.testing.assert_array_equal(aggregate([copies[0]], [7.0]), copies[0])


@pytest.mark.parametrize(
    "copies, weights, match",
    [
        ([], [], "at least one"),
        ([np.zeros((2, 2))], [1.0, 2.0], "one entry per copy"),
        ([np.zeros((2, 2))], [0.0], "weights must be > 0"),
        ([np.zeros((2, 2))], [np.nan], "weights must be > 0"),
        ([np.zeros((2, 2)), np.zeros((3, 2))], [1.0, 1.0], r"copies\[1\] must have shape"),
        ([np.zeros((2, 2)), np.full((2, 2), np.nan)], [1.0, 1.0], r"copies\[1\] must be finite"),
    ],
)
def test_aggregate_rejects_bad_input(copies, weights, match):
    with pytest.raises(ValueError, match=match):
        aggregate(copies, weights)


def test_init_shared_is_keyed_and_in_the_constraint_set():
    cfg = MfConfig(rank=6)
    a, b, c = init_shared(cfg, 40, R, 3), init_shared(cfg, 40, R, 3), init_shared(cfg, 40, R, 4)
    assert a.shape == (40, 6) and in_constraint_set(a, R)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_user_batches_gathers_exactly_the_sampled_users_ratings():
    rng = stream(2, 0, 0, "test")
    users = rng.integers(0, 50, size=400)
    batches = UserBatches(users, 50)
    pick = np.array([3, 7, 8, 41, 49])
    idx = batches.select(pick)
    np.testing.assert_array_equal(np.sort(idx), np.flatnonzero(np.isin(users, pick)))
    assert batches.select(np.zeros(0, dtype=np.int64)).size == 0
    with pytest.raises(ValueError, match="users must lie in"):
        UserBatches(np.array([0, 50]), 50)


def test_composition_rules_follow_the_spec_table():
    assert composition_rule(MfConfig(notion="per-rating", parties=3)) == "max"
    assert composition_rule(MfConfig(notion="per-user", parties=3)) == "rdp-sum"
    assert composition_rule(MfConfig(notion="per-user", vfl_composition="sqrt-sum")) == "sqrt-sum"
    assert composition_rule(MfConfig(setting="hfl", notion="per-user")) == "max"
    assert source_rule(MfConfig(notion="per-user")) == "sqrt-sum"
    assert source_rule(MfConfig(notion="per-rating")) is None


def test_noise_multiplier_is_the_calibrated_one():
    cfg = MfConfig(epsilon=2.0, sampling_rate=0.02)
    z = noise_multiplier(cfg, 300)
    assert z == rdp.calibrate(2.0, cfg.delta, 0.02, 300)
    assert rdp.epsilon(0.02, z, 300, cfg.delta) <= 2.0
    src = noise_multiplier(cfg.replace(accountant="source", source_constant=3.0), 300)
    assert src == rdp.source_noise_multiplier(2.0, cfg.delta, 0.02, 300, constant=3.0)
    assert noise_multiplier(cfg.replace(epsilon=None), 300) is None
    assert noise_multiplier(cfg.replace(algorithm="fmf"), 300) is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"values": np.array([1.0, 6.0]), "r_min": 0.0, "R": 5.0, "bounded": True}, r"must lie in the declared"),
        ({"values": np.array([-1.0, 2.0]), "r_min": -2.0, "R": 5.0, "bounded": True}, r"inside \[0, R\]"),
        ({"values": np.array([0.5, 2.0]), "r_min": 1.0, "R": 5.0, "bounded": False}, r"must lie in the declared"),
        ({"values": np.array([np.nan]), "r_min": 0.0, "R": 5.0, "bounded": True}, "must be finite"),
    ],
)
def test_check_rating_range_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_rating_range(**kwargs)


class _ToyParty(FmfParty):
    """Moves the shared embedding toward a fixed target; records the calls it gets."""

    def __init__(self, k: int, target: float, w: float, private: bool, T_prime: int) -> None:
        self.index, self.target, self._w, self.private, self.tp = k, target, w, private, T_prime
        self.calls: list[Any] = []
        self.steps = 0

    @property
    def weight(self) -> float:
        return self._w

    def setup(self, shared):
        self.calls.append("setup")

    def train_round(self, shared, t):
        self.calls.append(("train", t))
        self.steps = t * self.tp
        return 0.5 * shared + 0.5 * self.target

    def finetune(self, shared):
        self.calls.append("finetune")

    def test_error(self, shared):
        return float(np.sum((shared - self.target) ** 2)), shared.size

    def train_error(self, shared):
        return self.test_error(shared)

    def account(self):
        return PartyAccount(q=0.01, z=1.0, steps=self.steps) if self.private else None

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.steps = state["steps"]


def test_run_fmf_runs_the_three_stages_and_records_every_round():
    cfg = MfConfig(rounds=4, local_steps=10, notion="per-user", parties=2)
    parties = [_ToyParty(0, 1.0, 1.0, True, 10), _ToyParty(1, 3.0, 3.0, True, 10)]
    seen = []
    res = run_fmf(parties, np.zeros((2, 2)), cfg, rule="rdp-sum", delta=1e-5, progress=seen.append)
    assert parties[0].calls == ["setup", ("train", 1), ("train", 2), ("train", 3), ("train", 4), "finetune"]
    assert [r.round for r in res.rounds] == [1, 2, 3, 4] and len(seen) == 4
    # the fixed point of x ← ¼(x+1) + ¾(x+3) ... weighted by 1:3 is 2.5; after 4 rounds x = 2.5(1 − 2⁻⁴)
    x = 2.5 * (1 - 0.5**4)
    expected = ((x - 1.0) ** 2 * 4 + (x - 3.0) ** 2 * 4) / 8
    assert res.test_mse == pytest.approx(expected, rel=1e-12)
    accs = [PartyAccount(0.01, 1.0, 40)] * 2
    assert res.epsilon == pytest.approx(global_epsilon(accs, 1e-5, rule="rdp-sum"), rel=1e-12)
    assert res.source_epsilon == pytest.approx(global_epsilon(accs, 1e-5, rule="sqrt-sum"), rel=1e-12)
    assert res.party_epsilons == pytest.approx([rdp.epsilon(0.01, 1.0, 40, 1e-5)] * 2, rel=1e-12)
    assert seen[1]["epsilon"] == pytest.approx(global_epsilon(
        [PartyAccount(0.01, 1.0, 20)] * 2, 1e-5, rule="rdp-sum"), rel=1e-12)


def test_run_fmf_non_private_reports_no_epsilon():
    cfg = MfConfig(rounds=2, epsilon=None)
    res = run_fmf([_ToyParty(0, 1.0, 1.0, False, 10)], np.zeros((2, 2)), cfg, rule="max", delta=1e-5)
    assert res.epsilon is None and res.party_epsilons == [] and res.noise_multiplier is None
    assert all(r.epsilon is None for r in res.rounds)


def test_server_round_rejects_a_nan_copy_and_keeps_the_shared_embedding():
    server = FmfServer(MfConfig(), np.ones((2, 2)), rule="max", delta=1e-5)
    with pytest.raises(ValueError, match="must be finite"):
        server.round(1, [np.full((2, 2), np.nan)], [1.0], [None], None, 0.0)
    np.testing.assert_array_equal(server.shared, np.ones((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        server.update([np.ones((3, 2))], [1.0])
    rec = server.round(1, [np.zeros((2, 2))], [1.0], [None], lambda shared: [(float(shared.sum()), 4)], 0.0)
    assert rec.test_mse == 0.0 and server.rounds == [rec]
