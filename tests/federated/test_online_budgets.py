"""Heterogeneous per-user budgets of online LDP-SGD (docs/online_ldp_sgd.md §4.4, §5, §8.5; Shi et al. Fig. 2).

Oracles: the laws' own moments (uniform mean, group shares) with CLT margins, the §5 normal s.d.
2/μ_i of each user's noise, an empirical ε lower bound of each user's release on the worst pair of
bounded gradients (:func:`fedpriv.audit.epsilon_lower_bound`: Clopper–Pearson, valid at its
confidence), and the paper's Figure 2 ordering of constant μ = 1, μ_i ~ Unif(1, 2) and μ = 2 on
common random numbers (paired differences, CLT margin).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fedpriv.audit.bound import CONSISTENT, VIOLATED, epsilon_lower_bound
from fedpriv.federated.online_budgets import BudgetLaw, budget_distribution, parse_groups
from fedpriv.federated.online_sgd import (
    OnlineSgdConfig,
    c0,
    draw_omega,
    guarantee,
    model_quantities_for,
    release,
    simulate,
    user_budget,
    user_budgets,
)
from fedpriv.rng import stream

FAST = {"quantity_draws": 20_000, "loss_samples": 0, "checkpoints": 8}
UNIFORM = {"noise": "gdp", "mu": None, "budget_law": "uniform", "budget_low": 1.0, "budget_high": 2.0}
GROUPS = {"noise": "laplace", "budget_law": "groups", "budget_groups": ((0.5, 0.3), (2.0, 0.7))}


def cfg_of(**kw) -> OnlineSgdConfig:
    return OnlineSgdConfig(**({"steps": 300, "replications": 3, "d": 2, **FAST} | kw))


# ----------------------------------------------------------------------------- the laws
def test_uniform_budgets_follow_their_law_per_user_and_are_the_same_in_every_replication():
    cfg = cfg_of(steps=40_000, **UNIFORM)
    b = user_budgets(cfg, np.arange(1, 40_001))
    assert b.min() > 1.0 and b.max() < 2.0
    se = (1.0 / math.sqrt(12.0)) / math.sqrt(b.size)  # s.d. of Unif(1, 2) is 1/√12
    assert abs(b.mean() - 1.5) < 5 * se
    assert abs(np.mean(b < 1.25) - 0.25) < 5 * math.sqrt(0.25 * 0.75 / b.size)
    # one user's budget is its own: drawn alone, by any replication range, the same; another seed, another draw
    np.testing.assert_array_equal(user_budgets(cfg, np.array([17, 3])), b[[16, 2]])
    assert user_budgets(dataclasses.replace(cfg, first_replication=5, replications=1), np.array([17]))[0] == b[16]
    assert user_budgets(dataclasses.replace(cfg, seed=1), np.array([17]))[0] != b[16]
    assert user_budget(cfg, 17) == {"mu": b[16]}


def test_group_budgets_take_their_shares():
    cfg = cfg_of(steps=20_000, **GROUPS)
    b = user_budgets(cfg, np.arange(1, 20_001))
    assert set(np.unique(b).tolist()) == {0.5, 2.0}
    share = float(np.mean(b == 0.5))
    assert abs(share - 0.3) < 5 * math.sqrt(0.3 * 0.7 / b.size)
    law = BudgetLaw("groups", groups=((0.5, 0.3), (2.0, 0.7)))
    np.testing.assert_array_equal(law.budgets(np.array([0.1, 0.2999, 0.3, 0.9])), [0.5, 0.5, 2.0, 2.0])


def test_the_run_reports_the_largest_budget_and_the_bounds_the_smallest():
    cfg = cfg_of(**UNIFORM)
    assert cfg.budget == {"mu": 2.0} and cfg.noisiest_budget == {"mu": 1.0}  # never below any user's
    assert "μ_i-GDP for user i with its own μ_i ~ Unif(1, 2)" in guarantee(cfg) and "the largest, 2.0" in guarantee(cfg)
    gaussian = cfg_of(noise="gaussian", delta=1e-6, budget_law="groups", budget_groups=((0.2, 0.5), (0.6, 0.5)))
    assert gaussian.budget == {"epsilon": 0.6, "delta": 1e-6}
    result = simulate(cfg_of(**UNIFORM, alpha=0.6))
    homogeneous = simulate(cfg_of(alpha=0.6, mu=1.0))  # Ω at μ = 1, the law's smallest (§5)
    assert result.bound.omega == homogeneous.bound.omega
    assert any("Omega at the smallest budget 1" in note for note in result.warnings)
    dist = budget_distribution(user_budgets(cfg, np.arange(1, 301)))
    assert 1.0 < dist["min"] <= dist["q1"] <= dist["median"] <= dist["q3"] <= dist["max"] < 2.0


def test_parse_groups_reads_pairs_and_names_the_key():
    assert parse_groups("1:0.5, 2:0.5") == ((1.0, 0.5), (2.0, 0.5))
    for bad in ("", "1", "1:0.5:2", "a:0.5"):
        with pytest.raises(ValueError, match="online-budget-groups must be"):
            parse_groups(bad)


# ----------------------------------------------------------------------------- each user's release
def test_each_users_noise_has_its_own_gdp_scale():
    """ω of user i is N(0, (2/μ_i)² I) (§5): the sample variance of 4 000 draws within 5 standard errors."""
    cfg = cfg_of(**UNIFORM)
    n, p = 4000, cfg.grad_dim
    steps = np.arange(1, 61)
    mus = user_budgets(cfg, steps)
    omega = draw_omega(cfg, stream(0, 0, 0, "omega"), n * steps.size, np.repeat(steps, n)).reshape(steps.size, n * p)
    var = omega.var(axis=1)
    target = (2.0 / mus) ** 2
    se = target * math.sqrt(2.0 / (n * p))  # Var of a normal sample variance: 2σ⁴/N
    assert np.all(np.abs(var - target) < 5 * se), np.max(np.abs(var - target) / se)
    assert np.ptp(target) > 20 * se.max()  # the users' scales differ far beyond the tolerance


def _worst_pair_releases(cfg: OnlineSgdConfig, step: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The privacy-loss statistic of n releases of user ``step`` on g = C0·1/√p and on g' = −g (ℓ1 gap 2√p·C0)."""
    p = cfg.grad_dim
    g = np.full((n, p), c0(cfg) / math.sqrt(p))  # ‖g‖₂ = C0: Condition 1 holds with equality
    a = release(cfg, g, stream(seed, step, 0, "audit-x"), step)
    b = release(cfg, -g, stream(seed, step, 0, "audit-x'"), step)

    def loss(y: np.ndarray) -> np.ndarray:
        # Σ_j clip(y_j, −g_j, g_j) = ½Σ_j |y_j + g_j| − |y_j − g_j|, the Laplace log-likelihood ratio × scale/2;
        # clip is exact at the ends (the difference of absolute values would jitter there by rounding)
        return np.sum(np.clip(y, -g, g), axis=1)

    return loss(a), loss(b)


def test_each_users_laplace_release_satisfies_its_own_epsilon_and_no_smaller_one():
    """Every user's release passes the audit at its own ε_i; the ε = 2 users' release refutes ε = 0.5.

    The second half is the audit's power: a run that calibrated every user at the largest budget
    would make the ε = 0.5 users' releases fail the first half.
    """
    cfg = cfg_of(model="logistic", d=1, **GROUPS)  # p = 2: the worst event has probability ~1/4
    budgets = user_budgets(cfg, np.arange(1, 301))
    low, high = int(np.argmax(budgets == 0.5)) + 1, int(np.argmax(budgets == 2.0)) + 1
    for step, eps in ((low, 0.5), (high, 2.0)):
        a, b = _worst_pair_releases(cfg, step, 100_000, seed=step)
        result = epsilon_lower_bound(a, b, claimed_epsilon=eps, confidence=0.999)
        assert result.verdict == CONSISTENT, result
        assert result.epsilon_lb > 0.6 * eps  # the pair is the worst case: the audit comes near ε_i
    a, b = _worst_pair_releases(cfg, high, 100_000, seed=99)
    assert epsilon_lower_bound(a, b, claimed_epsilon=0.5, confidence=0.999).verdict == VIOLATED


def test_release_needs_the_users_step_under_a_heterogeneous_law():
    cfg = cfg_of(**UNIFORM)
    with pytest.raises(ValueError, match="step is required with budget_law 'uniform'"):
        release(cfg, np.zeros((3, cfg.grad_dim)), stream(0, 0, 0, "x"))
    with pytest.raises(ValueError, match="step_ids are required with budget_law 'uniform'"):
        draw_omega(cfg, stream(0, 0, 0, "x"), 3)
    with pytest.raises(ValueError, match=r"step_ids must have shape \(3,\)"):
        draw_omega(cfg, stream(0, 0, 0, "x"), 3, np.array([1, 2]))
    with pytest.raises(ValueError, match="noise 'none' has no budget"):
        user_budgets(cfg_of(noise="none", mu=None), np.array([1]))


# ----------------------------------------------------------------------------- Figure 2
def test_heterogeneous_budgets_lie_between_the_constant_ones_as_in_figure_2():
    """Shi et al. Fig. 2 (§8.5): μ_i ~ Unif(1, 2) errs less than μ = 1 and more than μ = 2, for SGD and ASGD.

    §8.2 setting (d = 5, η = 0.2, α = 1/2, §12.17) at n = 2 000 with 40 replications. The three runs
    share every data and noise uniform (one seed), so the paired differences are tight; each must
    exceed 3 of its standard errors (measured: 6–7).
    """
    base = {"model": "linear-huber", "d": 5, "steps": 2000, "replications": 40, "eta": 0.2, "alpha": 0.5, **FAST}
    runs = {name: simulate(OnlineSgdConfig(**base, **kw)) for name, kw in (
        ("mu1", {"mu": 1.0}), ("het", UNIFORM), ("mu2", {"mu": 2.0}))}
    for more, less in (("mu1", "het"), ("het", "mu2")):
        for series in ("param_error_sgd", "param_error_asgd"):
            diff = getattr(runs[more], series)[:, -1] - getattr(runs[less], series)[:, -1]
            assert diff.mean() > 3 * diff.std(ddof=1) / math.sqrt(diff.size), (more, less, series)
    assert model_quantities_for(runs["het"].config).C0 == c0(runs["het"].config)
