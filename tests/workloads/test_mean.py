"""The mean workload's two sides: the user's report, the batch handler's bits, refusals, the Flower app, the server."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.config import RunConfig
from fedpriv.mechanisms.protocol import ReportSums, report_block
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rng import SERVER, stream
from fedpriv.rundir import Committed
from fedpriv.workloads import Arrays, Config, Metrics, Node, Refusal, Reply, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess, call
from fedpriv.workloads.mean.client import ANSWERED, PURPOSE
from fedpriv.workloads.mean.contract import DIMS, REPETITION, REPORT, VALUES, report_fields, report_request
from fedpriv.workloads.protocol import Broadcast, drive, stack_replies
from tests.strategies._flower import context, set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
N, D, M = 10, 6, 3
BASE = {"task": "mean", "num-clients": N, "mean-dims": D, "sample-dims": M, "repetitions": 2, "epsilon": 2.0,
        "seed": 11, "mean-data": "uniform"}
MECHANISMS = ["laplace", "gaussian", "piecewise", "duchi", "square_wave"]
WORKLOAD = get_workload("mean")
SETUP = WORKLOAD.setup(RunConfig.from_mapping({**BASE, "mechanism": "piecewise"}))


@pytest.fixture(params=[False, True], ids=["one chunk", "three chunks"])
def chunks(request, monkeypatch) -> bool:
    """Run a test with the users in one chunk, and with chunks of 4 users (collect_mean's layout for large n·d)."""
    if request.param:
        import fedpriv.mechanisms.protocol as protocol

        monkeypatch.setattr(protocol, "_CHUNK_CELLS", 4 * D)
    return request.param


def _setup(mechanism: str, **changes):
    return WORKLOAD.setup(RunConfig.from_mapping({**BASE, "mechanism": mechanism, **changes}))


def _node(cid: int, setup=SETUP) -> Node:
    """User ``cid``'s node in a simulation: its randomness keyed by the run seed."""
    return Node(client=cid, data=WORKLOAD.load_clients(setup)[cid], randomness=KeyedRandomness(setup.seed))


def _ask(node: Node, k: int = 1, setup=SETUP, /, **changes) -> Request:
    """The honest report request of repetition ``k`` with ``changes`` applied."""
    return Request(client=node.client, kind="query",
                   message=Message_({"config": Config({**report_fields(setup, k), **changes})}))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_users_report_is_its_row_of_the_in_process_collection(mechanism: str, chunks: bool) -> None:
    """User c's report of repetition k is row c of the draws collect_mean takes from stream(seed, k, SERVER, ...)."""
    setup = _setup(mechanism)
    x = setup.dataset.x
    for k in (1, 2):
        rng, c = stream(setup.seed, k, SERVER, PURPOSE), 4 if chunks else N
        rows = [report_block(x[s:s + c], setup.mech, M, rng) for s in range(0, N, c)]
        dims, values = (np.concatenate(part) for part in zip(*rows))
        for cid in range(N):
            reply = WORKLOAD.handler(setup)(_ask(_node(cid, setup), k, setup), _node(cid, setup))
            np.testing.assert_array_equal(reply[REPORT][DIMS], dims[cid])
            np.testing.assert_array_equal(reply[REPORT][VALUES], values[cid])
            assert dict(reply["metrics"]) == {CLIENT_ID: cid, REPETITION: k}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_batch_handler_gives_the_bits_of_every_user_answering_alone(mechanism: str, chunks: bool) -> None:
    """The server's broadcasts chunk after chunk, each answered in one pass from where the last left the stream."""
    setup = _setup(mechanism)
    batch_handler = WORKLOAD.batch_handler(setup, "fast", WORKLOAD.load_clients(setup), {})
    c = 4 if chunks else N
    for k in (1, 2):
        for start in range(0, N, c):
            step = Broadcast(clients=np.arange(start, min(start + c, N)), kind="query",
                             message=report_request(setup, k))
            alone = stack_replies(InProcess(WORKLOAD, setup, "fast")(step.requests()))
            together = batch_handler(step)
            assert batch_handler.cursor[:2] == (k, min(start + c, N))  # the one-pass path, not user by user
            np.testing.assert_array_equal(together.clients, alone.clients)
            assert together.records.keys() == alone.records.keys() and together.errors == alone.errors == {}
            for name in alone.records:
                assert together.records[name].keys() == alone.records[name].keys()
                for key, value in alone.records[name].items():
                    assert together.records[name][key].dtype == value.dtype, (name, key)
                    np.testing.assert_array_equal(together.records[name][key], value, err_msg=f"{name}/{key}")


@pytest.mark.parametrize("some", [[1, 5, 8], [4, 5, 6, 7], [0, 2]])
def test_a_broadcast_to_other_users_gets_their_rows(chunks: bool, some: list) -> None:
    """Not a chunk of the protocol's (or a chunk out of turn): each user's rows, user by user, the same bits."""
    c = 4 if chunks else N
    handler = WORKLOAD.batch_handler(SETUP, "fast", {}, {})
    whole = [handler(Broadcast(clients=np.arange(s, min(s + c, N)), kind="query", message=report_request(SETUP, 1)))
             for s in range(0, N, c)]
    part = WORKLOAD.batch_handler(SETUP, "fast", {}, {})(Broadcast(clients=np.array(some), kind="query",
                                                               message=report_request(SETUP, 1)))
    np.testing.assert_array_equal(part.clients, some)
    for key in (DIMS, VALUES):
        rows = np.concatenate([b.records[REPORT][key] for b in whole])
        np.testing.assert_array_equal(part.records[REPORT][key], rows[some])


def test_the_batch_handler_refuses_a_users_replay_as_its_node_would() -> None:
    answer = WORKLOAD.batch_handler(SETUP, "fast", {}, {})
    first = answer(Broadcast(clients=np.array([2, 3]), kind="query", message=report_request(SETUP, 1)))
    again = answer(Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP, 1)))
    assert list(first.clients) == [2, 3] and set(again.errors) == {2, 3}
    assert list(again.clients) == [c for c in range(N) if c not in (2, 3)]
    node = _node(2)
    WORKLOAD.handler(SETUP)(_ask(node), node)
    with pytest.raises(Refusal) as refused:
        WORKLOAD.handler(SETUP)(_ask(node), node)
    assert again.errors[2] == f"Refusal: {refused.value}"


@pytest.mark.parametrize("changes, fragment", [
    ({"mechanism": "laplace"}, "expected mechanism = 'piecewise'"),
    ({"epsilon": 4.0}, "expected epsilon = 2.0"),
    ({"epsilon": 2.0 + 1e-12}, "expected epsilon = 2.0"),
    ({"epsilon": "2.0"}, "expected epsilon = 2.0"),
    ({"delta": 1e-5}, "expected delta = 0.0"),
    ({"d": D + 1}, f"expected d = {D}"),
    ({"m": M + 1}, f"expected m = {M}"),
    ({"n": N + 1}, f"expected n = {N}"),
    ({"repetition": 0}, "expected an int 'repetition' >= 1"),
    ({"repetition": True}, "expected an int 'repetition' >= 1"),
    ({"repetition": 1.0}, "expected an int 'repetition' >= 1"),
    ({"op": "estimate"}, "expected op = 'report'"),
])
def test_a_request_for_another_protocol_or_a_malformed_one_is_refused(changes: dict, fragment: str) -> None:
    node = _node(0)
    with pytest.raises(Refusal, match=fragment):
        WORKLOAD.handler(SETUP)(_ask(node, **changes), node)
    assert not node.state.get(ANSWERED)
    WORKLOAD.handler(SETUP)(_ask(node), node)  # the honest request still gets its answer


def test_each_repetition_once_and_at_most_repetitions() -> None:
    node, handle = _node(2), WORKLOAD.handler(SETUP)
    handle(_ask(node, 1), node)
    with pytest.raises(Refusal, match="repetition 1 again"):
        handle(_ask(node, 1), node)
    handle(_ask(node, 2), node)
    with pytest.raises(Refusal, match="at most 2 repetitions per run"):
        handle(_ask(node, 3), node)
    assert node.state[ANSWERED] == [1, 2]


def test_the_batch_handler_refuses_a_repeated_repetition_for_every_user() -> None:
    answer = WORKLOAD.batch_handler(SETUP, "fast", WORKLOAD.load_clients(SETUP), {})
    step = Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP, 1))
    assert len(answer(step)) == N
    again = answer(step)
    assert len(again) == 0 and set(again.errors) == set(range(N))
    assert all("repetition 1" in e for e in again.errors.values())
    foreign = answer(Broadcast(clients=np.arange(N), kind="query",
                               message=Message_({"config": Config({**report_fields(SETUP, 2), "m": D})})))
    assert len(foreign) == 0 and all("expected m = 3" in e for e in foreign.errors.values())
    assert len(answer(Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP, 2)))) == N
    third = answer(Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP, 3)))
    assert len(third) == 0 and all("at most 2 repetitions per run" in e for e in third.errors.values())


def test_a_deployed_nodes_report_is_valid_and_drawn_from_its_own_secret() -> None:
    """Secret randomness: a valid m-of-d report, neither the keyed one nor another secret node's."""
    keyed = WORKLOAD.handler(SETUP)(_ask(_node(3)), _node(3))
    again = WORKLOAD.handler(SETUP)(_ask(_node(3)), _node(3))
    np.testing.assert_array_equal(again[REPORT][VALUES], keyed[REPORT][VALUES])  # keyed: the same bits
    secret = []
    for _ in range(2):
        node = Node(client=3, data=SETUP.dataset.x[3], randomness=SecretRandomness())
        reply = WORKLOAD.handler(SETUP)(_ask(node), node)
        dims, values = reply[REPORT][DIMS], reply[REPORT][VALUES]
        assert dims.shape == values.shape == (M,) and len(set(dims.tolist())) == M and 0 <= dims.min() < dims.max() < D
        assert np.all(np.abs(values) <= SETUP.mech.output_range[1])
        secret.append(values)
    # continuous reports: equal with probability 0
    assert not np.array_equal(secret[0], keyed[REPORT][VALUES]) and not np.array_equal(secret[0], secret[1])


def test_a_deployed_node_draws_nothing_from_the_run_seed() -> None:
    """The secret report is not any row of the run seed's draws of this repetition (what a server could recompute)."""
    node = Node(client=3, data=SETUP.dataset.x[3], randomness=SecretRandomness())
    values = WORKLOAD.handler(SETUP)(_ask(node), node)[REPORT][VALUES]
    _, keyed = report_block(SETUP.dataset.x, SETUP.mech, M, stream(SETUP.seed, 1, SERVER, PURPOSE))
    assert not any(np.array_equal(values, row) for row in keyed)


# --------------------------------------------------------------------------- a deployed node's policy and ledger


def test_node_terms_name_the_mechanism_the_sizes_and_the_repetitions() -> None:
    terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "mechanism": "laplace"}))
    assert (terms.task, terms.mechanisms, dict(terms.features)) == ("mean", (("mechanism", "laplace"),), {})
    assert set(terms.sizes) == {("clients", "num-clients", N), ("rounds", "repetitions", 2),
                                ("dims", "sample-dims", M), ("data-values", "num-clients × mean-dims", N * D)}
    assert (terms.steps, terms.step_key, terms.paths, terms.uncovered) == (2, "repetition", (), None)
    every = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "sample-dims": 0}))
    assert ("dims", "mean-dims", D) in every.sizes
    NodePolicy.default().admit(terms)  # a plain run: admitted by a node without a policy file


def test_an_attack_needs_the_simulation_only_attacks_switch() -> None:
    terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "attack": "ldp-manipulation",
                                                        "attack-fraction": 0.2}))
    assert dict(terms.features) == {"attacks": ("attack", "ldp-manipulation")}
    with pytest.raises(PolicyRefusal, match="node policy refuses attack = 'ldp-manipulation': .*'attacks'") as refused:
        NodePolicy.default().admit(terms)
    assert refused.value.key == "attack"
    SIMULATION.admit(terms)


def test_a_run_beyond_the_nodes_caps_is_refused_naming_the_key() -> None:
    terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "num-clients": 2_000_000}))
    with pytest.raises(PolicyRefusal, match="node policy refuses num-clients = 2000000"):
        NodePolicy.default().admit(terms)


@pytest.mark.parametrize("mechanism", ["laplace", "piecewise", "duchi", "square_wave"])
def test_a_report_spends_epsilon_whatever_the_mechanism(mechanism: str) -> None:
    """m values at ε/m each: ε per report by sequential composition (docs/ldp_mechanisms.md §1.2)."""
    setup = _setup(mechanism)
    release = WORKLOAD.deployment.release_of(setup, _ask(_node(0, setup), 2, setup), _node(0, setup))
    assert (release.step, release.epsilon, release.delta, release.key, release.asked) == (2, 2.0, 0.0, "epsilon", 2.0)
    assert math.isclose(M * setup.mech.guarantee.epsilon, release.epsilon, rel_tol=1e-12)


def _exact_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """δ(ε) of N(0, σ²) noise at L2 sensitivity Δ (Balle and Wang 2018, Theorem 8), with scipy's normal CDF."""
    from scipy.stats import norm

    a, b = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return float(norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b))


@pytest.mark.parametrize("epsilon, delta, exceeds", [(0.5, 1e-5, False), (2.0, 1e-5, False), (8.0, 1e-3, True),
                                                     (10.0, 1e-5, True)])
def test_a_gaussian_report_spends_epsilon_and_the_exact_delta_of_its_noise(epsilon: float, delta: float,
                                                                           exceeds: bool) -> None:
    """The vector release of m values at sensitivity 2√m: (ε, δ) where the classical σ meets δ, else the δ its σ
    really gives at ε (the classical calibration's theorem assumes ε < 1; at m = 3 it fails from ε ≈ 8)."""
    setup = _setup("gaussian", epsilon=epsilon, delta=delta)
    release = WORKLOAD.deployment.release_of(setup, _ask(_node(0, setup), 1, setup), _node(0, setup))
    sigma = 2 * math.sqrt(M) * math.sqrt(2 * math.log(1.25 / delta)) / epsilon  # the classical σ, Δ = 2√m
    exact = _exact_gaussian_delta(sigma, epsilon, 2 * math.sqrt(M))
    assert release.epsilon == epsilon and (exact > delta) is exceeds
    if exceeds:
        assert math.isclose(release.delta, exact, rel_tol=1e-6)
    else:
        assert release.delta == delta


def test_release_of_refuses_a_request_the_user_would_refuse() -> None:
    with pytest.raises(Refusal, match="expected epsilon = 2.0"):
        WORKLOAD.deployment.release_of(SETUP, _ask(_node(0), 1, epsilon=8.0), _node(0))


def _deployed(cid: int, run: int = 7) -> Context:
    """A message context of a deployed node of user ``cid`` (no policy file: the default policy) in run ``run``."""
    return Context(run_id=run, node_id=cid + 1, node_config={"partition-id": cid, "num-partitions": N},
                   state=RecordDict(), run_config={})


def test_the_client_app_under_the_default_policy_charges_each_repetition_to_the_nodes_ledger() -> None:
    app, ctx = _app(policy=None), _deployed(4)
    for k in (1, 2):
        reply = _flower(app, 4, to_recorddict(report_request(SETUP, k)), ctx=ctx)
        assert not reply.has_error(), reply.error.reason
    ledger = NodeLedger(default_ledger_path(4))
    spent = ledger.spent()
    assert (spent.epsilon, spent.delta, spent.releases) == (4.0, 0.0, 2)
    assert [(r["run"], r["task"], r["step"], r["epsilon"]) for r in ledger.releases()] == [("7", "mean", 1, 2.0),
                                                                                         ("7", "mean", 2, 2.0)]
    beyond = _flower(app, 4, to_recorddict(report_request(SETUP, 3)), ctx=ctx)
    assert beyond.has_error() and "repetition = 3" in beyond.error.reason and "2 steps" in beyond.error.reason
    assert ledger.spent().releases == 2 and NodeLedger(default_ledger_path(3)).spent().releases == 0


def test_the_ledger_refuses_a_repetition_again_from_a_fresh_process_of_the_node() -> None:
    """The node's state is per process; its ledger on disk is what keeps a repetition from being answered twice."""
    app = _app(policy=None)
    assert not _flower(app, 2, to_recorddict(report_request(SETUP, 1)), ctx=_deployed(2)).has_error()
    again = _flower(app, 2, to_recorddict(report_request(SETUP, 1)), ctx=_deployed(2))
    assert again.has_error() and "already" in again.error.reason and "repetition = 1" in again.error.reason
    assert NodeLedger(default_ledger_path(2)).spent().epsilon == 2.0


def test_deployed_nodes_answer_with_their_own_noise_not_the_run_seeds() -> None:
    app = _app(policy=None)
    replies = [_flower(app, 3, to_recorddict(report_request(SETUP, 1)), ctx=_deployed(3, run)) for run in (1, 2)]
    assert not any(r.has_error() for r in replies)
    keyed = _flower(_app(), 3, to_recorddict(report_request(SETUP, 1)))
    a, b, k = (r.content.array_records[REPORT][VALUES].numpy() for r in (*replies, keyed))
    assert not np.array_equal(a, k) and not np.array_equal(a, b)


def test_a_deployed_node_refuses_an_attack_run_and_charges_nothing() -> None:
    config = RunConfig.from_mapping({**BASE, "mechanism": "piecewise", "attack": "ldp-manipulation",
                                     "attack-fraction": 0.5})
    reply = _flower(make_client_app(config), 0, to_recorddict(report_request(SETUP, 1)), ctx=_deployed(0))
    assert reply.has_error() and "attack = 'ldp-manipulation'" in reply.error.reason
    assert NodeLedger(default_ledger_path(0)).spent().releases == 0


# --------------------------------------------------------------------------- the Flower ClientApp, called directly


def _flower(app, cid: int, content: RecordDict, node_config: dict | None = None, ctx=None) -> Message:
    set_task_identity()
    ctx = ctx if ctx is not None else context(cid, N)
    if node_config is not None:
        ctx.node_config = node_config
    return app(Message(content, 1, MessageType.QUERY), ctx)


def _app(policy: NodePolicy | None = SIMULATION):
    """The ClientApp of the piecewise run: in a simulation (keyed noise, no ledger), or ``policy=None``: deployed."""
    return make_client_app(RunConfig.from_mapping({**BASE, "mechanism": "piecewise"}), policy=policy)


def test_the_flower_client_app_answers_whoami_and_the_users_report() -> None:
    app = _app()
    assert dict(_flower(app, 4, whoami_request()).content["metrics"]) == {CLIENT_ID: 4}
    reply = _flower(app, 3, to_recorddict(report_request(SETUP, 1)))
    assert not reply.has_error(), reply.error.reason
    direct = call(WORKLOAD.handler(SETUP), _ask(_node(3)), _node(3))
    for k in (DIMS, VALUES):
        np.testing.assert_array_equal(reply.content.array_records[REPORT][k].numpy(), direct.message[REPORT][k])


def test_the_flower_node_refuses_a_replay_across_messages() -> None:
    app, ctx = _app(), context(2, N)
    assert not _flower(app, 2, to_recorddict(report_request(SETUP, 1)), ctx=ctx).has_error()
    again = _flower(app, 2, to_recorddict(report_request(SETUP, 1)), ctx=ctx)
    assert again.has_error() and "mean client 2 refused: expected each repetition at most once" in again.error.reason


def test_the_clear_vector_never_leaves_the_node() -> None:
    reply = _flower(_app(), 1, to_recorddict(report_request(SETUP, 1)))
    content = reply.content
    assert set(content) == {REPORT, "metrics"} and not content.config_records
    assert set(content.array_records[REPORT]) == {DIMS, VALUES}
    assert not np.isin(content.array_records[REPORT][VALUES].numpy(), SETUP.dataset.x[1]).any()


@pytest.mark.parametrize("node_config, fragment", [
    ({}, "partition-id must be one of this run's client ids"),
    ({"partition-id": N, "num-partitions": N}, "partition-id must be one of this run's client ids"),
    ({"partition-id": 0, "num-partitions": N + 1}, f"num-partitions must equal the run's {N} clients"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config: dict, fragment: str) -> None:
    reply = _flower(_app(), 0, to_recorddict(report_request(SETUP, 1)), node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_node_loads_only_its_own_vector() -> None:
    x = WORKLOAD.load_client(SETUP, 7, {"partition-id": 7, "num-partitions": N})
    np.testing.assert_array_equal(x, SETUP.dataset.x[7])
    assert x.shape == (D,) and x.base is None  # a copy: the others' data are not kept


def test_config_record_of_a_foreign_op_is_an_error_reply() -> None:
    reply = _flower(_app(), 0, RecordDict({"config": ConfigRecord({"op": "estimate"})}))
    assert reply.has_error() and "mean client 0 refused: expected op = 'report'" in reply.error.reason


# --------------------------------------------------------------------------- the server protocol


def _protocol_with(exchange, setup=SETUP):
    """Run the mean protocol with ``exchange`` into memory; the committed records and the outcome."""
    records = []

    def commit(step):
        records.append({**step.record, "theta": step.arrays["theta"]})
        return dict(step.record)

    return records, drive(WORKLOAD.protocol(setup, WORKLOAD.load_server(setup), Committed()), exchange, commit)


def _reply(client: int, dims, values, metrics) -> Reply:
    return Reply(client=client, message=Message_({REPORT: Arrays({DIMS: np.asarray(dims), VALUES: np.asarray(values)}),
                                                  "metrics": Metrics(metrics)}))


def test_malformed_replies_are_left_out_and_reported() -> None:
    honest = InProcess(WORKLOAD, SETUP, "fast")
    bad = {1: "non-finite", 2: "repetition = ", 3: "the sender", 4: "not all in [0, 6)", 5: "not all in [0, 6)"}

    def corrupting(requests):
        out = []
        for r in honest(requests):
            dims, values = r.message[REPORT][DIMS].copy(), r.message[REPORT][VALUES].copy()
            metrics = dict(r.message["metrics"])
            if r.client == 1:
                values[0] = np.nan
            elif r.client == 2:
                metrics[REPETITION] = 9
            elif r.client == 3:
                metrics[CLIENT_ID] = 4
            elif r.client == 4:
                dims[0] = D
            elif r.client == 5:
                dims[1] = -1
            out.append(_reply(r.client, dims, values, metrics))
        return out

    records, outcome = _protocol_with(corrupting)
    assert outcome.error is None and len(records) == SETUP.repetitions
    for record in records:
        assert record["reports"] == N - len(bad) and record["left-out"] == len(bad)
        for fragment in bad.values():
            assert any(fragment in reason for reason in record["left-out-reasons"]), (fragment, record)
        assert np.isfinite(record["theta"]).all()


def test_a_report_naming_a_dimension_twice_is_counted_as_sent() -> None:
    """The sums can take it (documented in valid_reports): it is kept, like any value a user chooses to send."""
    honest = InProcess(WORKLOAD, SETUP, "fast")

    def twice(requests):
        out = []
        for r in honest(requests):
            dims = r.message[REPORT][DIMS].copy()
            if r.client == 0:
                dims[1] = dims[0]
            out.append(_reply(r.client, dims, r.message[REPORT][VALUES], dict(r.message["metrics"])))
        return out

    records, _ = _protocol_with(twice)
    assert all(r["reports"] == N and r["left-out"] == 0 for r in records)


def test_left_out_users_do_not_move_the_others_reports(chunks: bool) -> None:
    """θ̂ over the users who answered is the mean of their reports, summed in collect_mean's chunks."""
    honest = InProcess(WORKLOAD, SETUP, "fast")
    records, _ = _protocol_with(lambda requests: [r if r.client % 3 else Reply(client=r.client, error="gone")
                                                  for r in honest(requests)])
    assert [r["reports"] for r in records] == [N - 4, N - 4] and records[0]["left-out-reasons"] == ["gone"]
    kept = np.array([c for c in range(N) if c % 3])
    for k, record in enumerate(records, start=1):
        rows = WORKLOAD.batch_handler(SETUP, "fast", {}, {})(Broadcast(clients=kept, kind="query",
                                                                   message=report_request(SETUP, k)))
        sums = ReportSums.zeros(D)
        for chunk in ([kept < 4, (kept >= 4) & (kept < 8), kept >= 8] if chunks else [kept >= 0]):
            sums.add(rows.records[REPORT][DIMS][chunk], rows.records[REPORT][VALUES][chunk])
        np.testing.assert_array_equal(record["theta"], sums.estimate(SETUP.mech, None).theta)


@pytest.mark.parametrize("reply, fragment", [
    (lambda r: Reply(client=r.client, message=Message_({"metrics": Metrics({CLIENT_ID: r.client})})),
     "expected records 'report'"),
    (lambda r: _reply(r.client, np.zeros(M + 1, dtype=np.int64), np.zeros(M + 1), {CLIENT_ID: r.client,
                                                                                   REPETITION: 1}),
     "each of shape (3,)"),
    (lambda r: _reply(r.client, np.arange(M, dtype=np.float64), np.zeros(M), {CLIENT_ID: r.client, REPETITION: 1}),
     "'dims' of ints"),
])
def test_replies_of_the_wrong_layout_are_all_left_out(reply, fragment: str) -> None:
    records, outcome = _protocol_with(lambda requests: [reply(r) for r in requests])
    assert records == [] and "repetition 1: no user sent a valid report" in outcome.error and fragment in outcome.error


def test_a_repetition_that_no_user_answers_stops_the_run_with_the_reason() -> None:
    records, outcome = _protocol_with(lambda requests: [Reply(client=r.client, error="Refusal: not today")
                                                        for r in requests])
    assert records == [] and "repetition 1: no user sent a valid report" in outcome.error
    assert "not today" in outcome.error


def test_the_runs_privacy_composes_the_repetitions_through_the_accountant_and_names_it() -> None:
    from fedpriv.workloads.mean.report import run_composition

    pure = run_composition(2.0, 0.0, 30)  # a pure mechanism: sequential composition, exactly ε × repetitions
    assert pure.epsilon == 60.0 and pure.delta == 0.0 and pure.accountant == "sequential"
    approx = run_composition(0.5, 1e-6, 100)  # (ε, δ) releases at δ × repetitions: never above ε × repetitions
    assert approx.epsilon <= 50.0 and approx.delta == pytest.approx(1e-4)
    assert approx.accountant == "pld" and approx.epsilon < 40.0  # the optimal composition is far below Σε here
    assert "sequential 50" in approx.summary()
    assert run_composition(2.0, 1e-5, 0).epsilon == 0.0  # no repetition finished: nothing spent
