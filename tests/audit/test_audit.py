"""The empirical privacy audit (docs/audit.md): its statistics, every target, the broken mechanisms it must flag, the CLI.

Sample sizes are derived beside each test. Notation: n_e = N/2 held-out outputs per input (the other
half selects the event); with one evaluated event each Clopper–Pearson bound is one-sided at α/2,
z = Φ⁻¹(1 − α/2) = 1.96 for the default confidence 0.95. For an event with P[M(x) ∈ S] = p and
P[M(x') ∈ S] = q, a = (1 − p)/p and b = (1 − q)/q, the normal approximation of the two bounds gives

    ε_lb ≈ ln(p̂/q̂) − z(√a + √b)/√n_e,      sd(ln(p̂/q̂)) ≈ √((a + b)/n_e),

so ε_lb exceeds a claimed ε except with probability 1e-3 (Z = Φ⁻¹(1 − 1e-3) = 3.09) once

    n_e ≥ ((z(√a + √b) + Z√(a + b)) / (ln(p/q) − ε))².
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from statsmodels.stats.proportion import proportion_confint
from typer.testing import CliRunner

from fedpriv.audit import TARGETS, audit, clopper_pearson_lower, clopper_pearson_upper, epsilon_lower_bound, get_target
from fedpriv.audit.targets import mechanism_target, mod_perturbation, mod_release, perturbation_target
from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.mechanisms import LaplaceMechanism, PiecewiseMechanism
from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation import Coordinatewise, LDPVec
from fedpriv.rng import stream
from simulations.cli import app

EPSILONS = [0.5, 1.0, 4.0]
SEED = 11


# ------------------------------------------------------------------------------ Clopper–Pearson
@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (10, 10), (37, 1000), (999, 1000)])
@pytest.mark.parametrize("alpha", [0.05, 0.001])
def test_clopper_pearson_matches_statsmodels(k: int, n: int, alpha: float) -> None:
    """One-sided level-α bounds are the ends of statsmodels' two-sided 'beta' interval at 2α (an independent code)."""
    lo, hi = proportion_confint(k, n, alpha=2 * alpha, method="beta")
    np.testing.assert_allclose(clopper_pearson_lower(k, n, alpha), lo, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(clopper_pearson_upper(k, n, alpha), hi, rtol=1e-9, atol=1e-15)


def test_clopper_pearson_closed_forms_at_the_edges() -> None:
    """k = 0: upper = 1 − α^{1/n}; k = n: lower = α^{1/n} (the binomial tail is one term)."""
    n, alpha = 200, 0.01
    assert float(clopper_pearson_upper(0, n, alpha)) == pytest.approx(1 - alpha ** (1 / n), rel=1e-12)
    assert float(clopper_pearson_lower(n, n, alpha)) == pytest.approx(alpha ** (1 / n), rel=1e-12)
    assert float(clopper_pearson_lower(0, n, alpha)) == 0.0 and float(clopper_pearson_upper(n, n, alpha)) == 1.0


# ------------------------------------------------------------------------------ known answers
def _randomized_response(epsilon: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary randomized response: report the true bit with probability e^ε/(1 + e^ε); exactly ε-LDP."""
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))
    return (stream(seed, 0, 0, "rr").random(n) < keep), (stream(seed, 0, 1, "rr").random(n) >= keep)


@pytest.mark.parametrize("n", [2_000, 20_000, 200_000])
def test_bound_on_randomized_response_converges_to_epsilon_from_below(n: int) -> None:
    """ε − margin(n) ≤ ε_lb ≤ ε for RR at ε = 1.

    The best event is the atom {1}: p = e/(1+e) = 0.731, q = 0.269, a = 0.368, b = 2.718. With
    n_e = n/2 the module docstring's bound gives ε_lb ≥ ε − (1.96·(0.607 + 1.649) + 3.09·1.757)/√n_e
    = ε − 9.85/√n_e except with probability 1e-3: margins 0.44, 0.14, 0.044 for the three n.
    """
    eps = 1.0
    result = epsilon_lower_bound(*_randomized_response(eps, n, SEED), claimed_epsilon=eps)
    assert result.epsilon_lb <= eps and result.verdict == "consistent"
    assert result.epsilon_lb >= eps - 9.85 / math.sqrt(n / 2), result
    assert "s >= 1" in result.event or "s < 1" in result.event


def test_delta_is_subtracted_before_the_ratio() -> None:
    """RR that leaks its input with probability δ' = 0.05 is (ε, δ')-LDP but not (ε, 0)-LDP.

    The leak atom has q = 0 and p = δ'(=0.05): with n_e = 10,000, p_lo ≈ 0.045 and q_hi = 1 − 0.025^{1/n_e}
    ≈ 3.7e-4, so ln(p_lo/q_hi) ≈ 4.8 > ε = 1 flags (ε, 0); with δ' claimed, p_lo − δ' < 0 on that atom and the
    RR atoms give at most ln((0.731 − 0.05·…)/…) ≤ ε.
    """
    eps, leak, n = 1.0, 0.05, 20_000
    rr_x, rr_y = _randomized_response(eps, n, SEED)
    leak_x, leak_y = stream(SEED, 0, 0, "leak").random(n) < leak, stream(SEED, 0, 1, "leak").random(n) < leak
    s_x = np.where(leak_x, 2.0, rr_x.astype(float))  # the leak reports 2 for x, −1 for x'
    s_y = np.where(leak_y, -1.0, rr_y.astype(float))
    assert epsilon_lower_bound(s_x, s_y, claimed_epsilon=eps).verdict == "violated"
    assert epsilon_lower_bound(s_x, s_y, claimed_epsilon=eps, delta=leak).verdict == "consistent"


def test_a_correct_claim_is_refuted_at_most_at_the_level() -> None:
    """Identical laws for x and x' (true ε = 0), claimed ε = 1e-9: ``violated`` in at most α = 5 % of 1000 seeds.

    400 candidate events are examined; only the one chosen on the selection halves is tested on the held-out
    halves, so P[violated] ≤ α per seed. The count is Binomial(1000, ≤ 0.05): mean ≤ 50, sd ≤ 6.9, and the
    test allows 50 + 5·6.9 = 84. Checked once: the naive audit (the largest of the 400 bounds on all the data,
    each at α/2, no correction) is refuted in 90 of these 1000 seeds; this one in 0.
    """
    flagged = sum(
        epsilon_lower_bound(stream(s, 0, 0, "same").random(1_000), stream(s, 0, 1, "same").random(1_000),
                            claimed_epsilon=1e-9).verdict == "violated"
        for s in range(1000))
    assert flagged <= 84


@pytest.mark.parametrize("kwargs, match", [
    ({"claimed_epsilon": 0.0}, "claimed_epsilon"),
    ({"claimed_epsilon": math.inf}, "claimed_epsilon"),
    ({"claimed_epsilon": 1.0, "delta": 1.0}, "delta"),
    ({"claimed_epsilon": 1.0, "confidence": 1.0}, "confidence"),
    ({"claimed_epsilon": 1.0, "events": 0}, "events"),
    ({"claimed_epsilon": 1.0, "thresholds": 0}, "thresholds"),
])
def test_bad_parameters_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        epsilon_lower_bound(np.zeros(10), np.ones(10), **kwargs)


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="sample_x must be finite"):
        epsilon_lower_bound(np.array([0.0, np.nan]), np.ones(4), claimed_epsilon=1.0)
    with pytest.raises(ValueError, match="sample_x_prime must be 1-D with at least 2"):
        epsilon_lower_bound(np.ones(4), np.ones(1), claimed_epsilon=1.0)
    with pytest.raises(ValueError, match="name must be one of laplace"):
        get_target("lapalce", 1.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        get_target("laplace", -1.0)
    with pytest.raises(ValueError, match="scalar epsilon"):
        mechanism_target(LaplaceMechanism(np.array([1.0, 2.0])))


# ------------------------------------------------------------------------------ every target is consistent
@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("name", list(TARGETS))
def test_every_mechanism_and_perturbation_is_consistent(name: str, epsilon: float) -> None:
    """A correct randomizer is flagged with probability ≤ 1 − confidence = 0.05 (fixed seed: deterministic)."""
    target = get_target(name, epsilon)
    assert target.claim.holds
    assert epsilon * (1 - 1e-3) <= target.claim.epsilon <= epsilon * (1 + 1e-6)  # the claim is the ε asked for
    result = audit(target, samples=20_000, seed=SEED)
    assert result.verdict == "consistent", result
    assert 0.0 <= result.epsilon_lb <= target.claim.epsilon


# ------------------------------------------------------------------------------ broken mechanisms are flagged
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_laplace_with_scale_one_over_epsilon_is_flagged(epsilon: float) -> None:
    """Laplace of scale 1/ε on [-1, 1] (sensitivity 2 taken as 1) is 2ε-LDP, claimed ε.

    Event {y ≥ 1}, x' = 1 over x = −1: p = ½, q = ½e^{−2ε}, ln(p/q) − ε = ε (docstring formula, a = 1):
    ε = 0.5: b = 4.44 → n_e ≥ ((1.96·3.11 + 3.09·2.33)/0.5)² = 707; ε = 1: b = 13.8 → n_e ≥ 446.
    ε = 4: q = 1.7e-4, expected count at n_e = 2000 is 0.34; the normal approximation fails, but p_lo ≥ 0.5 −
    5.05·√(0.25/2000) = 0.44 and with k ≤ 8 hits (P[Poisson(0.34) ≥ 9] < 1e-8) q_hi ≤ 0.0076 < 0.44·e^{−4} = 0.0081.
    N = 4000 (n_e = 2000) covers all three with room for an event a little off the optimal threshold.
    """
    target = mechanism_target(LaplaceMechanism(2 * epsilon), name="laplace-half-scale",
                              claim=Guarantee(epsilon=epsilon))
    assert float(LaplaceMechanism(2 * epsilon).scale) == pytest.approx(1 / epsilon)
    result = audit(target, samples=4_000, seed=SEED)
    assert result.verdict == "violated", result
    assert result.epsilon_lb <= 2 * epsilon  # still a lower bound on the true 2ε


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_piecewise_built_at_more_than_its_claim_is_flagged(epsilon: float) -> None:
    """Piecewise built at ε' = 1.3ε, claimed ε.

    Event {y ≥ 1}, x' = 1 over x = −1 (the central piece of x' = 1 is [1, C]): p = e^{ε'/2}/(e^{ε'/2} + 1),
    q = p·e^{−ε'}, ln(p/q) − ε = 0.3ε. Docstring formula: ε = 0.5: p = 0.581, q = 0.303 → n_e ≥ 4452;
    ε = 1: p = 0.657, q = 0.179 → n_e ≥ 1758; ε = 4: p = 0.931, q = 0.00513 → n_e ≥ 3490.
    N = 40,000 (n_e = 20,000) is 4.5× the largest, for the event chosen on the selection half.
    """
    target = mechanism_target(PiecewiseMechanism(1.3 * epsilon), name="piecewise-1.3",
                              claim=Guarantee(epsilon=epsilon))
    result = audit(target, samples=40_000, seed=SEED)
    assert result.verdict == "violated", result
    assert result.epsilon_lb <= 1.3 * epsilon


# ------------------------------------------------------------------------------ the vectorized release is the public one
def test_the_vectorized_release_of_one_sample_is_perturb_bit_for_bit() -> None:
    """One row drawn from one stream equals ``Perturbation.perturb`` on that stream (random and laplace draws)."""
    update = np.array([0.3, -0.1, 0.2, 0.05])
    for pert in (Coordinatewise("laplace", 1.0, clip_norm=1.0), LDPVec("piecewise", 1.0, clip_norm=1.0)):
        target = perturbation_target(pert, update, -update, name="t", neighbours="")
        direction = update / np.linalg.norm(update)
        expected = pert.perturb(torch.from_numpy(update), stream(3, 0, 0, "audit/t")).vector.numpy() @ direction
        assert target.release(0, 1, stream(3, 0, 0, "audit/t"))[0] == expected


def test_ldp_mod_replies_exactly_the_audited_release() -> None:
    """LdpMod's drop-in reply (an in-memory Flower message) is ``mod_release`` on the mod's stream, bit for bit."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from clients import LdpMod
    from fedpriv.federated.keys import MODEL_UPDATE_NOISE
    from tests.strategies._flower import context, set_task_identity

    set_task_identity()
    received = np.array([0.5, -0.25, 1.0, 0.0])
    update = np.array([0.4, -0.4, 0.4, -0.4])  # norm 0.8 < C: no clipping
    from fedpriv.node.policy import NodePolicy

    # a simulation (the audit's setting): noise keyed by the run seed, as the simulation policy allows
    app = ClientApp(mods=[LdpMod(RunConfig().with_values({"epsilon": 1.0, "seed": 5}), policy=NodePolicy.simulation())])

    @app.train()
    def train(msg: Message, ctxt: object) -> Message:  # noqa: ARG001 - Flower's signature
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(received + update)}),
                                   "metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)

    msg = Message(RecordDict({"arrays": ArrayRecord({"w": Array(received)}), "config": ConfigRecord({"server-round": 3})}),
                  1, MessageType.TRAIN)
    reply = app(msg, context(2, 4))
    assert not reply.has_error(), reply.error
    pert = mod_perturbation(LdpSgdConfig.of(RunConfig().with_values({"epsilon": 1.0})))
    expected = mod_release(received, received + update, pert, 1, stream(5, 3, 2, MODEL_UPDATE_NOISE))[0]
    np.testing.assert_array_equal(reply.content["arrays"]["w"].numpy(), expected)
    assert reply.content["metrics"]["guarantee-epsilon"] == get_target("ldp-mod", 1.0).claim.epsilon


# ------------------------------------------------------------------------------ CLI
runner = CliRunner()


def test_cli_audits_one_target_with_a_table() -> None:
    result = runner.invoke(app, ["audit", "piecewise", "--epsilon", "1", "--samples", "4000", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "piecewise" in result.output and "consistent" in result.output and "neighbours: x = -1" in result.output
    assert "1 consistent, 0 violated" in result.output
    assert "target 1/1: piecewise epsilon_lb=" in result.output  # the progress line off a terminal


def test_cli_audits_all_targets() -> None:
    result = runner.invoke(app, ["audit", "all", "--epsilon", "1", "--samples", "2000"])
    assert result.exit_code == 0, result.output
    assert f"{len(TARGETS)} consistent, 0 violated" in result.output
    assert all(name in result.output for name in TARGETS)


def test_cli_exits_1_on_a_violated_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TARGETS, "laplace", lambda eps, delta: mechanism_target(
        LaplaceMechanism(2 * eps), name="laplace", claim=Guarantee(epsilon=eps)))
    result = runner.invoke(app, ["audit", "laplace", "--epsilon", "1", "--samples", "4000"])
    assert result.exit_code == 1, result.output
    assert "violated" in result.output and "0 consistent, 1 violated (laplace)" in result.output


@pytest.mark.parametrize("args, match", [
    (["lapalce", "--epsilon", "1"], "MECHANISM must be one of laplace, gaussian"),
    (["laplace", "--epsilon", "0"], "--epsilon must be > 0"),
    (["laplace", "--epsilon", "-1"], "--epsilon must be > 0"),
    (["laplace", "--epsilon", "1", "--confidence", "1.5"], "--confidence must be in (0, 1)"),
    (["laplace", "--epsilon", "1", "--delta", "0"], "--delta must be in (0, 1)"),
])
def test_cli_refuses_bad_input_naming_the_parameter(args: list[str], match: str) -> None:
    result = runner.invoke(app, ["audit", *args])
    assert result.exit_code == 2
    assert match in " ".join(result.output.replace("│", " ").split())
