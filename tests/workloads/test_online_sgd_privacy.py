"""The online-SGD workload's privacy: the spend of one release, and a deployed node's terms, charges and ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import make_client_app
from clients.records import to_recorddict
from fedpriv.analysis.online import gdp_to_eps_delta, noise_scale
from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import OnlineSgdConfig, user_budgets
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.workloads import Refusal
from fedpriv.workloads.online_sgd.contract import NOISY_GRAD
from fedpriv.workloads.online_sgd.server import online_sgd_spend
from tests.strategies._flower import set_task_identity
from tests.workloads._online_sgd import BASE, CONFIG, CONFIGS, SETUP, SIMULATION, WORKLOAD, N, P, R, _ask, _node, _setup


# --------------------------------------------------------------------------- privacy of one release
@pytest.mark.parametrize("kwargs, epsilon, delta, holds", [
    ({"noise": "laplace", "epsilon": 2.0, "mu": None}, 2.0, 0.0, True),
    ({"noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "mu": None}, 0.5, 1e-6, True),
    ({"noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "mu": None, "convention": "as_printed"}, 0.5, 1e-6, False),
    ({"noise": "gdp", "mu": 2.0, "convention": "as_printed"}, None, 1e-5, True),   # √(4/μ) > 2/μ: more noise
    ({"noise": "gdp", "mu": 0.5, "convention": "as_printed"}, None, 1e-5, False),  # less noise than 0.5-GDP needs
    ({"noise": "none", "mu": None}, math.inf, 0.0, False),
])
def test_online_sgd_spend(kwargs, epsilon, delta, holds):
    cfg = OnlineSgdConfig(steps=3, **kwargs)
    spend = online_sgd_spend(cfg, 2)
    assert (spend.server_round, spend.releases, spend.delta, spend.holds) == (2, 1, delta, holds)
    if epsilon is not None:
        assert spend.epsilon == epsilon
    else:  # GDP: the effective μ of the noise drawn is 1/z, and ε is its profile's point at δ
        mu_eff = 1.0 / spend.noise_multiplier
        assert math.isclose(float(gdp_to_eps_delta(mu_eff, spend.epsilon)), delta, rel_tol=1e-6)
        assert (mu_eff <= cfg.mu) is holds


@pytest.mark.parametrize("changes, fragment", [
    ({"budget-law": "constant"}, "expected budget-law = 'groups'"),
    ({"budget-groups": "0.5:0.5,2.0:0.5"}, "expected budget-groups = '0.5:0.25,2.0:0.75'"),
    ({"epsilon": 0.5}, "expected epsilon = 2.0"),
])
def test_a_heterogeneous_user_refuses_a_request_naming_another_law(changes, fragment):
    setup = _setup(**CONFIGS["huber-laplace-groups"])
    with pytest.raises(Refusal, match=fragment):
        WORKLOAD.handler(setup)(_ask(0, setup=setup, **changes), _node(0, setup))


def test_each_users_ledger_entry_is_its_own_budget():
    cfg = _setup(**CONFIGS["huber-laplace-groups"]).cfg
    budgets = user_budgets(cfg, np.arange(1, N + 1))
    assert set(budgets.tolist()) == {0.5, 2.0}  # both groups among the 9 users
    for step in range(1, N + 1):
        assert online_sgd_spend(cfg, step).epsilon == budgets[step - 1]


def test_gaussian_with_epsilon_at_least_one_is_recorded_as_not_holding():
    with pytest.warns(UserWarning, match="proven only for epsilon < 1"):
        cfg = OnlineSgdConfig(steps=3, noise="gaussian", epsilon=2.0, delta=1e-5, mu=None)
    assert online_sgd_spend(cfg, 1).holds is False



# --------------------------------------------------------------------------- a deployed node's policy and ledger
def _delta_of_gdp(mu: float, epsilon: float) -> float:
    """δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong, Roth and Su 2022, Corollary 2.13), with scipy's normal CDF."""
    from scipy.stats import norm

    return float(norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2))


def _epsilon_of_gdp(mu: float, delta: float) -> float:
    """The ε with δ_μ(ε) = δ by bisection (δ_μ decreases in ε): an oracle apart from fedpriv's brentq."""
    lo, hi = 0.0, 1.0
    while _delta_of_gdp(mu, hi) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _delta_of_gdp(mu, mid) > delta else (lo, mid)
    return hi


def test_node_terms_name_the_noise_the_sizes_and_the_stream():
    terms = WORKLOAD.deployment.node_terms(CONFIG)
    assert (terms.task, terms.mechanisms, dict(terms.features)) == ("online-sgd", (("online-noise", "gaussian"),), {})
    assert terms.sizes == (("clients", "online-steps", N),
                           ("dims", "repetitions × gradient dimension (online-model, online-dims, online-classes)",
                            R * P),
                           ("data-values", "repetitions × (online-dims + 1)", R * 4))
    assert (terms.steps, terms.step_key) == (N, "step")
    NodePolicy.default().admit(terms)
    for name, noise, p in (("logistic-laplace", "laplace", 4), ("huber-gaussian-clip", "gaussian", P),
                           ("multinomial-gdp-uniform", "gaussian", 8)):
        terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, **CONFIGS[name]}))
        assert terms.mechanisms == (("online-noise", noise),) and terms.sizes[1][2] == R * p, name
        assert p == _setup(**CONFIGS[name]).cfg.grad_dim


def test_the_non_private_baseline_needs_the_simulation_only_no_noise_switch():
    terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, **CONFIGS["logistic-none"]}))
    assert dict(terms.features) == {"no-noise": ("online-noise", "none")} and terms.mechanisms == ()
    with pytest.raises(PolicyRefusal, match="node policy refuses online-noise = 'none': .*'no-noise'") as refused:
        NodePolicy.default().admit(terms)
    assert refused.value.key == "online-noise"
    SIMULATION.admit(terms)


@pytest.mark.parametrize("mu, delta", [(1.0, 1e-5), (0.5, 1e-6), (2.0, 1e-5), (3.0, 1e-3)])
def test_a_gdp_gradient_is_charged_its_dual_epsilon_at_the_runs_delta(mu, delta):
    setup = _setup(**{"online-mu": mu, "delta": delta})
    release = WORKLOAD.deployment.release_of(setup, _ask(2, setup=setup), _node(2, setup))
    assert (release.step, release.delta, release.key, release.asked) == (3, delta, "online-mu", mu)
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(mu, delta), rel=1e-9)
    assert _delta_of_gdp(mu, release.epsilon) == pytest.approx(delta, rel=1e-6)


def test_the_charge_is_the_noise_drawn_not_the_budget_named():
    """as_printed drops the square of μ: at μ = 0.5 the s.d. is √(4/μ) = 2/√μ, so the noise is √μ-GDP, not μ-GDP."""
    setup = _setup(**{"online-mu": 0.5, "online-convention": "as_printed"})
    release = WORKLOAD.deployment.release_of(setup, _ask(0, setup=setup), _node(0, setup))
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(math.sqrt(0.5), 1e-5), rel=1e-9)
    assert release.epsilon > _epsilon_of_gdp(0.5, 1e-5)


@pytest.mark.parametrize("epsilon, delta, convention", [(0.5, 1e-6, "standard"), (0.2, 1e-5, "as_printed"),
                                                        (2.0, 1e-5, "standard")])
def test_a_gaussian_gradient_is_charged_the_exact_epsilon_of_its_sigma(epsilon, delta, convention):
    """σ² = 8 ln(1.25/δ)/ε² (standard; ε, not ε², as printed) on sensitivity 2 is (2/σ)-GDP: the ε at δ of that.
    Where the classical calibration holds (ε < 1, standard) it is at most ε; as printed at ε < 1 it is more."""
    setup = _setup(**{"online-noise": "gaussian", "epsilon": epsilon, "delta": delta, "online-convention": convention})
    assert any("proven only for epsilon < 1" in w for w in setup.warnings) is (epsilon >= 1)
    release = WORKLOAD.deployment.release_of(setup, _ask(0, setup=setup), _node(0, setup))
    sigma = math.sqrt(8 * math.log(1.25 / delta) / epsilon ** (2 if convention == "standard" else 1))
    assert (release.delta, release.key, release.asked) == (delta, "epsilon", epsilon)
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(2 / sigma, delta), rel=1e-9)
    if convention == "standard" and epsilon < 1:
        assert release.epsilon <= epsilon
    if convention == "as_printed":
        assert release.epsilon > epsilon


def test_laplace_and_no_noise_charges():
    laplace = _setup(**CONFIGS["logistic-laplace"])
    release = WORKLOAD.deployment.release_of(laplace, _ask(5, setup=laplace), _node(5, laplace))
    assert (release.step, release.epsilon, release.delta, release.key) == (6, 2.0, 0.0, "epsilon")
    assert noise_scale("laplace", laplace.cfg.grad_dim, epsilon=release.epsilon) == 2 * math.sqrt(4) / 2.0
    none = _setup(**CONFIGS["logistic-none"])
    release = WORKLOAD.deployment.release_of(none, _ask(0, setup=none), _node(0, none))
    assert (release.epsilon, release.delta, release.key, release.asked) == (math.inf, 0.0, "online-noise", "none")


@pytest.mark.parametrize("name, key", [("huber-laplace-groups", "online-budget-groups"),
                                       ("multinomial-gdp-uniform", "online-budget-high")])
def test_each_user_is_charged_its_own_budget(name, key):
    setup = _setup(**CONFIGS[name])
    budgets = user_budgets(setup.cfg, np.arange(1, N + 1))
    for cid in range(N):
        release = WORKLOAD.deployment.release_of(setup, _ask(cid, setup=setup), _node(cid, setup))
        assert (release.step, release.key, release.asked) == (cid + 1, key, budgets[cid])
        want = budgets[cid] if setup.cfg.noise == "laplace" else _epsilon_of_gdp(budgets[cid], 1e-5)
        assert release.epsilon == pytest.approx(want, rel=1e-9)


def test_release_of_refuses_another_users_step():
    with pytest.raises(Refusal, match=r"expected step = 4 \(client 3 is user 4"):
        WORKLOAD.deployment.release_of(SETUP, _ask(1), _node(3))


def _deployed(cid: int, run: int = 5) -> Context:
    """A message context of a deployed node of user ``cid + 1`` (no policy file: the default policy) in ``run``."""
    set_task_identity()
    return Context(run_id=run, node_id=cid + 1, node_config={"partition-id": cid, "num-partitions": N},
                   state=RecordDict(), run_config={})


def test_the_client_app_under_the_default_policy_charges_the_users_one_gradient():
    app = make_client_app(CONFIG)
    reply = app(Message(to_recorddict(_ask(6).message), 1, MessageType.TRAIN), _deployed(6))
    assert not reply.has_error(), reply.error.reason
    ledger = NodeLedger(default_ledger_path(6))
    (entry,) = ledger.releases()
    assert (entry["run"], entry["task"], entry["step"], entry["delta"]) == ("5", "online-sgd", 7, 1e-5)
    assert entry["epsilon"] == pytest.approx(_epsilon_of_gdp(1.0, 1e-5), rel=1e-9)
    again = app(Message(to_recorddict(_ask(6).message), 1, MessageType.TRAIN), _deployed(6))  # a fresh process
    assert again.has_error() and "step = 7" in again.error.reason and "already" in again.error.reason
    assert ledger.spent().releases == 1


def test_deployed_nodes_answer_with_their_own_noise_not_the_run_seeds():
    app = make_client_app(CONFIG)
    replies = [app(Message(to_recorddict(_ask(4).message), 1, MessageType.TRAIN), _deployed(4, run)) for run in (1, 2)]
    assert not any(r.has_error() for r in replies)
    a, b = (r.content.array_records["arrays"][NOISY_GRAD].numpy() for r in replies)
    keyed = WORKLOAD.handler(SETUP)(_ask(4), _node(4))["arrays"][NOISY_GRAD]
    assert np.all(a != keyed) and np.all(a != b)


def test_a_deployed_node_refuses_the_non_private_baseline_and_charges_nothing():
    app = make_client_app(RunConfig.from_mapping({**BASE, **CONFIGS["logistic-none"]}))
    setup = _setup(**CONFIGS["logistic-none"])
    reply = app(Message(to_recorddict(_ask(0, setup=setup).message), 1, MessageType.TRAIN), _deployed(0))
    assert reply.has_error() and "online-noise = 'none'" in reply.error.reason and "no-noise" in reply.error.reason
    assert NodeLedger(default_ledger_path(0)).spent().releases == 0
