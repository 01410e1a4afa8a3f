"""The vertical k-means ClientApp: its ops on in-memory messages, the once-per-run rule, refusals, the key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from clients.contract import CLIENT_ID, CONFIG, METRICS
from clients.vertical_kmeans_app import (
    ANSWERED,
    N_HAT,
    N_HAT_TAIL,
    OP,
    PARTY_INFO,
    PARTY_MESSAGE,
    encode_request,
    make_vertical_kmeans_client_app,
)
from fedpriv.clustering.vertical import (
    VerticalKMeansConfig,
    budget_for,
    count_epsilon,
    party_count,
    party_encode,
    party_rng,
)
from fedpriv.data.vertical import load_vertical
from fedpriv.sketch.hashing import HashKey
from tests.strategies._flower import context

SECRET = bytes(range(7, 39))
KEY = HashKey(SECRET)
SEED = 4
DATA = load_vertical("mixed-gaussian", 2, n=600, seed=1)
CFG = VerticalKMeansConfig(epsilon=2.0, M=64)


def ask(app, ctx, **request) -> Message:
    return app(Message(RecordDict({CONFIG: ConfigRecord(request)}), 1, MessageType.QUERY), ctx)


def refused(reply: Message, *fragments: str) -> None:
    assert reply.has_error(), "expected an error reply"
    for text in fragments:
        assert text in reply.error.reason, reply.error.reason


def encode(app, ctx, cfg=CFG, kprime=3, n_hat=600.0, changes=None) -> Message:
    """The server's encode request for (cfg, k', n̂), with ``changes`` applied to the request."""
    return ask(app, ctx, **{**encode_request(cfg, kprime, n_hat, DATA.parties), **(changes or {})})


@pytest.fixture
def app():
    return make_vertical_kmeans_client_app(DATA, CFG, seed=SEED, key=KEY)


def test_client_id_with_or_without_op(app):
    for party in (0, 1):
        for request in ({}, {OP: "client-id"}):
            reply = ask(app, context(party, 2), **request)
            assert dict(reply.content[METRICS]) == {CLIENT_ID: party}


def test_count_is_party_count_with_the_partys_own_budget_and_only_once(app):
    ctx = context(1, 2)
    eps0 = count_epsilon(CFG)
    reply = ask(app, ctx, op="count", eps0=eps0)
    expected = party_count(DATA.blocks[1], eps0, party_rng(SEED, 1, "count"))
    assert reply.content[METRICS][N_HAT] == expected != DATA.n
    refused(ask(app, ctx, op="count", eps0=eps0), "second 'count'", "more privacy budget")


@pytest.mark.parametrize("eps0", [0.5, 0.0, 0.02 * 2.0 * (1 + 1e-9)])
def test_count_refuses_another_epsilon0_and_stays_unanswered(app, eps0):
    ctx = context(0, 2)
    refused(ask(app, ctx, op="count", eps0=eps0), "expected eps0 = 0.04", f"got {eps0!r}")
    assert "count" not in ctx.state.config_records.get(ANSWERED, {})
    assert not ask(app, ctx, op="count", eps0=count_epsilon(CFG)).has_error()


def test_exact_count_for_the_methods_without_an_n_hat_query():
    cfg = VerticalKMeansConfig(method="ldp-agg-2pest", epsilon=2.0)
    app = make_vertical_kmeans_client_app(DATA, cfg, seed=SEED, key=KEY)
    refused(ask(app, context(0, 2), op="count", eps0=0.04), "expected eps0 = 0.0")
    assert ask(app, context(0, 2), op="count", eps0=0.0).content[METRICS][N_HAT] == DATA.n


def test_encode_is_party_encode_with_the_servers_kprime_and_only_once(app):
    ctx = context(1, 2)
    reply = encode(app, ctx, kprime=3, n_hat=610.5)
    assert set(reply.content) == {PARTY_MESSAGE, PARTY_INFO}
    expected = party_encode(DATA.blocks[1], DATA.ids, 1, CFG, 3, budget_for(CFG, 610.5, 2), KEY, seed=SEED)
    got = {name: arr.numpy() for name, arr in reply.content[PARTY_MESSAGE].items()}
    want = expected.to_arrays()
    assert set(got) == set(want) == {"centers", "sketch"}
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
        assert got[name].dtype == want[name].dtype
    assert dict(reply.content[PARTY_INFO]) == {"party": 1, "m_l": DATA.widths[1], "k_l": expected.k}
    refused(encode(app, ctx, kprime=3, n_hat=610.5), "second 'encode'", "more privacy budget")


def test_a_key_file_gives_what_the_key_gives(tmp_path: Path):
    path = tmp_path / "hash.key"
    path.write_bytes(SECRET)
    by_file = make_vertical_kmeans_client_app(DATA, CFG, seed=SEED, key=path)
    by_key = make_vertical_kmeans_client_app(DATA, CFG, seed=SEED, key=KEY)
    a, b = encode(by_file, context(0, 2)), encode(by_key, context(0, 2))
    np.testing.assert_array_equal(a.content[PARTY_MESSAGE]["sketch"].numpy(), b.content[PARTY_MESSAGE]["sketch"].numpy())


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
    ({"op": "decode"}, "expected op in ('client-id', 'count', 'encode'), got 'decode'"),
])
def test_encode_refuses_a_budget_or_parameters_it_does_not_hold(app, changes, fragment):
    ctx = context(0, 2)
    refused(encode(app, ctx, changes=changes), "vertical k-means ClientApp (party 0) refused", fragment)
    assert "encode" not in ctx.state.config_records.get(ANSWERED, {})


def test_encode_refuses_an_n_hat_that_would_weaken_delta():
    cfg = VerticalKMeansConfig(epsilon=2.0, M=64, b=0.5)  # ε_0 = 1: the tail bound is n − 40
    app = make_vertical_kmeans_client_app(DATA, cfg, seed=SEED, key=KEY)
    refused(encode(app, context(0, 2), cfg, n_hat=DATA.n - N_HAT_TAIL - 1), "it would weaken delta = 1/n-hat")
    assert not encode(app, context(0, 2), cfg, n_hat=DATA.n - N_HAT_TAIL + 1).has_error()
    refused(encode(app, context(0, 2), cfg, n_hat=DATA.n + 1e9, changes={"delta2": 1.0}), "expected delta2 = ")
    # the counting party checks the n̂ is its own answer
    ctx = context(1, 2)
    answer = ask(app, ctx, op="count", eps0=count_epsilon(cfg)).content[METRICS][N_HAT]
    refused(encode(app, ctx, cfg, n_hat=answer + 1), f"expected n-hat = {answer!r} (this party's count answer)")
    assert not encode(app, ctx, cfg, n_hat=answer).has_error()


def test_exact_count_methods_take_only_the_public_n():
    cfg = VerticalKMeansConfig(method="ldp-agg", epsilon=2.0)
    app = make_vertical_kmeans_client_app(DATA, cfg, seed=SEED, key=KEY)
    refused(encode(app, context(0, 2), cfg, n_hat=DATA.n - 1.0), f"expected n-hat = {DATA.n} (the exact public n")
    reply = encode(app, context(0, 2), cfg, n_hat=float(DATA.n))
    assert {"ldp_ids", "ldp_values"} <= set(reply.content[PARTY_MESSAGE])


def test_an_n_hat_without_a_budget_is_refused(app):
    refused(encode(app, context(0, 2), changes={"n-hat": 0.5}), "expected an n-hat this party can derive its budget from")


def test_no_reply_holds_the_key_bytes(app):
    ctx = context(0, 2)
    replies = [ask(app, ctx), ask(app, ctx, op="count", eps0=count_epsilon(CFG))]
    replies.append(encode(app, ctx, n_hat=replies[1].content[METRICS][N_HAT]))
    assert not any(r.has_error() for r in replies)
    for reply in replies:
        for record in reply.content.array_records.values():
            for arr in record.values():
                assert SECRET not in arr.data and SECRET[:16] not in arr.data
        for record in (*reply.content.config_records.values(), *reply.content.metric_records.values()):
            text = repr(dict(record))
            assert SECRET.hex() not in text and repr(SECRET) not in text


def test_a_missing_or_foreign_partition_id_is_refused(app):
    refused(ask(app, context(2, 3)), "partition-id must be a party index in [0, 2), got 2")
    ctx = context(0, 2)
    del ctx.node_config["partition-id"]
    refused(ask(app, ctx), "node_config lacks 'partition-id'")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"cfg": VerticalKMeansConfig(method="central-dplsf")}, ValueError, "got the central baseline 'central-dplsf'"),
    ({"key": SECRET}, TypeError, "key must be a HashKey or the path of a key file, got bytes"),
    ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
    ({"data": DATA.x}, TypeError, "data must be a VerticalData, got ndarray"),
])
def test_factory_errors(kwargs, error, match):
    args = {"data": DATA, "cfg": CFG, "seed": SEED, "key": KEY, **kwargs}
    with pytest.raises(error, match=match):
        make_vertical_kmeans_client_app(args.pop("data"), args.pop("cfg"), **args)
