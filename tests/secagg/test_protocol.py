"""The secure-aggregation protocol over the complete and the Harary graph: exact sums vs the oracle, halting, privacy, misuse."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fedpriv.rng import stream
from fedpriv.secagg import crypto
from fedpriv.secagg.base import STAGES, DropoutModel, SecAggHalted, survivor_threshold
from fedpriv.secagg.encoding import EncodingOverflowError, FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy, MaskingGraph
from fedpriv.secagg.memo import PairMemo
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import (
    InboxMsg,
    KeysMsg,
    MaskedMsg,
    ProtocolAggregator,
    ProtocolConfig,
    ProtocolViolation,
    RosterMsg,
    SecAggClient,
    SecAggServer,
    ShareAuthenticationError,
    SharesMsg,
    UnmaskMsg,
    UnmaskRequest,
)
from fedpriv.secagg.share_layout import _ad

CODEC = FixedPointCodec.for_clients(2.0, 64, modulus_bits=32, precision_bits=20)
#: Both masking graphs; the Harary one with degree 6 and Shamir threshold 3 at the config level.
GRAPHS = ("complete", "harary")


@pytest.fixture
def seeded_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the OS CSPRNG by a seeded source so statistical tests are reproducible."""
    gen = np.random.default_rng(77)
    monkeypatch.setattr(crypto, "random_bytes", lambda count: gen.bytes(count))


def make_config(n: int = 8, dim: int = 6, *, threshold: int | None = None, instance: int = 1,
                codec: FixedPointCodec = CODEC, graph: str = "complete", degree: int = 6,
                share_threshold: int = 3) -> ProtocolConfig:
    """A config with roster ids 10, 13, 16, ... (ids are not positions); ``graph="harary"`` uses (degree, share_threshold)."""
    masking = None if graph == "complete" else MaskingGraph("harary", degree, share_threshold, seed=3)
    return ProtocolConfig(instance=instance, roster=tuple(10 + 3 * k for k in range(n)),
                          threshold=threshold or survivor_threshold(n, 0.3), dim=dim, codec=codec, graph=masking)


def policy(graph: str, **kwargs: Any) -> GraphPolicy:
    """The aggregator-level graph: the complete graph, or Harary with (k, t) from the bounds (γ = 0.05)."""
    return GraphPolicy(graph=graph, **kwargs)


def reports(config: ProtocolConfig, seed: int = 0) -> dict[int, np.ndarray]:
    """One report per roster member, inside the clipping range."""
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, (len(config.roster), config.dim))
    return dict(zip(config.roster, x, strict=True))


Tamper = Callable[[list[Any]], list[Any]]


def drive(config: ProtocolConfig, x: dict[int, np.ndarray], *, tamper: dict[str, Tamper] | None = None,
          absent: dict[str, set[int]] | None = None, persist: bool = False,
          memo: PairMemo | None = None) -> tuple[np.ndarray, SecAggServer]:
    """Run the state machines by hand. ``tamper[step]`` edits a step's client messages (or the inboxes
    at ``"inbox"``); ``absent[step]`` drops clients from that step on; ``persist`` sends every message
    through to_dict/from_dict and every client through state_dict/from_state_dict between steps."""
    tamper, absent = tamper or {}, absent or {}
    gone: set[int] = set()
    server = SecAggServer(config)
    clients = {c: SecAggClient(c, config, memo=memo) for c in config.ring_order()}

    def step(name: str, msgs: list[Any]) -> list[Any]:
        if persist:
            msgs = [type(m).from_dict(m.to_dict()) for m in msgs]
            for c in list(clients):
                clients[c] = SecAggClient.from_state_dict(config, clients[c].state_dict())
        return tamper.get(name, lambda m: m)(msgs)

    def live(ids: Any, name: str) -> list[int]:
        gone.update(absent.get(name, ()))
        return [c for c in ids if c not in gone]

    rosters = server.receive_keys(step("advertise", [clients[c].advertise() for c in live(clients, "advertise")]))
    inboxes = server.receive_shares(step("share", [clients[c].share_keys(rosters[c])
                                                   for c in live([c for c in clients if c in rosters], "share")]))
    inboxes = dict(zip(inboxes, tamper.get("inbox", lambda m: m)(list(inboxes.values())), strict=True))
    if memo is not None:
        memo.expect_uploaders(set(inboxes) - absent.get("upload", set()) - gone)
    masked = [clients[c].masked_input(x[c], inboxes[c], stream(5, config.instance, c, "secagg-rounding"))
              for c in live([c for c in clients if c in inboxes], "upload")]
    requests = server.receive_masked(step("upload", masked))
    replies = [clients[c].unmask(requests[c]) for c in live([c for c in clients if c in requests], "unmask")]
    total = server.receive_unmask(step("unmask", replies))
    return total, server


def assert_sum_to_quantization(total: np.ndarray, x: dict[int, np.ndarray], survivors: Any, step: float) -> None:
    """|protocol − exact| <= (#survivors)·step per coordinate."""
    exact = np.sum([x[c] for c in survivors], axis=0)
    assert np.all(np.abs(total - exact) <= len(survivors) * step)


# ------------------------------------------------------------------------------------------------
# correctness against the oracle


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.3])
def test_sum_equals_oracle_to_the_quantization_step(rate: float, graph: str) -> None:
    n, d = 32, 12
    x = np.random.default_rng(1).uniform(-2, 2, (n, d))
    ids = np.random.default_rng(2).permutation(500)[:n]
    dropout = DropoutModel.uniform(rate, seed=4)
    codec = FixedPointCodec.for_clients(2.0, n, modulus_bits=40, precision_bits=24)
    agg = ProtocolAggregator(omega=0.5, codec=codec, seed=9, graph=policy(graph))
    got = agg.aggregate(x, ids, dropout=dropout, instance=3)
    want = OracleAggregator(omega=0.5).aggregate(x, ids, dropout=dropout, instance=3)
    assert got.halted_at is None and want.halted_at is None
    np.testing.assert_array_equal(got.survivors, want.survivors)
    assert {s: v.tolist() for s, v in got.present.items()} == {s: v.tolist() for s, v in want.present.items()}
    assert np.all(np.abs(got.total - want.total) <= len(got.survivors) * codec.step)
    if rate:
        assert len(got.survivors) < n  # the drop-outs did happen
    assert got.metrics["quantization-step"] == codec.step
    assert got.metrics["bytes-up-per-client"] > 0 and set(STAGES) <= {k[8:] for k in got.metrics if k[:8] == "seconds-"}
    k = agg.guarantee(n).degree
    assert got.metrics["graph-degree"] == k and (k == n - 1) == (graph == "complete") and k < n - 1 or graph == "complete"


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_drop_outs_at_each_step_still_give_the_survivors_sum(rate: float, stage: str, graph: str) -> None:
    n, d = 30, 8
    x = np.random.default_rng(7).uniform(-2, 2, (n, d))
    dropout = DropoutModel(rates={stage: rate}, seed=11)
    codec = FixedPointCodec.for_clients(2.0, n, modulus_bits=40, precision_bits=24)
    got = ProtocolAggregator(omega=0.5, codec=codec, seed=2, graph=policy(graph)).aggregate(
        x, np.arange(n), dropout=dropout, instance=5)
    want = OracleAggregator(omega=0.5).aggregate(x, np.arange(n), dropout=dropout, instance=5)
    assert got.halted_at is None and want.halted_at is None
    assert {s: v.tolist() for s, v in got.present.items()} == {s: v.tolist() for s, v in want.present.items()}
    assert len(want.present[stage]) < n  # someone did drop at that step
    assert np.all(np.abs(got.total - want.total) <= len(got.survivors) * codec.step)


def test_both_graphs_release_the_same_sum() -> None:
    # the masks cancel exactly in both graphs, so with one rounding seed the released sums are bit-identical
    n, d = 24, 16
    x = np.random.default_rng(3).uniform(-1, 1, (n, d))
    codec = FixedPointCodec.for_clients(1.0, n)
    dropout = DropoutModel.uniform(0.1, seed=2)
    sums = [ProtocolAggregator(omega=0.3, codec=codec, seed=4, graph=policy(g)).aggregate(
        x, np.arange(n), dropout=dropout, instance=7) for g in GRAPHS]
    assert sums[0].metrics["graph-degree"] == n - 1 > sums[1].metrics["graph-degree"]
    np.testing.assert_array_equal(sums[0].survivors, sums[1].survivors)
    np.testing.assert_array_equal(sums[0].total, sums[1].total)


@pytest.mark.parametrize("graph", GRAPHS)
def test_sum_is_unbiased(graph: str) -> None:
    # error per coordinate = Σ_survivors (rounding error)·step with mean 0 and variance Σ frac(1−frac);
    # the mean error over d coordinates must be within 5 standard errors of 0
    n, d = 12, 4000
    codec = FixedPointCodec(clip_range=1.0, levels=20, modulus_bits=16)
    x = np.random.default_rng(6).uniform(-1, 1, (n, d))
    dropout = DropoutModel(forced={"upload": [3]})
    agg = ProtocolAggregator(omega=0.2, codec=codec, seed=1, graph=policy(graph))
    got = agg.aggregate(x, np.arange(n), dropout=dropout, instance=0)
    keep = np.setdiff1d(np.arange(n), [3])
    err = (got.total - x[keep].sum(axis=0)) / codec.step
    frac = (x[keep] + 1.0) / codec.step % 1.0
    se = np.sqrt((frac * (1 - frac)).sum(axis=0).mean() / d)
    assert abs(err.mean()) <= 5 * se


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("stage", STAGES)
def test_halts_below_the_threshold_at_each_step(stage: str, graph: str) -> None:
    n = 10
    t = survivor_threshold(n, 0.3)
    x = np.random.default_rng(0).uniform(-1, 1, (n, 4))
    ids = np.arange(100, 100 + n)
    dropout = DropoutModel(forced={stage: ids[: n - t + 1].tolist()})
    agg = ProtocolAggregator(omega=0.3, codec=CODEC, seed=0, graph=policy(graph))
    got = agg.aggregate(x, ids, dropout=dropout, instance=2)
    want = OracleAggregator(omega=0.3).aggregate(x, ids, dropout=dropout, instance=2)
    assert got.total is None and got.halted_at == stage == want.halted_at
    np.testing.assert_array_equal(got.survivors, want.survivors)
    assert {s: v.tolist() for s, v in got.present.items()} == {s: v.tolist() for s, v in want.present.items()}
    assert got.reason == want.reason and f"{t - 1} clients present, threshold t = ⌈(1−ω)n⌉ = {t}" in got.reason


@pytest.mark.parametrize("graph", GRAPHS)
def test_exactly_threshold_survivors_suffice(graph: str) -> None:
    config = make_config(n=10, graph=graph)
    x = reports(config)
    out = config.roster[: len(config.roster) - config.threshold]
    total, server = drive(config, x, absent={"upload": set(out)})
    assert len(server.survivors) == config.threshold
    assert_sum_to_quantization(total, x, server.survivors, CODEC.step)


# ------------------------------------------------------------------------------------------------
# the sparse graph: neighbourhoods, and what the server cannot unmask


def test_harary_clients_hear_only_about_their_neighbours() -> None:
    config = make_config(n=12, graph="harary", degree=4, share_threshold=3)
    server = SecAggServer(config)
    clients = {c: SecAggClient(c, config) for c in config.roster}
    rosters = server.receive_keys([c.advertise() for c in clients.values()])
    for c, roster in rosters.items():
        assert set(roster.keys) == {c, *config.neighbours(c)} and len(config.neighbours(c)) == 4
        assert all(c in config.neighbours(j) for j in config.neighbours(c))  # the graph is undirected
    inboxes = server.receive_shares([clients[c].share_keys(rosters[c]) for c in config.roster])
    assert all(set(inbox.ciphertexts) == set(config.neighbours(c)) for c, inbox in inboxes.items())
    stranger = next(j for j in config.roster if j != 10 and j not in config.neighbours(10))
    client = SecAggClient(10, config)
    own = client.advertise()
    bad = RosterMsg(1, {**rosters[10].keys, 10: (own.enc_public, own.mask_public),
                        stranger: rosters[stranger].keys[stranger]})
    with pytest.raises(ProtocolViolation, match=f"must list only itself and its neighbours.*{stranger}"):
        client.share_keys(bad)


def test_server_cannot_unmask_a_client_when_fewer_than_t_of_its_neighbours_answer() -> None:
    # client v drops after sharing; to remove its pairwise masks the server needs t = 3 shares of v's mask
    # key, held by v's 4 neighbours. Three of them answer nothing at the unmask step: one share reaches the
    # server, though enough clients answer overall (the global threshold is met). The server halts and
    # releases nothing; the one share it got is independent of the key (Shamir: fewer than t shares are
    # uniform whatever the secret), so rebuilding from what arrived cannot give v's key.
    config = make_config(n=14, graph="harary", degree=4, share_threshold=3)
    v = config.roster[5]
    silent = set(config.neighbours(v)[:3])
    x = reports(config)
    got: dict[str, Any] = {}

    def keep(msgs: list[UnmaskMsg]) -> list[UnmaskMsg]:
        got["shares"] = [m.key_shares[v] for m in msgs if v in m.key_shares]
        got["self"] = [m.sender for m in msgs if v in m.self_shares]  # never both secrets of one client
        return msgs

    with pytest.raises(SecAggHalted, match=f"halted at step 'unmask': .* fewer share holders left than the Shamir "
                                           f"threshold t = 3.* client {v}'s mask key \\(1 left\\)"):
        drive(config, x, absent={"upload": {v}, "unmask": silent}, tamper={"unmask": keep})
    assert len(got["shares"]) == 1 and got["self"] == []
    assert len(config.roster) - 1 - len(silent) >= config.threshold  # the global rule alone would not halt


def test_the_sparse_graph_halts_early_when_a_dropped_client_keeps_too_few_neighbours() -> None:
    # three of v's four neighbours drop at the upload together with v: v's key has one holder left among
    # the uploaders, so the server stops before asking for any share
    config = make_config(n=14, graph="harary", degree=4, share_threshold=3)
    v = config.roster[5]
    gone = {v, *config.neighbours(v)[:3]}
    with pytest.raises(SecAggHalted, match="halted at step 'upload'.*client"):
        drive(config, reports(config), absent={"upload": gone})


def test_memo_gives_bit_identical_uploads(seeded_csprng: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same secrets (seeded CSPRNG) with and without the shared memo: every masked upload is identical
    config = make_config(n=12, dim=40, graph="harary", degree=6, share_threshold=3)
    x = reports(config)
    uploads: list[dict[int, np.ndarray]] = []

    def keep(msgs: list[MaskedMsg]) -> list[MaskedMsg]:
        uploads.append({m.sender: m.masked for m in msgs})
        return msgs

    memo = PairMemo(config.dim, CODEC.word_dtype)
    state = np.random.default_rng(77).bit_generator.state
    drive(config, x, tamper={"upload": keep}, absent={"upload": {config.roster[2]}}, memo=memo)
    gen = np.random.default_rng(0)
    gen.bit_generator.state = state
    monkeypatch.setattr(crypto, "random_bytes", lambda count: gen.bytes(count))
    drive(config, x, tamper={"upload": keep}, absent={"upload": {config.roster[2]}})
    assert uploads[0].keys() == uploads[1].keys()
    assert all(np.array_equal(uploads[0][c], uploads[1][c]) for c in uploads[0])
    assert memo.hits["agree"] > 0 and memo.hits["masks"] > 0


# ------------------------------------------------------------------------------------------------
# privacy of a single upload


@pytest.mark.parametrize("graph", GRAPHS)
def test_a_masked_upload_looks_uniform_while_the_sum_is_exact(seeded_csprng: None, graph: str) -> None:
    # Top 4 bits of one client's masked vector (d = 16,000 coordinates) in 16 bins: chi-square test of
    # uniformity must not reject at level 1e-3. Its unmasked encoding (values in [0, L], L ≈ M/64)
    # is rejected by the same test, so the test has power.
    config = make_config(n=8, dim=16_000, graph=graph)
    x = reports(config)
    uploads: dict[int, np.ndarray] = {}

    def keep(msgs: list[MaskedMsg]) -> list[MaskedMsg]:
        uploads.update({m.sender: m.masked for m in msgs})
        return msgs

    total, server = drive(config, x, tamper={"upload": keep})
    one = uploads[config.roster[2]]
    assert stats.chisquare(np.bincount((one >> np.uint64(28)).astype(np.int64), minlength=16)).pvalue > 1e-3
    encoded = CODEC.encode(x[config.roster[2]], stream(5, config.instance, config.roster[2], "secagg-rounding"))
    assert stats.chisquare(np.bincount((encoded >> np.uint64(28)).astype(np.int64), minlength=16)).pvalue < 1e-3
    assert_sum_to_quantization(total, x, config.roster, CODEC.step)


# ------------------------------------------------------------------------------------------------
# authentication, replay and malformed messages


@pytest.mark.parametrize("graph", GRAPHS)
def test_corrupted_inbox_ciphertext_fails_authentication(graph: str) -> None:
    config = make_config(graph=graph)
    x = reports(config)

    def flip(inboxes: list[InboxMsg]) -> list[InboxMsg]:
        first = inboxes[0]
        sender = next(iter(first.ciphertexts))
        ct = first.ciphertexts[sender]
        return [replace(first, ciphertexts={**first.ciphertexts, sender: ct[:-1] + bytes([ct[-1] ^ 1])}), *inboxes[1:]]

    with pytest.raises(ShareAuthenticationError, match="failed authentication"):
        drive(config, x, tamper={"inbox": flip})


@pytest.mark.parametrize("graph", GRAPHS)
def test_ciphertext_redirected_to_another_client_fails_authentication(graph: str) -> None:
    config = make_config(graph=graph)
    a, b = config.roster[0], next(j for j in config.neighbours(config.roster[0]))
    sender = next(j for j in config.neighbours(a) if j in config.neighbours(b))  # a third client who writes to both

    def swap(inboxes: list[InboxMsg]) -> list[InboxMsg]:
        by = dict(zip(sorted(config.roster), inboxes, strict=True))  # inboxes come in ascending client order
        by[a] = replace(by[a], ciphertexts={**by[a].ciphertexts, sender: by[b].ciphertexts[sender]})
        return [by[c] for c in sorted(by)]

    with pytest.raises(ShareAuthenticationError):
        drive(config, reports(config), tamper={"inbox": swap})


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("which", ["self", "key"])
def test_corrupted_unmask_share_is_detected(which: str, graph: str) -> None:
    config = make_config(graph=graph)
    x = reports(config)
    dropped = config.roster[-1]
    target = config.roster[1] if which == "self" else dropped
    field = "self_shares" if which == "self" else "key_shares"

    def corrupt(msgs: list[UnmaskMsg]) -> list[UnmaskMsg]:
        # the lowest-id holder that answers is among the t holders whose shares are used
        k = min((i for i, m in enumerate(msgs) if target in getattr(m, field)), key=lambda i: msgs[i].sender)
        shares = dict(getattr(msgs[k], field))
        raw = bytearray(shares[target])
        raw[3] ^= 0x01
        shares[target] = bytes(raw)
        return [*msgs[:k], replace(msgs[k], **{field: shares}), *msgs[k + 1:]]

    with pytest.raises(ShareAuthenticationError, match=f"client {target} does not match"):
        drive(config, x, absent={"upload": {dropped}}, tamper={"unmask": corrupt})


def test_client_refuses_replayed_and_out_of_order_steps() -> None:
    config = make_config(n=4, threshold=3)
    client = SecAggClient(10, config)
    with pytest.raises(ProtocolViolation, match="'share_keys' is out of order or replayed; the next step must be 'advertise'"):
        client.share_keys(RosterMsg(1, {}))
    client.advertise()
    with pytest.raises(ProtocolViolation, match="'advertise' is out of order or replayed"):
        client.advertise()


@pytest.mark.parametrize("graph", GRAPHS)
def test_server_refuses_replays_duplicates_strangers_and_other_instances(graph: str) -> None:
    config = make_config(n=8, graph=graph)
    clients = [SecAggClient(c, config) for c in config.roster]
    keys = [c.advertise() for c in clients]
    with pytest.raises(ProtocolViolation, match="two messages from client 10 in one step"):
        SecAggServer(config).receive_keys([*keys, keys[0]])
    with pytest.raises(ProtocolViolation, match="sender must be one of the 8 clients expected at step 'advertise', got client 11"):
        SecAggServer(config).receive_keys([*keys, replace(keys[0], sender=11)])
    with pytest.raises(ProtocolViolation, match="must be for instance 1, got instance 2"):
        SecAggServer(config).receive_keys([replace(keys[0], instance=2), *keys[1:]])
    server = SecAggServer(config)
    rosters = server.receive_keys(keys)
    with pytest.raises(ProtocolViolation, match="receive_keys is out of order or replayed; the next call must be receive_shares"):
        server.receive_keys(keys)
    with pytest.raises(ProtocolViolation, match="must be for instance 1, got instance 2"):
        clients[0].share_keys(replace(rosters[10], instance=2))
    shares = [c.share_keys(rosters[c.client_id]) for c in clients]
    forged = replace(shares[1], ciphertexts={**shares[1].ciphertexts, 99: next(iter(shares[1].ciphertexts.values()))})
    inboxes = server.receive_shares([shares[0], forged, *shares[2:]])
    assert "ciphertexts must be addressed to exactly" in server.rejected[13] and 13 not in inboxes


def test_share_ciphertext_of_another_instance_fails_authentication() -> None:
    # even under the same pairwise key, the associated data binds instance, sender and recipient
    key = bytes(32)
    ct = crypto.encrypt(key, b"x" * 128, _ad(1, 10, 13))
    assert crypto.decrypt(key, ct, _ad(1, 10, 13)) == b"x" * 128
    for ad in (_ad(2, 10, 13), _ad(1, 13, 10)):
        with pytest.raises(ShareAuthenticationError):
            crypto.decrypt(key, ct, ad)


@pytest.mark.parametrize(
    "request_kwargs, match",
    [
        ({"uploaders": (10, 13, 16, 19), "dropped": (19,)}, "both uploader and dropped, got \\[19\\]"),
        ({"uploaders": (10, 13), "dropped": (16, 19)}, "at least threshold = 3 uploaders, got 2"),
        ({"uploaders": (10, 13, 16, 99), "dropped": (19,)}, "outside it \\[99\\]"),
        ({"uploaders": (10, 13, 16), "dropped": ()}, "missing \\[19\\]"),
        ({"uploaders": (13, 16, 19), "dropped": (10,)}, "must list client 10 among the uploaders"),
    ],
)
def test_client_refuses_bad_unmask_requests(request_kwargs: dict, match: str) -> None:
    config = make_config(n=4, threshold=3)
    x = reports(config)
    server = SecAggServer(config)
    clients = {c: SecAggClient(c, config) for c in config.roster}
    rosters = server.receive_keys([c.advertise() for c in clients.values()])
    inboxes = server.receive_shares([c.share_keys(rosters[i]) for i, c in clients.items()])
    clients[10].masked_input(x[10], inboxes[10], stream(0, 1, 10, "r"))
    with pytest.raises(ProtocolViolation, match=match):
        clients[10].unmask(UnmaskRequest(1, **request_kwargs))


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize(
    "bad, reason",
    [
        (lambda y: y[:-1], "shape \\(6,\\)"),
        (lambda y: np.append(y[:-1], np.uint64(2**32)), "values must lie in \\[0, 2\\^32\\)"),
        (lambda y: y.astype(np.float64), "integer array"),
    ],
)
def test_bad_upload_is_rejected_and_the_rest_still_sums(bad: Callable, reason: str, graph: str) -> None:
    config = make_config(n=8, graph=graph)
    x = reports(config)
    victim = config.roster[3]

    def spoil(msgs: list[MaskedMsg]) -> list[MaskedMsg]:
        return [replace(m, masked=bad(m.masked)) if m.sender == victim else m for m in msgs]

    total, server = drive(config, x, tamper={"upload": spoil})
    assert set(server.rejected) == {victim} and re.search(reason, server.rejected[victim])
    assert victim not in server.survivors and len(server.survivors) == 7
    assert_sum_to_quantization(total, x, server.survivors, CODEC.step)


@pytest.mark.parametrize("graph", GRAPHS)
def test_state_and_message_round_trips_give_the_same_sum(graph: str) -> None:
    config = make_config(n=9, graph=graph)
    x = reports(config)
    absent = {"share": {config.roster[4]}, "upload": {config.roster[0]}}
    plain, _ = drive(config, x, absent=absent)
    persisted, _ = drive(config, x, absent=absent, persist=True)
    np.testing.assert_array_equal(plain, persisted)
    assert ProtocolConfig.from_dict(config.to_dict()) == config


def test_encoding_overflow_raises() -> None:
    config = make_config(n=4, threshold=3)
    x = reports(config)
    x[13] = x[13] + 5.0
    with pytest.raises(EncodingOverflowError, match="outside"):
        drive(config, x)


def test_from_dict_refuses_malformed_messages() -> None:
    good = KeysMsg(1, 10, bytes(32), bytes(32)).to_dict()
    with pytest.raises(ProtocolViolation, match="message field 'sender' is missing"):
        KeysMsg.from_dict({k: v for k, v in good.items() if k != "sender"})
    with pytest.raises(ProtocolViolation, match="message field 'instance' must be"):
        KeysMsg.from_dict({**good, "instance": "1"})
    shares = SharesMsg(1, 10, {13: b"a", 16: b"b"}, bytes(32)).to_dict()
    assert shares["ciphertexts-ids"] == [13, 16] and SharesMsg.from_dict(shares).ciphertexts == {13: b"a", 16: b"b"}
    with pytest.raises(ProtocolViolation, match="must have equal lengths"):
        SharesMsg.from_dict({**shares, "ciphertexts": [b"a"]})
    with pytest.raises(ProtocolViolation, match="message field 'graph' must be 'complete' or 'harary', got 'ring'"):
        ProtocolConfig.from_dict({**make_config().to_dict(), "graph": "ring"})


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"roster": ()}, ValueError, "roster must be a non-empty, strictly increasing"),
        ({"roster": (3, 2, 5)}, ValueError, "roster must be a non-empty, strictly increasing"),
        ({"roster": (1, 1, 2)}, ValueError, "roster must be a non-empty, strictly increasing"),
        ({"roster": (-1, 2, 3)}, ValueError, "roster entry must be >= 0"),
        ({"threshold": 0}, ValueError, "threshold must be >= 1, got 0"),
        ({"threshold": 4}, ValueError, "threshold must be <= 3, got 4"),
        ({"dim": 0}, ValueError, "dim must be >= 1, got 0"),
        ({"instance": -2}, ValueError, "instance must be >= 0, got -2"),
        ({"codec": "fixed"}, TypeError, "codec must be a FixedPointCodec"),
        ({"codec": FixedPointCodec(1.0, 100, 8)}, ValueError, "num_clients = 3, levels = 100, modulus_bits = 8"),
        ({"graph": "harary"}, TypeError, "graph must be a MaskingGraph or None"),
        ({"graph": MaskingGraph("harary", 4, 2)}, ValueError, "degree must be <= n − 1 = 2 for a Harary graph, got 4"),
        ({"graph": MaskingGraph("complete", 2, 3)}, ValueError, "share_threshold must equal threshold = 2"),
        ({"graph": MaskingGraph("complete", 5, 2)}, ValueError, "degree must be n − 1 = 2 for the complete graph"),
    ],
)
def test_config_errors(kwargs: dict, exc: type, match: str) -> None:
    params = {"instance": 0, "roster": (1, 2, 3), "threshold": 2, "dim": 4, "codec": CODEC, **kwargs}
    with pytest.raises(exc, match=match):
        ProtocolConfig(**params)


def test_aggregator_errors() -> None:
    with pytest.raises(TypeError, match="codec must be a FixedPointCodec"):
        ProtocolAggregator(omega=0.3, codec=None, seed=0)
    with pytest.raises(TypeError, match="graph must be a GraphPolicy or None"):
        ProtocolAggregator(omega=0.3, codec=CODEC, seed=0, graph="harary")
    small = ProtocolAggregator(omega=0.3, codec=FixedPointCodec(1.0, 100, 8), seed=0)
    with pytest.raises(ValueError, match="at most 2 clients fit"):
        small.aggregate(np.zeros((3, 2)), [0, 1, 2], dropout=DropoutModel(), instance=0)
    with pytest.raises(ValueError, match="client id must be in the roster"):
        SecAggClient(5, make_config(n=3, threshold=2))
    assert isinstance(make_config().to_dict()["roster"], list) and InboxMsg(1, {}).to_dict()["ciphertexts"] == []
