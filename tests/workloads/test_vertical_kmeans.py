"""The vertical k-means workload: a party's ops and refusals, the parties' key, the protocol, the Flower ClientApp."""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.clustering.methods import budget_for, count_epsilon
from fedpriv.clustering.vertical import party_count, party_encode, party_rng, run_vertical_kmeans
from fedpriv.config import RunConfig
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, Randomness, SecretRandomness
from fedpriv.rundir import Committed
from fedpriv.workloads import Arrays, Config, Node, Refusal, Reply, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import drive
from fedpriv.workloads.vertical_kmeans import KEY_FILE_NAME
from fedpriv.workloads.vertical_kmeans.client import COUNTED, ENCODED, N_HAT_TAIL, Party
from fedpriv.workloads.vertical_kmeans.contract import (
    N_HAT,
    PARTY_INFO,
    PARTY_MESSAGE,
    count_request,
    encode_fields,
)
from fedpriv.workloads.vertical_kmeans.party_key import (
    HASH_KEY_FILE,
    SALT,
    PartyKey,
    read_key_file,
    write_key_file,
)
from tests.strategies._flower import context, set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
SECRET = bytes(range(7, 39))
KEY = PartyKey(SECRET)
BASE = {"task": "vertical-kmeans", "kmeans-samples": 600, "sketch-repetitions": 64, "epsilon": 2.0, "seed": 4,
        "repetitions": 3}
CFG = RunConfig.from_mapping(BASE)
WORKLOAD = get_workload("vertical-kmeans")
SETUP = WORKLOAD.setup(CFG)
DATA = SETUP.data


def _setup(**changes):
    return WORKLOAD.setup(RunConfig.from_mapping({**BASE, **changes}))


def _node(party: int, setup=SETUP, key=KEY, randomness: Randomness | None = None) -> Node:
    """Party ``party``'s node: keyed by the run seed (a simulation) unless ``randomness`` is given."""
    return Node(client=party, data=Party(block=setup.data.blocks[party], ids=setup.data.ids, key=key),
                randomness=randomness or KeyedRandomness(setup.seed))


def _ask(node: Node, setup=SETUP, **fields) -> Message_:
    return WORKLOAD.handler(setup)(Request(client=node.client, kind="query", message=Message_({"config": Config(fields)})),
                                   node)


def _encode(node: Node, setup=SETUP, repetition=1, kprime=3, n_hat=600.0, changes=None) -> Message_:
    """The server's encode request of ``repetition`` for (k', n̂), with ``changes`` applied."""
    fields = encode_fields(setup.kmeans, repetition, kprime, n_hat, setup.data.parties)
    return _ask(node, setup, **{**fields, **(changes or {})})


def _count(node: Node, setup=SETUP, repetition=1) -> float:
    return _ask(node, setup, op="count", repetition=repetition, eps0=count_epsilon(setup.kmeans))["metrics"][N_HAT]


# --------------------------------------------------------------------------- a party's ops


def test_count_is_party_count_with_the_partys_budget_and_the_repetitions_seed_once_per_repetition():
    node, eps0 = _node(1), count_epsilon(SETUP.kmeans)
    for r in (1, 2):
        reply = _ask(node, op="count", repetition=r, eps0=eps0)
        expected = party_count(DATA.blocks[1], eps0, party_rng(SETUP.seed + r - 1, 1, "count"))
        assert dict(reply["metrics"]) == {N_HAT: expected, "repetition": r} and expected != DATA.n
    with pytest.raises(Refusal, match="second 'count' of repetition 2.*more privacy budget"):
        _ask(node, op="count", repetition=2, eps0=eps0)
    assert node.state[COUNTED] == [1, 2]


@pytest.mark.parametrize("eps0", [0.5, 0.0, 0.02 * 2.0 * (1 + 1e-9)])
def test_count_refuses_another_epsilon0_and_stays_unanswered(eps0):
    node = _node(0)
    with pytest.raises(Refusal, match=f"expected eps0 = 0.04.*got {eps0!r}"):
        _ask(node, op="count", repetition=1, eps0=eps0)
    assert COUNTED not in node.state
    _count(node)  # the honest request still gets its answer


def test_exact_count_for_the_methods_without_an_n_hat_query():
    setup = _setup(**{"kmeans-method": "ldp-agg-2pest"})
    with pytest.raises(Refusal, match="expected eps0 = 0.0"):
        _ask(_node(0, setup), setup, op="count", repetition=1, eps0=0.04)
    assert _ask(_node(0, setup), setup, op="count", repetition=1, eps0=0.0)["metrics"][N_HAT] == DATA.n


def test_encode_is_party_encode_with_the_repetitions_key_and_seed_once_per_repetition():
    node = _node(1)
    for r in (1, 3):
        reply = _encode(node, repetition=r, kprime=3, n_hat=610.5)
        expected = party_encode(DATA.blocks[1], DATA.ids, 1, SETUP.kmeans, 3, budget_for(SETUP.kmeans, 610.5, 2),
                                KEY.repetition_key(SETUP.digest, r), seed=SETUP.seed + r - 1)
        want = expected.to_arrays()
        assert set(reply[PARTY_MESSAGE]) == set(want) == {"centers", "sketch"}
        for name in want:
            np.testing.assert_array_equal(reply[PARTY_MESSAGE][name], want[name])
            assert reply[PARTY_MESSAGE][name].dtype == want[name].dtype
        assert dict(reply[PARTY_INFO]) == {"party": 1, "m_l": DATA.widths[1], "k_l": expected.k, "repetition": r}
    with pytest.raises(Refusal, match="second 'encode' of repetition 3"):
        _encode(node, repetition=3, kprime=3, n_hat=610.5)
    assert node.state[ENCODED] == [1, 3]


def test_each_repetition_uses_its_own_hash_key():
    a, b = _encode(_node(0), repetition=1), _encode(_node(0), repetition=2)
    same_seed = party_encode(DATA.blocks[0], DATA.ids, 0, SETUP.kmeans, 3, budget_for(SETUP.kmeans, 600.0, 2),
                             KEY.repetition_key(SETUP.digest, 1), seed=SETUP.seed + 1)
    # repetition 2 with repetition 1's key would release these registers: the key differs, so the sketch does
    assert not np.array_equal(b[PARTY_MESSAGE]["sketch"], same_seed.sketch)
    assert not np.array_equal(a[PARTY_MESSAGE]["sketch"], b[PARTY_MESSAGE]["sketch"])


@pytest.mark.parametrize("changes, fragment", [
    ({"eps2": 0.98}, "expected eps2 = 0.49"),
    ({"eps1": 0.98}, "expected eps1 = 0.49"),
    ({"delta2": 0.01}, "expected delta2 = "),
    ({"method": "ind-lap"}, "expected method = 'dpfmps-2pest'"),
    ({"M": 4096}, "expected M = 64"),
    ({"gamma": 0.5}, "expected gamma = 1.0"),
    ({"hash-backend": "datasketch"}, "expected hash-backend = 'prf'"),
    ({"dplsf-preset": "tuned"}, "expected dplsf-preset = 'library'"),
    ({"kprime": 0}, "expected an int 'kprime' >= 1"),
    ({"kprime": 2.5}, "expected an int 'kprime' >= 1"),
    ({"n-hat": float("nan")}, "expected a finite number 'n-hat'"),
    ({"op": "decode"}, "expected op in \\('count', 'encode'\\), got 'decode'"),
    ({"repetition": 0}, "expected an int 'repetition' in 1..3"),
    ({"repetition": 4}, "expected an int 'repetition' in 1..3"),
    ({"repetition": True}, "expected an int 'repetition' in 1..3"),
    ({"repetition": None}, "expected an int 'repetition' in 1..3"),
])
def test_encode_refuses_a_budget_parameters_or_a_repetition_it_does_not_hold(changes, fragment):
    node = _node(0)
    with pytest.raises(Refusal, match=fragment):
        _encode(node, changes=changes)
    assert ENCODED not in node.state
    _encode(node)  # the honest request still gets its answer


def test_encode_refuses_an_n_hat_that_would_weaken_delta():
    setup = _setup(**{"budget-b": 0.5})  # ε_0 = 1: the tail bound is n − 40
    with pytest.raises(Refusal, match="it would weaken delta = 1/n-hat"):
        _encode(_node(0, setup), setup, n_hat=DATA.n - N_HAT_TAIL - 1)
    _encode(_node(0, setup), setup, n_hat=DATA.n - N_HAT_TAIL + 1)
    with pytest.raises(Refusal, match="expected delta2 = "):
        _encode(_node(0, setup), setup, n_hat=DATA.n + 1e9, changes={"delta2": 1.0})
    # the counting party checks the n̂ is its own answer of that repetition
    node = _node(1, setup)
    answer = _count(node, setup, repetition=2)
    with pytest.raises(Refusal, match=f"expected n-hat = {answer!r} \\(this party's count answer of repetition 2\\)"):
        _encode(node, setup, repetition=2, n_hat=answer + 1)
    _encode(node, setup, repetition=1, n_hat=answer + 1)  # another repetition: not its answer to check
    _encode(node, setup, repetition=2, n_hat=answer)


def test_exact_count_methods_take_only_the_public_n():
    setup = _setup(**{"kmeans-method": "ldp-agg"})
    with pytest.raises(Refusal, match=f"expected n-hat = {DATA.n} \\(the exact public n"):
        _encode(_node(0, setup), setup, n_hat=DATA.n - 1.0)
    assert {"ldp_ids", "ldp_values"} <= set(_encode(_node(0, setup), setup, n_hat=float(DATA.n))[PARTY_MESSAGE])


def test_an_n_hat_without_a_budget_is_refused():
    with pytest.raises(Refusal, match="expected an n-hat this party can derive its budget from"):
        _encode(_node(0), changes={"n-hat": 0.5})


def test_a_sketch_method_needs_the_key_and_the_others_do_not():
    with pytest.raises(Refusal, match="needs the parties' key, and this node has none"):
        _encode(_node(0, key=None))
    setup = _setup(**{"kmeans-method": "ind-lap"})
    assert "histogram" in _encode(_node(0, setup, key=None), setup)[PARTY_MESSAGE]


# --------------------------------------------------------------------------- the parties' key


def _hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 §2.2–2.3 written out with hmac (an oracle independent of ``cryptography``)."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + block, i + 1
    return out[:length]


def test_the_oracle_reproduces_rfc_5869_test_case_1():
    okm = _hkdf_sha256(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")


def test_repetition_keys_are_hkdf_sha256_of_the_secret_distinct_per_repetition_and_config():
    keys = {}
    for digest in ("0123456789abcdef", "fedcba9876543210"):
        for r in (1, 2, 3):
            want = _hkdf_sha256(SECRET, SALT, f"config {digest}|repetition {r}".encode(), 32)
            got = KEY.repetition_key(digest, r)
            assert got == PartyKey(SECRET).repetition_key(digest, r)  # every party derives the same K_r
            assert got._secret == want  # noqa: SLF001 - the derivation itself is what is under test
            keys[digest, r] = want
    assert len(set(keys.values())) == 6 and SECRET not in keys.values()
    assert PartyKey(bytes(32)).repetition_key("0123456789abcdef", 1) != KEY.repetition_key("0123456789abcdef", 1)
    with pytest.raises(ValueError, match="repetition must be >= 1, got 0"):
        KEY.repetition_key("0123456789abcdef", 0)


def test_the_setups_digest_is_the_run_configs():
    assert SETUP.digest == CFG.digest()
    assert _setup(seed=5).digest == CFG.with_values({"seed": 5}).digest() != SETUP.digest


def test_a_party_key_is_inert():
    assert SECRET.hex() not in repr(KEY) and str(SECRET) not in str(KEY)
    with pytest.raises(TypeError, match="PartyKey cannot be pickled"):
        pickle.dumps(KEY)
    with pytest.raises(AttributeError, match="immutable"):
        KEY._secret = b"x"  # noqa: SLF001
    with pytest.raises(ValueError, match="16 to 64 bytes"):
        PartyKey(b"short")


def test_key_files_are_private_and_checked(tmp_path: Path):
    path = write_key_file(tmp_path / "k", SECRET)
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_bytes() == SECRET
    assert read_key_file(path).repetition_key("ab", 1) == KEY.repetition_key("ab", 1)
    with pytest.raises(FileExistsError):
        write_key_file(path)
    fresh = write_key_file(tmp_path / "fresh")
    assert len(fresh.read_bytes()) == 32 and fresh.read_bytes() != SECRET
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="readable by its owner only \\(mode 0600\\), got mode 0644: run chmod 600"):
        read_key_file(path)
    short = tmp_path / "short"
    short.write_bytes(b"x" * 8)
    short.chmod(0o600)
    with pytest.raises(ValueError, match="must hold 16 to 64 bytes of secret, got 8"):
        read_key_file(short)
    with pytest.raises(ValueError, match="cannot be read"):
        read_key_file(tmp_path / "absent")
    with pytest.raises(ValueError, match="must be a regular file"):
        (tmp_path / "dir").mkdir(mode=0o700)
        read_key_file(tmp_path / "dir")


def test_only_the_parties_node_configs_name_the_key_file(tmp_path: Path):
    assert WORKLOAD.node_config(SETUP, 1) == {"partition-id": 1, "num-partitions": 2}  # not provisioned
    provisioned = WORKLOAD.provision(SETUP, tmp_path)
    assert provisioned.key_file == tmp_path / KEY_FILE_NAME and provisioned.key_file.stat().st_mode & 0o077 == 0
    assert WORKLOAD.node_config(provisioned, 1) == {"partition-id": 1, "num-partitions": 2,
                                                    HASH_KEY_FILE: str(tmp_path / KEY_FILE_NAME)}
    # the server's setup (rebuilt from the run config) has no key file, and what it loads holds no key
    assert WORKLOAD.setup(CFG).key_file is None and str(tmp_path) not in repr(CFG.to_dict())
    server = WORKLOAD.load_server(SETUP)
    assert not any(isinstance(v, PartyKey) for v in vars(server).values()) if hasattr(server, "__dict__") else True
    # in process, the parties' key comes from the provisioned file
    data = WORKLOAD.load_clients(provisioned)
    secret = provisioned.key_file.read_bytes()
    assert data[0].key.repetition_key("ab", 1) == PartyKey(secret).repetition_key("ab", 1)


def test_a_node_loads_only_its_own_block_and_its_key_from_the_file(tmp_path: Path):
    path = write_key_file(tmp_path / "k", SECRET)
    party = WORKLOAD.load_client(SETUP, 1, {"partition-id": 1, "num-partitions": 2, HASH_KEY_FILE: str(path)})
    np.testing.assert_array_equal(party.block, DATA.blocks[1])
    assert party.block.shape == (DATA.n, DATA.widths[1])
    by_file, by_key = Node(client=1, data=party, randomness=KeyedRandomness(SETUP.seed)), _node(1)
    np.testing.assert_array_equal(_encode(by_file)[PARTY_MESSAGE]["sketch"], _encode(by_key)[PARTY_MESSAGE]["sketch"])


# --------------------------------------------------------------------------- the server protocol


def _protocol(exchange, setup=SETUP, committed=None):
    """Run the protocol with ``exchange`` into memory: the committed records and the outcome."""
    records = []

    def commit(step):
        records.append(dict(step.record))
        return dict(step.record)

    server = WORKLOAD.load_server(setup)
    return records, drive(WORKLOAD.protocol(setup, server, committed or Committed()), exchange, commit)


def _honest(setup=SETUP, key=KEY):
    transport = InProcess(WORKLOAD, setup, "fast")
    for party in WORKLOAD.clients(setup):
        transport.nodes[party] = _node(party, setup, key)
    return transport


@pytest.mark.parametrize("method, parties", [
    ("dpfmps-2pest", 2), ("dpfmps-2pest", 3), ("dpfmps-basic", 3), ("ind-lap", 2), ("ldp-agg-2pest", 3),
    ("ldp-agg", 2), ("vfl-kmeans", 2), ("kmeans+dpfmps-2pest", 2), ("dplsf+exact", 2), ("central-dplsf", 2),
    ("central-kmeans", 2),
])
def test_the_protocol_releases_what_the_in_process_reference_releases(method, parties):
    setup = _setup(**{"kmeans-method": method, "parties": parties, "kmeans-samples": 900, "sketch-repetitions": 128,
                      "epsilon": 3.0, "repetitions": 2})
    records, outcome = _protocol(_honest(setup), setup)
    assert outcome.error is None and len(records) == 2
    for r, record in enumerate(records, start=1):
        seed = setup.seed + r - 1
        expected = run_vertical_kmeans(setup.data, setup.kmeans, seed=seed, key=KEY.repetition_key(setup.digest, r))
        m = expected.metrics
        assert (record["cost"], record["cost-ratio"], record["v-measure"], record["relative-error"]) == (
            m["cost"], m["cost_ratio"], m["v_measure"], m.get("relative_error"))
        assert (tuple(record["kprime"]), record["n-hat"], record["epsilon-total"], record["delta-total"]) == (
            expected.kprimes, expected.n_hat, expected.privacy["epsilon"], expected.privacy["delta"])
    np.testing.assert_array_equal(outcome.arrays["centers"], expected.centers)
    assert outcome.info["privacy"] == expected.privacy


def test_a_central_baseline_sends_no_message():
    def refuse(requests):
        raise AssertionError(f"a central baseline sent {len(requests)} requests")

    records, outcome = _protocol(refuse, _setup(**{"kmeans-method": "central-kmeans"}))
    assert outcome.error is None and [r["cost-ratio"] for r in records] == [1.0, 1.0, 1.0]


def test_no_request_holds_the_key():
    sent = []
    honest = _honest()

    def recording(requests):
        sent.extend(requests)
        return honest(requests)

    records, outcome = _protocol(recording)
    assert outcome.error is None and len(sent) == 3 * (1 + 2)  # per repetition: one count, one encode per party
    secrets = [SECRET, *(KEY.repetition_key(SETUP.digest, r)._secret for r in (1, 2, 3))]  # noqa: SLF001
    for request in sent:
        assert set(request.message.records) == {"config"}
        for value in request.message["config"].values():
            assert isinstance(value, (int, float, str)) and not isinstance(value, bytes)
            assert not any(s.hex() in str(value) for s in secrets)


def test_no_reply_holds_the_key():
    node = _node(0)
    replies = [_ask(node, op="count", repetition=1, eps0=count_epsilon(SETUP.kmeans))]
    replies.append(_encode(node, n_hat=replies[0]["metrics"][N_HAT]))
    secrets = [SECRET, KEY.repetition_key(SETUP.digest, 1)._secret]  # noqa: SLF001
    for reply in replies:
        for name, record in reply.records.items():
            if isinstance(record, Arrays):
                for arr in record.values():
                    blob = np.ascontiguousarray(arr).tobytes()
                    assert not any(s in blob or s[:16] in blob for s in secrets), name
            else:
                text = repr(dict(record))
                assert not any(s.hex() in text or repr(s) in text for s in secrets), name


def _corrupt(repetition: int, party: int, change):
    """An exchange whose party ``party`` answers its encode of ``repetition`` changed by ``change(message)``."""
    honest = _honest()

    def exchange(requests):
        replies = honest(requests)
        out = []
        for req, rep in zip(requests, replies, strict=True):
            fields = req.message["config"]
            if fields["op"] == "encode" and fields["repetition"] == repetition and rep.client == party:
                rep = Reply(client=rep.client, message=change(rep.message))
            out.append(rep)
        return out

    return exchange


def _with(message, name, **entries):
    records = dict(message.records)
    records[name] = type(records[name])({**records[name], **entries})
    return Message_(records)


@pytest.mark.parametrize("change, fragment", [
    (lambda m: _with(m, PARTY_MESSAGE, centers=np.full_like(m[PARTY_MESSAGE]["centers"], np.nan)),
     "party 1's encode reply is malformed: centers must be finite"),
    (lambda m: _with(m, PARTY_INFO, party=0), "party 1's encode reply says party 0, repetition 2"),
    (lambda m: _with(m, PARTY_INFO, repetition=1), "party 1's encode reply says party 1, repetition 1"),
    (lambda m: Message_({PARTY_MESSAGE: m[PARTY_MESSAGE]}), "must hold 'party-message' and 'party'"),
    (lambda m: _with(m, PARTY_MESSAGE, sketch=m[PARTY_MESSAGE]["sketch"][:10]),
     "the parties' encode replies do not fit together"),
    (lambda m: _with(m, PARTY_MESSAGE, centers=np.zeros((3, 7))), "expected 4 columns and at most k' = "),
    (lambda m: _with(m, PARTY_MESSAGE, secret=np.zeros(2)), "party 1's encode reply is malformed: arrays must hold"),
])
def test_a_malformed_encode_reply_stops_the_run_and_keeps_the_finished_repetitions(change, fragment):
    records, outcome = _protocol(_corrupt(2, 1, change))
    assert [r["round"] for r in records] == [1]
    assert outcome.error.startswith("repetition 2: ") and fragment in outcome.error, outcome.error


def test_a_bad_count_reply_stops_the_run():
    honest = _honest()

    def exchange(requests):
        replies = honest(requests)
        if requests[0].message["config"]["op"] == "count":
            return [Reply(client=r.client, message=Message_({"metrics": Config({N_HAT: float("inf"), "repetition": 1})}))
                    for r in replies]
        return replies

    records, outcome = _protocol(exchange)
    assert records == [] and "repetition 1: party" in outcome.error and "count reply must hold a finite" in outcome.error


def test_a_refusing_or_lost_party_stops_the_run_with_its_reason():
    stingy = _setup(epsilon=1.0)  # the parties hold a smaller budget than the server assumes
    transport = InProcess(WORKLOAD, stingy, "fast")
    records, outcome = _protocol(transport)
    assert records == [] and "repetition 1: party" in outcome.error
    assert "did not answer the count round: Refusal: expected eps0 = 0.02" in outcome.error
    honest = _honest()

    def losing(requests):
        replies = honest(requests)
        if requests[0].message["config"]["op"] == "encode" and requests[0].message["config"]["repetition"] == 3:
            replies[0] = Reply(client=replies[0].client, error="no reply within 600 s (the node was lost or is hung)")
        return replies

    records, outcome = _protocol(losing)
    assert [r["round"] for r in records] == [1, 2]
    assert outcome.error == ("repetition 3: party 0 did not answer the encode round: no reply within 600 s (the node "
                             "was lost or is hung)")


def test_resume_starts_after_the_committed_repetition():
    records, outcome = _protocol(_honest())
    committed = Committed(round=1, records=records[:1], state={"privacy": outcome.info["privacy"]})
    rest, again = _protocol(_honest(), committed=committed)
    assert [r["round"] for r in rest] == [2, 3]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in (*records[:1], *rest)]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    done, nothing = _protocol(_honest(), committed=Committed(round=3, records=records,
                                                              state={"privacy": outcome.info["privacy"]}))
    assert done == [] and nothing.info["privacy"] == outcome.info["privacy"]


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
    provisioned = WORKLOAD.provision(SETUP, tmp_path)
    configs = {c: WORKLOAD.node_config(provisioned, c) for c in WORKLOAD.clients(SETUP)}
    app = make_client_app(CFG, node_configs=configs, policy=SIMULATION)
    request = to_recorddict(Message_({"config": Config(encode_fields(SETUP.kmeans, 1, 3, 600.0, 2))}))
    reply = _flower(app, 0, request)  # Flower's simulated node config: partition-id and num-partitions only
    assert not reply.has_error(), reply.error.reason
    key = PartyKey(provisioned.key_file.read_bytes())
    np.testing.assert_array_equal(reply.content.array_records[PARTY_MESSAGE]["sketch"].numpy(),
                                  _encode(_node(0, key=key))[PARTY_MESSAGE]["sketch"])


# --------------------------------------------------------------------------- a deployed party: terms, releases, noise


def _terms(**changes):
    return WORKLOAD.node_terms(RunConfig.from_mapping({**BASE, **changes}))


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
    return WORKLOAD.release_of(setup, Request(client=0, kind="query", message=message), _node(0, setup))


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
        WORKLOAD.release_of(setup, Request(client=0, kind="query", message=message), _node(0, setup))


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
