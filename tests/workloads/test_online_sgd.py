"""The online-SGD workload: the user's handler, the relay handler's bits, refusals and the server protocol.

Oracles: the core functions a user calls (``user_data``, ``client_gradient`` on its own streams),
the simulator (:func:`fedpriv.federated.online_sgd.simulate`), and the stream run one user per
exchange through the per-user handler — the relay handler must give its final state bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from clients.app import CLIENT_ID
from fedpriv.federated.online_sgd import DATA, NOISE, c0, client_gradient, initial_theta, simulate, user_data, user_rows
from fedpriv.rundir import Committed
from fedpriv.workloads import Arrays, Config, Metrics, Outcome, ProtocolError, Refusal, Reply, Request
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.online_sgd.client import ANSWERED
from fedpriv.workloads.online_sgd.contract import NOISY_GRAD, STEP, gradient_request
from fedpriv.workloads.protocol import Relay, drive
from tests.workloads._online_sgd import CFG, CONFIGS, SETUP, THETA0, WORKLOAD, N, P, R, _ask, _node, _relay, _setup


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
