"""The online-SGD workload: the user's handler, the relay handler's bits, refusals, the server protocol, the Flower apps.

Oracles: the core functions a user calls (``user_data``, ``client_gradient`` on its own streams),
the simulator (:func:`fedpriv.federated.online_sgd.simulate`), and the stream run one user per
exchange through the per-user handler — the relay handler must give its final state bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from itertools import count

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.analysis.online import gdp_to_eps_delta, noise_scale
from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import (
    DATA,
    NOISE,
    OnlineSgdConfig,
    c0,
    client_gradient,
    initial_theta,
    simulate,
    user_budgets,
    user_data,
    user_rows,
)
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rundir import Committed
from fedpriv.workloads import (
    Arrays,
    Config,
    Metrics,
    Node,
    Outcome,
    ProtocolError,
    Refusal,
    Reply,
    Request,
    get_workload,
)
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.online_sgd.client import ANSWERED
from fedpriv.workloads.online_sgd.contract import NOISY_GRAD, STEP, StreamState, gradient_request
from fedpriv.workloads.online_sgd.server import absorb_gradient, online_sgd_spend
from fedpriv.workloads.protocol import Relay, drive
from strategies.server_app import ServerResult, make_server_app
from tests.strategies._flower import InProcessGrid, set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
N, R = 9, 3
BASE = {"task": "online-sgd", "online-steps": N, "repetitions": R, "online-dims": 3, "seed": 7}
WORKLOAD = get_workload("online-sgd")
CONFIGS = {
    "huber-gdp": {},
    "logistic-laplace": {"online-model": "logistic", "online-noise": "laplace", "epsilon": 2.0, "online-alpha": 0.6},
    "huber-gaussian-clip": {"online-noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "online-bounding": "clip"},
    "logistic-none": {"online-model": "logistic", "online-noise": "none"},
    "multinomial-gdp-uniform": {"online-model": "multinomial", "online-classes": 3, "online-budget-law": "uniform"},
    "huber-laplace-groups": {"online-noise": "laplace", "online-budget-law": "groups",
                             "online-budget-groups": "0.5:0.25,2:0.75"},
}


def _setup(**values):
    return WORKLOAD.setup(RunConfig.from_mapping({**BASE, **values}))


SETUP = _setup()
CFG = SETUP.cfg
P = CFG.grad_dim
THETA0 = np.linspace(-0.5, 0.5, R * P).reshape(R, P) + np.array([0.0] * (P - 1) + [1.0])  # σ > 0


def _node(cid: int, setup=SETUP) -> Node:
    """User ``cid + 1``'s node in a simulation: its randomness keyed by the run seed."""
    return Node(client=cid, data=WORKLOAD.load_clients(setup)[cid], randomness=KeyedRandomness(setup.cfg.seed))


def _ask(cid: int, theta=THETA0, setup=SETUP, **changes) -> Request:
    """The honest request of client ``cid``'s step at ``theta`` with ``changes`` applied to its config."""
    message = gradient_request(setup.cfg, cid + 1, theta)
    return Request(client=cid, kind="train", message=Message_({"arrays": message["arrays"],
                                                               "config": Config({**message["config"], **changes})}))


def _relay(setup, first: int, last: int, theta=None, theta_bar=None) -> Relay:
    """The server's relay over steps first..last, from θ_0 (or the given iterates)."""
    cfg = setup.cfg
    theta = initial_theta(cfg) if theta is None else theta
    theta_bar = np.zeros_like(theta) if theta_bar is None else theta_bar
    return Relay(clients=np.arange(first - 1, last), kind="train",
                 state=StreamState(theta=theta, theta_bar=theta_bar, step=first - 1),
                 request=lambda state, j: gradient_request(cfg, state.step + 1, state.theta),
                 absorb=absorb_gradient(cfg, last))


# --------------------------------------------------------------------------- the user's handler
@pytest.mark.parametrize("cid", [0, 4, N - 1])
def test_a_users_answer_is_the_core_functions_on_its_own_streams(cid):
    reply = WORKLOAD.handler(SETUP)(_ask(cid), _node(cid))
    step = cid + 1
    x, y = user_data(CFG, np.full(R, step), user_rows(CFG, step, DATA))
    want = client_gradient(CFG, THETA0, x, y, user_rows(CFG, step, NOISE))
    np.testing.assert_array_equal(reply["arrays"][NOISY_GRAD], want)
    assert dict(reply["metrics"]) == {CLIENT_ID: cid, STEP: step}


def test_the_first_users_report_gives_the_simulators_first_step():
    """Client 0 is user 1: θ_1 = θ_0 − η·g̃ (logistic: no projection) in every replication."""
    setup = _setup(**{"online-model": "logistic", "online-steps": 2})
    cfg = dataclasses.replace(setup.cfg, steps=1, quantity_draws=2000, loss_samples=0)
    theta0 = initial_theta(cfg)
    g = WORKLOAD.handler(setup)(_ask(0, theta0, setup), _node(0, setup))["arrays"][NOISY_GRAD]
    np.testing.assert_array_equal(simulate(cfg).theta_sgd, theta0 - cfg.eta * g)


def test_the_reply_holds_only_the_privatized_gradient_and_the_ids():
    reply = WORKLOAD.handler(SETUP)(_ask(2), _node(2))
    assert set(reply.records) == {"arrays", "metrics"} and set(reply["arrays"]) == {NOISY_GRAD}
    g = reply["arrays"][NOISY_GRAD]
    assert g.shape == (R, P) and g.dtype == np.float64
    # the clean Mallows gradient of the Huber model has norm <= sqrt(2c² + (c² − κ)²/4) < 2 (§8.1); 1-GDP noise
    # C0·ω (s.d. 2·C0 per coordinate) does not
    assert np.all(np.linalg.norm(g, axis=1) > 2.0)


def test_each_user_answers_once_and_only_its_own_step():
    node, handle = _node(1), WORKLOAD.handler(SETUP)
    first = handle(_ask(1), node)["arrays"][NOISY_GRAD]
    with pytest.raises(Refusal, match="step 2 again after it answered step 2"):
        handle(_ask(1), node)
    assert node.state[ANSWERED] == 2
    with pytest.raises(Refusal, match=r"expected step = 4 \(client 3 is user 4"):
        handle(_ask(1), _node(3))  # user 2's step asked of user 4
    np.testing.assert_array_equal(handle(_ask(1), _node(1))["arrays"][NOISY_GRAD], first)  # same user, same bits


@pytest.mark.parametrize("changes, fragment", [
    ({"mu": 2.0}, "expected mu = 1.0"),
    ({"noise": "laplace"}, "expected noise = 'gdp'"),
    ({"epsilon": 1.0}, "expected epsilon = None"),
    ({"c0": 1.0}, "expected c0 = 1.955"),
    ({"c0": float(np.nextafter(c0(CFG), 3.0))}, "expected c0 = 1.955"),  # one ulp off: C0 travels exactly
    ({"convention": "as_printed"}, "expected convention = 'standard'"),
    ({"bounding": "clip"}, "expected bounding = 'mallows'"),
    ({"model": "logistic"}, "expected model = 'linear-huber'"),
    ({"d": 5}, "expected d = 3"),
    ({"replications": 4}, "expected replications = 3"),
    ({"replications": 3.0}, "expected replications = 3"),
    ({STEP: 0}, "expected step = 1"),
    ({STEP: True}, "expected step = 1"),
    ({"op": "estimate"}, "expected op = 'gradient'"),
    ({"budget-law": "uniform"}, "expected budget-law = None"),
    ({"classes": 3}, "expected classes = None"),
])
def test_a_request_for_another_budget_or_a_malformed_one_is_refused(changes, fragment):
    node = _node(0)
    with pytest.raises(Refusal, match=fragment):
        WORKLOAD.handler(SETUP)(_ask(0, **changes), node)
    assert ANSWERED not in node.state
    WORKLOAD.handler(SETUP)(_ask(0), node)  # the honest request still gets its one answer


@pytest.mark.parametrize("theta, fragment", [
    (np.zeros((R, P + 1)), f"shape ({R}, {P})"),
    (np.zeros(P), f"shape ({R}, {P})"),
    (THETA0.astype(np.float32), "dtype float32"),
    (np.full((R, P), np.nan), "a finite float64 array"),
])
def test_a_malformed_theta_is_refused(theta, fragment):
    with pytest.raises(Refusal, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        WORKLOAD.handler(SETUP)(_ask(0, theta), _node(0))


def test_a_request_without_theta_is_refused():
    request = Request(client=0, kind="train", message=Message_({"config": gradient_request(CFG, 1, THETA0)["config"]}))
    with pytest.raises(Refusal, match="expected Arrays 'arrays' holding 'theta'"):
        WORKLOAD.handler(SETUP)(request, _node(0))


# --------------------------------------------------------------------------- the relay handler
@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("first, last", [(1, N), (4, 7)])
def test_the_relay_handler_gives_the_state_of_asking_one_user_after_another(name, first, last):
    """The in-process relay handler (the simulator's vectorized advance) == the per-user path, bit for bit."""
    setup = _setup(**CONFIGS[name])
    theta = initial_theta(setup.cfg) + (0.25 if first > 1 else 0.0)  # a mid-stream start
    one_by_one = _relay(setup, first, last, theta, theta / 2).run(InProcess(WORKLOAD, setup, "fast"))
    together = WORKLOAD.relay_handler(setup, "fast", {})(_relay(setup, first, last, theta, theta / 2))
    assert (together.step, together.projections) == (one_by_one.step, one_by_one.projections) == (
        last, one_by_one.projections)
    np.testing.assert_array_equal(together.theta, one_by_one.theta)
    np.testing.assert_array_equal(together.theta_bar, one_by_one.theta_bar)
    assert not np.array_equal(together.theta, theta)


def test_the_relay_handler_refuses_to_go_back_over_the_stream():
    run = WORKLOAD.relay_handler(SETUP, "fast", {})
    state = run(_relay(SETUP, 1, 4))
    with pytest.raises(ProtocolError, match="step 2: client 1 did not answer: Refusal: expected the stream to go "
                                            "on at step 5"):
        run(_relay(SETUP, 2, 5, state.theta, state.theta_bar))
    run(_relay(SETUP, 5, N, state.theta, state.theta_bar))  # going on is fine


def test_the_relay_handler_refuses_a_request_the_users_would_refuse():
    relay = _relay(SETUP, 1, 3)
    bad = Relay(clients=relay.clients, kind="train", state=relay.state, absorb=relay.absorb,
                request=lambda state, j: gradient_request(_setup(**{"online-mu": 2.0}).cfg, state.step + 1,
                                                          state.theta))
    with pytest.raises(ProtocolError, match=r"step 1: client 0 did not answer: Refusal: expected mu = 1.0"):
        WORKLOAD.relay_handler(SETUP, "fast", {})(bad)


def test_relay_runs_its_clients_in_order_and_drive_uses_a_relay_handler():
    asked = []

    def exchange(requests):
        asked.extend(r.client for r in requests)
        return [Reply(client=r.client, message=Message_({"metrics": Metrics(v=r.message["config"]["x"] * 2)}))
                for r in requests]

    relay = Relay(clients=np.array([5, 3, 8]), kind="query", state=1,
                  request=lambda state, j: Message_({"config": Config(x=state)}),
                  absorb=lambda state, j, reply: state + reply.message["metrics"]["v"])

    def protocol():
        final = yield relay
        return Outcome(info={"final": final})

    assert drive(protocol(), exchange, lambda c: {}).info["final"] == 27 and asked == [5, 3, 8]  # 1 → 3 → 9 → 27
    assert drive(protocol(), exchange, lambda c: {}, relay=lambda step: -1).info["final"] == -1


# --------------------------------------------------------------------------- the server protocol
def _protocol_with(exchange, setup=SETUP):
    records = []

    def commit(step):
        records.append(dict(step.record))
        return dict(step.record)

    return records, drive(WORKLOAD.protocol(setup, WORKLOAD.load_server(setup), Committed()), exchange, commit)


def _corrupting(at_step: int, change):
    honest = InProcess(WORKLOAD, SETUP, "fast")

    def exchange(requests):
        replies = honest(requests)
        out = []
        for r in replies:
            if r.ok and r.message["metrics"][STEP] == at_step:
                arrays, metrics = change(dict(r.message["arrays"]), dict(r.message["metrics"]))
                r = Reply(client=r.client, message=Message_({"arrays": Arrays(arrays), "metrics": Metrics(metrics)}))
            out.append(r)
        return out

    return exchange


@pytest.mark.parametrize("change, fragment", [
    (lambda a, m: ({NOISY_GRAD: np.full((R, P), np.nan)}, m), f"must be a finite float64 array of shape ({R}, {P})"),
    (lambda a, m: ({NOISY_GRAD: np.zeros((R, P - 1))}, m), f"got dtype float64, shape ({R}, {P - 1})"),
    (lambda a, m: ({NOISY_GRAD: a[NOISY_GRAD].astype(np.float32)}, m), "got dtype float32"),
    (lambda a, m: ({"other": a[NOISY_GRAD]}, m), "must hold Arrays 'arrays'/'noisy-grad'"),
    (lambda a, m: (a, {**m, CLIENT_ID: 3}), "expected a reply of client 4 for step 5, got client-id=3"),
    (lambda a, m: (a, {**m, STEP: 6}), "expected a reply of client 4 for step 5, got client-id=4, step=6"),
])
def test_a_malformed_reply_stops_the_run_and_the_finished_checkpoints_stay(change, fragment):
    records, outcome = _protocol_with(_corrupting(5, change))
    assert fragment in outcome.error and outcome.error.startswith("step 5")
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # checkpoints 1..4 finished before user 5 answered


def test_a_user_who_does_not_answer_stops_the_run_with_the_reason():
    def refusing(requests):
        return [Reply(client=r.client, error="Refusal: not today") for r in requests]

    records, outcome = _protocol_with(refusing)
    assert records == [] and outcome.error == "step 1: client 0 did not answer: Refusal: not today"


def test_the_protocol_one_user_per_exchange_commits_what_the_relay_handler_does():
    records, outcome = _protocol_with(InProcess(WORKLOAD, SETUP, "fast"))
    transport = InProcess(WORKLOAD, SETUP, "fast")
    fast = []
    fast_outcome = drive(WORKLOAD.protocol(SETUP, None, Committed()), transport,
                         lambda c: fast.append(dict(c.record)) or dict(c.record), relay=transport.relay)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in fast] and len(strip) == N
    for name, value in outcome.arrays.items():
        np.testing.assert_array_equal(value, fast_outcome.arrays[name], err_msg=name)


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


# --------------------------------------------------------------------------- the Flower apps
CONFIG = RunConfig.from_mapping(BASE)


def _flower(app, cid: int, content: RecordDict, node_config: dict | None = None) -> Message:
    set_task_identity()
    if node_config is None:
        node_config = {"partition-id": cid, "num-partitions": N}
    ctx = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})
    return app(Message(content, 1, MessageType.TRAIN), ctx)


def test_the_flower_client_app_answers_whoami_and_the_users_gradient():
    app = make_client_app(CONFIG, policy=SIMULATION)
    assert dict(_flower(app, 4, whoami_request()).content["metrics"]) == {CLIENT_ID: 4}
    reply = _flower(app, 3, to_recorddict(_ask(3).message))
    assert not reply.has_error(), reply.error.reason
    direct = WORKLOAD.handler(SETUP)(_ask(3), _node(3))
    np.testing.assert_array_equal(reply.content.array_records["arrays"][NOISY_GRAD].numpy(), direct["arrays"][NOISY_GRAD])
    assert set(reply.content) == {"arrays", "metrics"} and not reply.content.config_records


def test_the_flower_client_app_refuses_a_second_request_in_the_same_node():
    app = make_client_app(CONFIG, policy=SIMULATION)
    set_task_identity()
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 2, "num-partitions": N}, state=RecordDict(),
                  run_config={})
    assert not app(Message(to_recorddict(_ask(2).message), 1, MessageType.TRAIN), ctx).has_error()
    again = app(Message(to_recorddict(_ask(2).message), 1, MessageType.TRAIN), ctx)
    assert again.has_error() and "online-sgd client 2 refused: expected each user to answer once" in again.error.reason


@pytest.mark.parametrize("node_config, fragment", [
    ({}, "partition-id must be one of this run's client ids"),
    ({"partition-id": N, "num-partitions": N}, "partition-id must be one of this run's client ids"),
    ({"partition-id": 0, "num-partitions": N + 1}, f"num-partitions must equal the run's {N} clients"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config, fragment):
    reply = _flower(make_client_app(CONFIG, policy=SIMULATION), 0, to_recorddict(_ask(0).message), node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_secret_nodes_noise_is_neither_the_run_seeds_nor_another_secret_nodes():
    keyed = [WORKLOAD.handler(SETUP)(_ask(4), _node(4))["arrays"][NOISY_GRAD] for _ in range(2)]
    np.testing.assert_array_equal(keyed[0], keyed[1])
    secret = []
    for _ in range(2):
        node = Node(client=4, data=WORKLOAD.load_clients(SETUP)[4], randomness=SecretRandomness())
        secret.append(WORKLOAD.handler(SETUP)(_ask(4), node)["arrays"][NOISY_GRAD])
    a, b = secret
    assert a.shape == b.shape == keyed[0].shape and np.all(a != keyed[0]) and np.all(a != b)  # continuous noise


def test_a_secret_nodes_noise_has_the_gdp_laws_spread():
    """ω ~ N(0, (2/μ)² I) from the node's own stream: g̃ − g = −C0·ω, so (g̃ − g)/(2·C0/μ) is standard normal.

    400 secret draws of the R×P noise: its mean is within 5 standard errors of 0 and its variance within 5 of 1
    (the variance of a sample variance of n normals is 2/(n−1)); a node drawing at another scale fails."""
    node_data = WORKLOAD.load_clients(SETUP)[2]
    clean = client_gradient(dataclasses.replace(CFG, noise="none", mu=None), THETA0, node_data.x, node_data.y, None)
    z = []
    for _ in range(400):
        node = Node(client=2, data=node_data, randomness=SecretRandomness())
        g = WORKLOAD.handler(SETUP)(_ask(2), node)["arrays"][NOISY_GRAD]
        z.append((clean - g) / (c0(CFG) * 2.0 / CFG.mu))
    z = np.concatenate(z).ravel()
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var(ddof=1) - 1.0) < 5 * math.sqrt(2 / (n - 1))


class PushPullGrid(InProcessGrid):
    """The in-process Grid with push/pull (the generic ServerApp's own poll loop): each message answered on push."""

    ids = count()

    def push_messages(self, messages):
        self.replies = getattr(self, "replies", {})
        out = []
        for m in messages:
            mid = f"m{next(self.ids)}"
            m.metadata.__dict__["_message_id"] = mid
            (self.replies[mid],) = self.send_and_receive([m])
            out.append(mid)
        return out

    def pull_messages(self, message_ids):
        return [self.replies.pop(mid) for mid in message_ids if mid in self.replies]


@pytest.mark.parametrize("name", ["huber-gdp", "multinomial-gdp-uniform", "huber-laplace-groups"])
def test_the_generic_server_app_over_a_grid_runs_what_the_in_process_engine_runs(name):
    """Flower's path without Ray: the generic ServerApp and ClientApp, one node per user, equal the in-process run."""
    set_task_identity()
    config, setup = RunConfig.from_mapping({**BASE, **CONFIGS[name]}), _setup(**CONFIGS[name])
    holder = ServerResult()
    server = make_server_app(config, result=holder, engine="flower")
    server(PushPullGrid(make_client_app(config, policy=SIMULATION), N), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                               run_config={}))
    assert holder.error is None and holder.output.outcome.error is None
    transport = InProcess(WORKLOAD, setup, "fast")
    fast = []
    outcome = drive(WORKLOAD.protocol(setup, None, Committed()), transport,
                    lambda c: fast.append(dict(c.record)) or dict(c.record), relay=transport.relay)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in holder.output.records]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in fast]
    for name, value in outcome.arrays.items():
        np.testing.assert_array_equal(holder.output.outcome.arrays[name], value, err_msg=name)
    assert holder.output.summary["engine"] == "flower" and holder.output.summary["final"]["steps"] == N


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
    terms = WORKLOAD.node_terms(CONFIG)
    assert (terms.task, terms.mechanisms, dict(terms.features)) == ("online-sgd", (("online-noise", "gaussian"),), {})
    assert terms.sizes == (("clients", "online-steps", N),
                           ("dims", "repetitions × gradient dimension (online-model, online-dims, online-classes)",
                            R * P),
                           ("data-values", "repetitions × (online-dims + 1)", R * 4))
    assert (terms.steps, terms.step_key) == (N, "step")
    NodePolicy.default().admit(terms)
    for name, noise, p in (("logistic-laplace", "laplace", 4), ("huber-gaussian-clip", "gaussian", P),
                           ("multinomial-gdp-uniform", "gaussian", 8)):
        terms = WORKLOAD.node_terms(RunConfig.from_mapping({**BASE, **CONFIGS[name]}))
        assert terms.mechanisms == (("online-noise", noise),) and terms.sizes[1][2] == R * p, name
        assert p == _setup(**CONFIGS[name]).cfg.grad_dim


def test_the_non_private_baseline_needs_the_simulation_only_no_noise_switch():
    terms = WORKLOAD.node_terms(RunConfig.from_mapping({**BASE, **CONFIGS["logistic-none"]}))
    assert dict(terms.features) == {"no-noise": ("online-noise", "none")} and terms.mechanisms == ()
    with pytest.raises(PolicyRefusal, match="node policy refuses online-noise = 'none': .*'no-noise'") as refused:
        NodePolicy.default().admit(terms)
    assert refused.value.key == "online-noise"
    SIMULATION.admit(terms)


@pytest.mark.parametrize("mu, delta", [(1.0, 1e-5), (0.5, 1e-6), (2.0, 1e-5), (3.0, 1e-3)])
def test_a_gdp_gradient_is_charged_its_dual_epsilon_at_the_runs_delta(mu, delta):
    setup = _setup(**{"online-mu": mu, "delta": delta})
    release = WORKLOAD.release_of(setup, _ask(2, setup=setup), _node(2, setup))
    assert (release.step, release.delta, release.key, release.asked) == (3, delta, "online-mu", mu)
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(mu, delta), rel=1e-9)
    assert _delta_of_gdp(mu, release.epsilon) == pytest.approx(delta, rel=1e-6)


def test_the_charge_is_the_noise_drawn_not_the_budget_named():
    """as_printed drops the square of μ: at μ = 0.5 the s.d. is √(4/μ) = 2/√μ, so the noise is √μ-GDP, not μ-GDP."""
    setup = _setup(**{"online-mu": 0.5, "online-convention": "as_printed"})
    release = WORKLOAD.release_of(setup, _ask(0, setup=setup), _node(0, setup))
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(math.sqrt(0.5), 1e-5), rel=1e-9)
    assert release.epsilon > _epsilon_of_gdp(0.5, 1e-5)


@pytest.mark.parametrize("epsilon, delta, convention", [(0.5, 1e-6, "standard"), (0.2, 1e-5, "as_printed"),
                                                        (2.0, 1e-5, "standard")])
def test_a_gaussian_gradient_is_charged_the_exact_epsilon_of_its_sigma(epsilon, delta, convention):
    """σ² = 8 ln(1.25/δ)/ε² (standard; ε, not ε², as printed) on sensitivity 2 is (2/σ)-GDP: the ε at δ of that.
    Where the classical calibration holds (ε < 1, standard) it is at most ε; as printed at ε < 1 it is more."""
    setup = _setup(**{"online-noise": "gaussian", "epsilon": epsilon, "delta": delta, "online-convention": convention})
    assert any("proven only for epsilon < 1" in w for w in setup.warnings) is (epsilon >= 1)
    release = WORKLOAD.release_of(setup, _ask(0, setup=setup), _node(0, setup))
    sigma = math.sqrt(8 * math.log(1.25 / delta) / epsilon ** (2 if convention == "standard" else 1))
    assert (release.delta, release.key, release.asked) == (delta, "epsilon", epsilon)
    assert release.epsilon == pytest.approx(_epsilon_of_gdp(2 / sigma, delta), rel=1e-9)
    if convention == "standard" and epsilon < 1:
        assert release.epsilon <= epsilon
    if convention == "as_printed":
        assert release.epsilon > epsilon


def test_laplace_and_no_noise_charges():
    laplace = _setup(**CONFIGS["logistic-laplace"])
    release = WORKLOAD.release_of(laplace, _ask(5, setup=laplace), _node(5, laplace))
    assert (release.step, release.epsilon, release.delta, release.key) == (6, 2.0, 0.0, "epsilon")
    assert noise_scale("laplace", laplace.cfg.grad_dim, epsilon=release.epsilon) == 2 * math.sqrt(4) / 2.0
    none = _setup(**CONFIGS["logistic-none"])
    release = WORKLOAD.release_of(none, _ask(0, setup=none), _node(0, none))
    assert (release.epsilon, release.delta, release.key, release.asked) == (math.inf, 0.0, "online-noise", "none")


@pytest.mark.parametrize("name, key", [("huber-laplace-groups", "online-budget-groups"),
                                       ("multinomial-gdp-uniform", "online-budget-high")])
def test_each_user_is_charged_its_own_budget(name, key):
    setup = _setup(**CONFIGS[name])
    budgets = user_budgets(setup.cfg, np.arange(1, N + 1))
    for cid in range(N):
        release = WORKLOAD.release_of(setup, _ask(cid, setup=setup), _node(cid, setup))
        assert (release.step, release.key, release.asked) == (cid + 1, key, budgets[cid])
        want = budgets[cid] if setup.cfg.noise == "laplace" else _epsilon_of_gdp(budgets[cid], 1e-5)
        assert release.epsilon == pytest.approx(want, rel=1e-9)


def test_release_of_refuses_another_users_step():
    with pytest.raises(Refusal, match=r"expected step = 4 \(client 3 is user 4"):
        WORKLOAD.release_of(SETUP, _ask(1), _node(3))


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
