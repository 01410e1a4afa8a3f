"""The vertical k-means workload: the Flower ClientApp and a deployed party's terms, releases, noise and ledger."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.clustering.methods import budget_for, count_epsilon
from fedpriv.config import RunConfig
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import SecretRandomness
from fedpriv.workloads import Config, Refusal, Request
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.vertical_kmeans.contract import N_HAT, PARTY_MESSAGE, count_request, encode_fields
from fedpriv.workloads.vertical_kmeans.party_key import HASH_KEY_FILE, PartyKey, write_key_file
from tests.strategies._flower import context, set_task_identity
from tests.workloads._vertical_kmeans import (
    BASE,
    CFG,
    DATA,
    SECRET,
    SETUP,
    SIMULATION,
    WORKLOAD,
    _count,
    _encode,
    _node,
    _setup,
)

# --------------------------------------------------------------------------- the Flower ClientApp


def _flower(app, party: int, content: RecordDict, node_config: dict | None = None, ctx=None) -> Message:
    set_task_identity()
    ctx = ctx or context(party, DATA.parties)
    if node_config is not None:
        ctx.node_config = node_config
    return app(Message(content, 1, MessageType.QUERY), ctx)


def _deployed(party: int, run: int, node_config: dict) -> Context:
    """A fresh message context of deployed party ``party`` in Flower run ``run``."""
    return Context(run_id=run, node_id=party + 1, node_config=node_config, state=RecordDict(), run_config={})


def _key_config(tmp_path: Path, party: int, **extra) -> dict:
    path = tmp_path / "parties.key"
    if not path.exists():
        write_key_file(path, SECRET)
    return {"partition-id": party, "num-partitions": DATA.parties, HASH_KEY_FILE: str(path), **extra}


def test_the_flower_client_app_answers_whoami_count_and_encode_as_the_handler(tmp_path: Path):
    app = make_client_app(CFG, policy=SIMULATION)
    ctx = context(1, DATA.parties)
    ctx.node_config = _key_config(tmp_path, 1)
    assert dict(_flower(app, 1, whoami_request(), ctx=ctx).content["metrics"]) == {CLIENT_ID: 1}
    count = _flower(app, 1, to_recorddict(count_request(2, count_epsilon(SETUP.kmeans))), ctx=ctx)
    assert not count.has_error(), count.error.reason
    n_hat = count.content["metrics"][N_HAT]
    assert n_hat == _count(_node(1), repetition=2)
    request = to_recorddict(Message_({"config": Config(encode_fields(SETUP.kmeans, 2, 3, n_hat, 2))}))
    encode = _flower(app, 1, request, ctx=ctx)
    assert not encode.has_error(), encode.error.reason
    direct = _encode(_node(1), repetition=2, n_hat=n_hat)
    for name, arr in direct[PARTY_MESSAGE].items():
        got = encode.content.array_records[PARTY_MESSAGE][name].numpy()
        np.testing.assert_array_equal(got, arr)
        assert got.dtype == arr.dtype
    replay = _flower(app, 1, request, ctx=ctx)  # the node's context.state remembers repetition 2
    assert replay.has_error() and "second 'encode' of repetition 2" in replay.error.reason


@pytest.mark.parametrize("node_config, fragment", [
    ({"partition-id": 0, "num-partitions": 2}, "node config hash-key-file must name the parties' key file for method "
                                               "'dpfmps-2pest'"),
    ({"partition-id": 2, "num-partitions": 2}, "partition-id must be one of this run's client ids"),
    ({"partition-id": 0, "num-partitions": 2, HASH_KEY_FILE: "/nonexistent/parties.key"}, "cannot be read"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config, fragment):
    reply = _flower(make_client_app(CFG, policy=SIMULATION), 0,
                    to_recorddict(count_request(1, count_epsilon(SETUP.kmeans))), node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_key_method_free_node_needs_no_key_file():
    cfg = RunConfig.from_mapping({**BASE, "kmeans-method": "ind-lap"})
    reply = _flower(make_client_app(cfg), 0, to_recorddict(count_request(1, count_epsilon(SETUP.kmeans))),
                    {"partition-id": 0, "num-partitions": 2})
    assert not reply.has_error(), reply.error.reason


def test_a_deployed_nodes_count_is_its_own_noise_whatever_its_node_config_says(tmp_path: Path):
    """The run seed keys a party's noise only under the simulation policy: a deployed node (the default policy)
    draws its own, and a node config's ``noise-seed`` (the old switch) no longer makes it keyed."""
    request = to_recorddict(count_request(1, count_epsilon(SETUP.kmeans)))
    keyed = _flower(make_client_app(CFG, policy=SIMULATION), 0, request, _key_config(tmp_path, 0))
    assert keyed.content["metrics"][N_HAT] == _count(_node(0))
    small = CFG.replace(kmeans_delta=1e-6)  # a δ the default policy admits; the count does not depend on it
    deployed = [_flower(make_client_app(small), 0, request, ctx=_deployed(0, run, _key_config(tmp_path, 0, **extra)))
                for run, extra in ((11, {}), (12, {"noise-seed": "run"}))]  # two runs: the ledger refuses a second
    assert not any(r.has_error() for r in deployed), [r.error.reason for r in deployed if r.has_error()]
    counts = {keyed.content["metrics"][N_HAT], *(r.content["metrics"][N_HAT] for r in deployed)}
    assert len(counts) == 3  # Laplace noise: equal w.p. 0


def test_a_simulated_node_gets_the_node_config_a_deployed_one_gets(tmp_path: Path):
    provisioned = WORKLOAD.deployment.provision(SETUP, tmp_path)
    clients = WORKLOAD.clients(SETUP)
    configs = {c: WORKLOAD.deployment.node_config(provisioned, c, clients) for c in clients}
    app = make_client_app(CFG, node_configs=configs, policy=SIMULATION)
    request = to_recorddict(Message_({"config": Config(encode_fields(SETUP.kmeans, 1, 3, 600.0, 2))}))
    reply = _flower(app, 0, request)  # Flower's simulated node config: partition-id and num-partitions only
    assert not reply.has_error(), reply.error.reason
    key = PartyKey(provisioned.key_file.read_bytes())
    np.testing.assert_array_equal(reply.content.array_records[PARTY_MESSAGE]["sketch"].numpy(),
                                  _encode(_node(0, key=key))[PARTY_MESSAGE]["sketch"])


# --------------------------------------------------------------------------- a deployed party: terms, releases, noise


def _terms(**changes):
    return WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, **changes}))


def test_the_node_terms_of_a_private_run_and_what_the_default_policy_admits():
    terms = _terms()
    assert (terms.task, terms.steps, terms.step_key, dict(terms.features), terms.paths) == (
        "vertical-kmeans", 3, "repetition", {}, ())
    assert set(terms.sizes) == {("clients", "parties", 2), ("rounds", "repetitions", 3),
                                ("data-values", "kmeans-samples × kmeans-dims", 600 * 8),
                                ("steps", "sketch-repetitions", 64)}
    # the sketches' default δ = 1/n̂ (§14) at the smallest n̂ the count reaches: far above the default ceiling
    eps0 = count_epsilon(SETUP.kmeans)
    assert terms.release == ("epsilon", 2.0, pytest.approx(1 / max(2.0, 600 - 10 / eps0) / 2, rel=1e-12))
    with pytest.raises(PolicyRefusal, match="one release would spend δ = .* above this node's ceiling max-delta"):
        NodePolicy.default().admit(terms)
    for changes in ({"kmeans-delta": 1e-6}, {"kmeans-method": "dpfmps-basic", "kmeans-delta": 1e-6},
                    {"kmeans-method": "ind-lap"}, {"kmeans-method": "ldp-agg-2pest"}):
        NodePolicy.default().admit(_terms(**changes))
    assert _terms(**{"kmeans-delta": 1e-6}).release == ("epsilon", 2.0, 5e-7)


@pytest.mark.parametrize("changes, key, value", [
    ({"kmeans-method": "vfl-kmeans"}, "kmeans-method", "vfl-kmeans"),
    ({"kmeans-method": "kmeans+dpfmps-2pest"}, "kmeans-method", "kmeans+dpfmps-2pest"),
    ({"kmeans-method": "dplsf+exact"}, "kmeans-method", "dplsf+exact"),
    ({"hash-backend": "datasketch"}, "hash-backend", "datasketch"),
])
def test_a_release_without_a_guarantee_needs_the_no_noise_switch(changes, key, value):
    terms = _terms(**changes)
    assert terms.features == {"no-noise": (key, value)}
    with pytest.raises(PolicyRefusal, match=re.escape(f"refuses {key} = '{value}': it needs the simulation-only "
                                                      "switch 'no-noise'")) as refusal:
        NodePolicy.default().admit(terms)
    assert refusal.value.key == key
    NodePolicy.simulation().admit(terms)


def test_a_csv_file_is_opened_only_inside_the_data_root(tmp_path: Path):
    terms = _terms(**{"kmeans-data": "csv", "kmeans-csv": "users.csv"})
    assert terms.paths == (("kmeans-csv", "users.csv"),)
    with pytest.raises(PolicyRefusal, match="refuses kmeans-csv = 'users.csv': this node opens no data files"):
        NodePolicy.default().admit(terms)
    NodePolicy(data_root=tmp_path, max_delta=0.5).admit(terms)


def _release(setup, fields: dict):
    message = Message_({"config": Config(fields)})
    return WORKLOAD.deployment.release_of(setup, Request(client=0, kind="query", message=message), _node(0, setup))


def test_a_repetition_charges_each_party_its_own_share_and_the_parties_compose_to_the_runs_epsilon():
    """§3.1, §10: ε_0 = (1 − b)ε for the count, ε_1 + ε_2 = bε/S and δ_2 = δ/S (δ = 1/n̂) for each encode."""
    n_hat = 612.5
    count = _release(SETUP, {"op": "count", "repetition": 2, "eps0": 0.04})
    encode = _release(SETUP, encode_fields(SETUP.kmeans, 2, 3, n_hat, 2))
    assert (count.step, count.part, count.delta) == (2, "count", 0.0)
    assert count.epsilon == pytest.approx(0.02 * 2.0, rel=1e-12)
    assert (encode.step, encode.part) == (2, "encode")
    assert encode.epsilon == pytest.approx(0.98 * 2.0 / 2, rel=1e-12)
    assert encode.delta == pytest.approx(1 / n_hat / 2, rel=1e-12)
    from fedpriv.clustering.vertical import privacy_record

    record = privacy_record(SETUP.kmeans, budget_for(SETUP.kmeans, n_hat, 2), 2)
    assert count.epsilon + 2 * encode.epsilon == pytest.approx(record["epsilon"], rel=1e-12) == pytest.approx(2.0)
    assert 2 * encode.delta == pytest.approx(record["delta"], rel=1e-12)


@pytest.mark.parametrize("method, count_epsilon_, encode_epsilon, encode_delta", [
    ("ind-lap", 0.04, 0.98, 0.0),
    ("ldp-agg-2pest", 0.0, 1.0, 0.0),  # b = 1, n public (A7)
    ("vfl-kmeans", math.inf, math.inf, 0.0),
    ("kmeans+dpfmps-2pest", 0.04, math.inf, 0.0),
    ("dplsf+exact", math.inf, math.inf, 0.0),
])
def test_what_each_method_charges(method, count_epsilon_, encode_epsilon, encode_delta):
    setup = _setup(**{"kmeans-method": method})
    count = _release(setup, {"op": "count", "repetition": 1, "eps0": count_epsilon(setup.kmeans)})
    encode = _release(setup, encode_fields(setup.kmeans, 1, 3, float(DATA.n), 2))
    assert count.epsilon == pytest.approx(count_epsilon_) and encode.epsilon == pytest.approx(encode_epsilon)
    if encode_delta == 0.0 and math.isfinite(encode.epsilon):
        assert encode.delta == 0.0
    if math.isinf(encode.epsilon):
        assert (encode.key, encode.asked) == ("kmeans-method", method)


def test_a_datasketch_sketch_is_charged_as_unbounded():
    setup = _setup(**{"hash-backend": "datasketch"})
    encode = _release(setup, encode_fields(setup.kmeans, 1, 3, 600.0, 2))
    assert math.isinf(encode.epsilon) and (encode.key, encode.asked) == ("hash-backend", "datasketch")


@pytest.mark.parametrize("setup_changes, op, fields, match", [
    ({}, "decode", {}, "expected op in"),
    ({}, "count", {"repetition": 4}, "expected an int 'repetition' in 1..3"),
    ({}, "encode", {"n-hat": 0.5}, "expected an n-hat this party can derive its budget from"),
    ({"kmeans-method": "central-kmeans"}, "count", {}, "expected no party op for the central baseline"),
])
def test_a_request_the_party_would_refuse_is_refused_before_it_is_charged(setup_changes, op, fields, match):
    setup = _setup(**setup_changes)
    base = encode_fields(setup.kmeans, 1, 3, 600.0, 2) if op == "encode" else {}
    message = Message_({"config": Config({**base, "op": op, "repetition": 1, **fields})})
    with pytest.raises(Refusal, match=match):
        WORKLOAD.deployment.release_of(setup, Request(client=0, kind="query", message=message), _node(0, setup))


def test_a_secret_node_draws_other_noise_than_the_keyed_one_and_than_another_secret_node():
    """Keyed: the reference's bits (the tests above); secret: ChaCha20 of a node secret, every draw its own."""
    keyed = _encode(_node(1), repetition=2, n_hat=610.5)[PARTY_MESSAGE]
    secret = [_encode(_node(1, randomness=SecretRandomness()), repetition=2, n_hat=610.5)[PARTY_MESSAGE]
              for _ in range(10)]
    # the sketch: every secret draw its own, none the keyed one
    sketches = [m["sketch"].tobytes() for m in secret]
    assert len(set(sketches)) == len(sketches) and keyed["sketch"].tobytes() not in sketches
    # the centers are 4 coordinates clipped to ±1 here, so two draws agree by chance (1/16 for fair signs, one run of
    # the suite saw it): across 10 draws, not all equal, and not all the keyed one (by chance < 1e-6 at 1/16 each)
    centers = [m["centers"].tobytes() for m in secret]
    assert len(set(centers)) > 1 and set(centers) != {keyed["centers"].tobytes()}
    counts = {_count(_node(0)), *(_count(_node(0, randomness=SecretRandomness())) for _ in range(2))}
    assert len(counts) == 3
    # one secret, asked again: the same draws (what the node's randomness keys is the secret and the repetition)
    fixed = bytes(range(32))
    again = [_encode(_node(1, randomness=SecretRandomness(fixed)), repetition=2, n_hat=610.5)[PARTY_MESSAGE]
             for _ in range(2)]
    np.testing.assert_array_equal(again[0]["sketch"], again[1]["sketch"])
    other = _encode(_node(1, randomness=SecretRandomness(fixed)), repetition=3, n_hat=610.5)[PARTY_MESSAGE]
    assert not np.array_equal(other["centers"], again[0]["centers"])


def test_the_secret_count_is_laplace_around_n_with_the_partys_epsilon0():
    """n̂ − n of a secret node is Lap(1/ε_0): mean 0 and E|n̂ − n| = 1/ε_0 within 5 CLT standard errors."""
    eps0, trials = count_epsilon(SETUP.kmeans), 400
    noise = np.array([_count(_node(0, randomness=SecretRandomness())) - DATA.n for _ in range(trials)])
    scale = 1.0 / eps0  # Lap(b): mean 0, sd b√2; |X| has mean b and sd b
    assert abs(noise.mean()) < 5 * scale * math.sqrt(2) / math.sqrt(trials)
    assert abs(np.abs(noise).mean() - scale) < 5 * scale / math.sqrt(trials)


def test_a_deployed_party_charges_its_ledger_once_per_repetition_and_op(tmp_path: Path):
    """The ClientApp under the default policy: count (ε_0) and encode (ε_1 + ε_2, δ_2) of repetition 1 are
    charged to party 1's ledger before the answers leave; the same op again, even from a fresh state, is refused."""
    cfg = CFG.with_values({"kmeans-delta": 1e-6})  # δ_2 = δ/S within the default policy's max-delta = 1e-5
    setup = WORKLOAD.setup(cfg)
    app, node_config = make_client_app(cfg), _key_config(tmp_path, 1)
    ctx = _deployed(1, 7, node_config)
    count = _flower(app, 1, to_recorddict(count_request(1, count_epsilon(setup.kmeans))), ctx=ctx)
    assert not count.has_error(), count.error.reason
    n_hat = count.content["metrics"][N_HAT]
    request = to_recorddict(Message_({"config": Config(encode_fields(setup.kmeans, 1, 3, n_hat, 2))}))
    encode = _flower(app, 1, request, ctx=ctx)
    assert not encode.has_error(), encode.error.reason
    ledger = NodeLedger(default_ledger_path(1))
    spent = ledger.spent()
    assert spent.releases == 2
    assert spent.epsilon == pytest.approx(0.04 + 0.98, rel=1e-12)
    assert spent.delta == pytest.approx(1e-6 / 2, rel=1e-12)
    assert [(r["step"], r["part"]) for r in ledger.releases()] == [(1, "count"), (1, "encode")]
    again = _flower(app, 1, request, ctx=_deployed(1, 7, node_config))  # a fresh state: the ledger remembers
    assert again.has_error() and "step 1 (encode) of run 7 already" in again.error.reason
    assert ledger.spent().releases == 2
    stale = _flower(app, 1, to_recorddict(count_request(1, count_epsilon(setup.kmeans))), ctx=ctx)
    assert stale.has_error() and ledger.spent().releases == 2


def test_a_deployed_party_refuses_a_non_private_method_before_it_loads_anything(tmp_path: Path):
    cfg = RunConfig.from_mapping({**BASE, "kmeans-method": "vfl-kmeans"})
    reply = _flower(make_client_app(cfg), 0, to_recorddict(count_request(1, 0.0)), ctx=_deployed(
        0, 3, {"partition-id": 0, "num-partitions": 2}))
    assert reply.has_error() and "kmeans-method = 'vfl-kmeans'" in reply.error.reason
    assert "'no-noise'" in reply.error.reason and NodeLedger(default_ledger_path(0)).spent().releases == 0
