"""Signed secure aggregation against an active server: signed keys, the consistency check, node keys and peers tables.

Bonawitz et al., CCS 2017, the actively secure variant: a server that substitutes a client's keys, or sends
different survivor sets (unmask lists) to different clients, is caught before any share leaves a client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedpriv.node.policy import load_policy
from fedpriv.secagg import crypto
from fedpriv.secagg.base import survivor_threshold
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import MaskingGraph
from fedpriv.secagg.protocol import (
    ConsistencyMsg,
    ConsistencyRequest,
    KeysMsg,
    ProtocolConfig,
    ProtocolViolation,
    RosterMsg,
    SecAggClient,
    SecAggServer,
    SignatureError,
    UnmaskRequest,
    rounding_stream,
)
from fedpriv.secagg.signing import (
    PeerKeys,
    Signer,
    keys_payload,
    load_peers,
    load_signing_key,
    simulated_peers,
    simulated_signer,
    survivors_payload,
)
from simulations.deploy.certs import generate_node_keys

CODEC = FixedPointCodec.for_clients(2.0, 16, modulus_bits=32, precision_bits=20)
SEED = 5
PEERS = simulated_peers(SEED)


def make_config(n: int = 6, *, signed: bool = True, graph: str = "complete", instance: int = 2) -> ProtocolConfig:
    masking = None if graph == "complete" else MaskingGraph("harary", 4, 3, seed=3)
    return ProtocolConfig(instance=instance, roster=tuple(range(n)), threshold=survivor_threshold(n, 0.3), dim=5,
                          codec=CODEC, graph=masking, signed=signed)


def clients(cfg: ProtocolConfig, *, sign: bool = True, verify: bool = True) -> dict[int, SecAggClient]:
    return {c: SecAggClient(c, cfg, signer=simulated_signer(SEED, c) if sign else None,
                            peers=PEERS if verify else None) for c in cfg.roster}


X = np.linspace(-1.0, 1.0, 6 * 5).reshape(6, 5)

Edit = Callable[[dict[int, Any]], dict[int, Any]]


def run(cfg: ProtocolConfig, parties: Mapping[int, SecAggClient], *, rosters: Edit | None = None,
        consistency: Edit | None = None, unmask: Edit | None = None, persist: bool = False) -> np.ndarray:
    """One instance by hand; each ``Edit`` rewrites the server's messages of a step (an active server)."""
    server = SecAggServer(cfg)
    parties = dict(parties)

    def reload(c: int) -> None:  # every message through the node's state, as a deployed node keeps it
        if persist:
            old = parties[c]
            parties[c] = SecAggClient.from_state_dict(cfg, old.state_dict(), signer=old._signer,  # noqa: SLF001
                                                      peers=old._peers)  # noqa: SLF001

    sent = server.receive_keys([KeysMsg.from_dict(parties[c].advertise().to_dict()) for c in cfg.roster])
    sent = rosters(sent) if rosters else sent
    for c in cfg.roster:
        reload(c)
    inboxes = server.receive_shares([parties[c].share_keys(RosterMsg.from_dict(sent[c].to_dict()))
                                     for c in sent])
    asked = server.receive_masked([parties[c].masked_input(X[c], inboxes[c], rounding_stream(SEED, cfg.instance, c))
                                   for c in inboxes])
    if server.signed:
        asked = consistency(asked) if consistency else asked
        for c in asked:
            reload(c)
        replies = [ConsistencyMsg.from_dict(parties[c].consistency(ConsistencyRequest.from_dict(asked[c].to_dict()))
                                            .to_dict()) for c in asked]
        asked = server.receive_consistency(replies)
    asked = unmask(asked) if unmask else asked
    for c in asked:
        reload(c)
    return server.receive_unmask([parties[c].unmask(UnmaskRequest.from_dict(asked[c].to_dict())) for c in asked])


@pytest.fixture
def seeded_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol's secrets from a seeded source, so a signed and an unsigned run draw the same ones."""
    def fresh() -> None:
        gen = np.random.default_rng(77)
        monkeypatch.setattr(crypto, "random_bytes", lambda count: gen.bytes(count))

    fresh()
    return fresh  # type: ignore[return-value]


# --------------------------------------------------------------------------- the honest protocol


@pytest.mark.parametrize("graph", ["complete", "harary"])
def test_the_honest_protocol_completes_with_signatures_on_and_sums_the_same_bits(seeded_csprng, graph):
    cfg = make_config(graph=graph)
    signed = run(cfg, clients(cfg), persist=True)
    seeded_csprng()  # type: ignore[operator]
    plain_cfg = replace(cfg, signed=False)
    plain = run(plain_cfg, clients(plain_cfg, sign=False, verify=False))
    np.testing.assert_array_equal(signed, plain)  # signatures change no bit of the sum
    assert np.all(np.abs(signed - X.sum(axis=0)) <= 6 * CODEC.step)


def test_unsigned_messages_are_what_they_were():
    cfg = make_config(signed=False)
    assert "signed" not in cfg.to_dict()
    msg = SecAggClient(0, cfg).advertise()
    assert msg.signature == b"" and set(msg.to_dict()) == {"instance", "sender", "enc-public", "mask-public"}
    assert set(RosterMsg(2, {0: (b"a" * 32, b"b" * 32)}).to_dict()) == {"instance", "keys-ids", "keys-enc-public",
                                                                        "keys-mask-public"}
    assert set(UnmaskRequest(2, (0,), ()).to_dict()) == {"instance", "uploaders", "dropped"}


def test_the_server_runs_the_consistency_check_when_the_clients_sign_of_their_own_accord(seeded_csprng):
    """An unsigned config, nodes whose policy gives them keys: the server follows them (and rejects unsigned keys)."""
    cfg = make_config(signed=False)
    parties = clients(cfg)
    server = SecAggServer(cfg)
    keys = [parties[c].advertise() for c in cfg.roster]
    keys[5] = replace(keys[5], signature=b"")  # a node without a signing key among signing ones
    rosters = server.receive_keys(keys)
    assert server.signed and set(rosters) == {0, 1, 2, 3, 4} and "must be signed" in server.rejected[5]
    assert all(rosters[c].signatures.keys() == set(range(5)) for c in rosters)


def test_a_verifying_client_never_unmasks_without_the_consistency_check(seeded_csprng):
    cfg = make_config()
    parties = clients(cfg)
    server = SecAggServer(cfg)
    rosters = server.receive_keys([parties[c].advertise() for c in cfg.roster])
    inboxes = server.receive_shares([parties[c].share_keys(rosters[c]) for c in rosters])
    for c in inboxes:
        parties[c].masked_input(X[c], inboxes[c], rounding_stream(SEED, cfg.instance, c))
    skipped = UnmaskRequest(cfg.instance, cfg.roster, ())  # an unmask request straight after the upload
    with pytest.raises(ProtocolViolation, match="only after the consistency check"):
        parties[0].unmask(skipped)


# --------------------------------------------------------------------------- an active server


def test_a_substituted_key_is_detected_before_any_share_is_sent(seeded_csprng):
    """The server puts its own keys for client 3 into client 0's roster (to read the shares 0 sends 3)."""
    cfg = make_config()
    own_enc, own_mask = crypto.generate_keypair()[1], crypto.generate_keypair()[1]

    def substitute(sent: dict[int, Any], signer: Signer | None) -> dict[int, Any]:
        roster = sent[0]
        keys, sigs = dict(roster.keys), dict(roster.signatures)
        keys[3] = (own_enc, own_mask)
        if signer is None:
            sigs.pop(3)
        else:  # re-signed with a key that is not client 3's
            sigs[3] = signer.sign(keys_payload(cfg.digest(), cfg.instance, 3, own_enc, own_mask))
        return {**sent, 0: RosterMsg(roster.instance, keys, sigs)}

    for forger, match in ((simulated_signer(SEED + 1, 3), "do not verify"),
                          (simulated_signer(SEED, 9), "do not verify"),
                          (None, "carry no signature")):
        with pytest.raises(SignatureError, match=f"keys of client 3 .*{match}"):
            run(cfg, clients(cfg), rosters=lambda sent, f=forger: substitute(sent, f))


def test_a_roster_with_a_client_outside_the_peers_table_is_refused(seeded_csprng):
    cfg = make_config()
    table = PeerKeys({c: simulated_signer(SEED, c).public_key for c in range(5)}, source="five peers")
    parties = {c: SecAggClient(c, cfg, signer=simulated_signer(SEED, c), peers=table) for c in cfg.roster}
    with pytest.raises(SignatureError, match=r"clients \[5\] that are not in this node's peers table \(five peers\)"):
        run(cfg, parties)


def test_different_survivor_sets_for_different_clients_are_detected_by_the_consistency_check(seeded_csprng):
    """The server tells clients 0-2 that client 5 uploaded and clients 3-4 that it dropped (to get both of 5's
    secrets); with t = 5 of n = 6 no set gets t signatures, and a signature over the other set does not verify."""
    cfg = make_config()
    u3 = tuple(cfg.roster)
    split = {c: ConsistencyRequest(cfg.instance, u3 if c < 3 else u3[:5]) for c in u3}

    def forward_all(asked: dict[int, Any]) -> dict[int, Any]:
        return {c: split[c] for c in asked if c != 5}

    # the server hands every signature it got to everyone: those over the other set do not verify
    with pytest.raises(SignatureError, match="do not verify over the survivor set client 0 signed"):
        run(cfg, clients(cfg), consistency=forward_all)

    def only_matching(asked: dict[int, UnmaskRequest]) -> dict[int, UnmaskRequest]:
        out = {}
        for c, request in asked.items():
            mine = set(split[c].survivors)
            sigs = {s: v for s, v in request.signatures.items() if set(split[s].survivors) == mine}
            out[c] = UnmaskRequest(request.instance, tuple(sorted(mine)), tuple(set(u3) - mine), sigs)
        return out

    # only the signatures over each client's own set: too few (3 < t = 5 for clients 0-2)
    with pytest.raises(SignatureError, match="carries 3 consistency signatures .* needs threshold t = 5"):
        run(cfg, clients(cfg), consistency=forward_all, unmask=only_matching)


def test_an_unmask_list_that_disagrees_with_the_signed_survivor_set_is_refused(seeded_csprng):
    """After an honest consistency check the server claims client 5 dropped to client 0 (for 5's mask key)."""
    cfg = make_config()

    def claim_dropped(asked: dict[int, UnmaskRequest]) -> dict[int, UnmaskRequest]:
        request = asked[0]
        return {**asked, 0: UnmaskRequest(request.instance, (0, 1, 2, 3, 4), (5,), request.signatures)}

    with pytest.raises(ProtocolViolation, match="must split its share holders by the survivor set it signed"):
        run(cfg, clients(cfg), unmask=claim_dropped)


def test_a_forged_consistency_signature_is_refused(seeded_csprng):
    cfg = make_config()

    def forge(asked: dict[int, UnmaskRequest]) -> dict[int, UnmaskRequest]:
        request = asked[0]
        fake = simulated_signer(SEED + 1, 4).sign(survivors_payload(cfg.digest(), cfg.instance, cfg.roster))
        return {**asked, 0: replace(request, signatures={**request.signatures, 4: fake})}

    with pytest.raises(SignatureError, match=r"clients \[4\] do not verify"):
        run(cfg, clients(cfg), unmask=forge)


@pytest.mark.parametrize("survivors, match", [
    ((1, 2, 3, 4, 5), "must list client 0"),
    ((0, 1, 2, 3), "at least threshold = 5"),
    ((0, 1, 2, 3, 4, 9), "roster clients only"),
])
def test_a_malformed_survivor_set_is_not_signed(seeded_csprng, survivors, match):
    cfg = make_config()
    with pytest.raises(ProtocolViolation, match=match):
        run(cfg, clients(cfg), consistency=lambda asked: {c: ConsistencyRequest(cfg.instance, survivors)
                                                          for c in asked})


def test_a_client_needs_a_signing_key_to_verify_or_take_part_in_a_signed_instance():
    with pytest.raises(ProtocolViolation, match="needs a signing key: the instance is signed"):
        SecAggClient(0, make_config())
    with pytest.raises(ProtocolViolation, match="needs a signing key: it verifies its peers"):
        SecAggClient(0, make_config(signed=False), peers=PEERS)


# --------------------------------------------------------------------------- node keys and peers tables


def test_node_keys_written_by_deploy_sign_and_verify_through_a_peers_table(tmp_path: Path):
    pairs = generate_node_keys(tmp_path / "keys", 3)
    table = tmp_path / "peers.toml"
    first = pairs[0][1].read_text().strip()
    table.write_text(f'0 = "{first}"\n1 = "keys/node1.pub"\n2 = "{pairs[2][1]}"\n')
    peers = load_peers(table)
    for c, (private, _) in enumerate(pairs):
        signature = load_signing_key(private).sign(b"payload")
        assert peers.verify(c, signature, b"payload")
        assert not peers.verify((c + 1) % 3, signature, b"payload")
    assert not peers.verify(0, b"", b"payload")
    with pytest.raises(SignatureError, match="client 7 is not in this node's peers table"):
        peers.key(7)


def test_a_key_of_another_curve_or_a_bad_table_is_refused_naming_the_file(tmp_path: Path):
    other = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "node256"
    path.write_bytes(other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                         serialization.NoEncryption()))
    with pytest.raises(ValueError, match=f"signing-key file {path} must hold an ECDSA P-384 key"):
        load_signing_key(path)
    pub = other.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    for text, match in ((f'0 = "{pub.decode()}"\n', "client 0's key must be an ECDSA P-384 key"),
                        ('zero = "x"\n', "each entry must be <client id>"),
                        ('0 = "ecdsa-sha2-nistp384 bm90IGEga2V5"\n', "not an OpenSSH public key"),
                        ("", "lists no peer")):
        table = tmp_path / f"peers{abs(hash(text))}.toml"
        table.write_text(text)
        with pytest.raises(ValueError, match=f"peers file {table}.*{match}"):
            load_peers(table)
    with pytest.raises(ValueError, match="cannot be read"):
        load_peers(tmp_path / "missing.toml")


def test_the_policy_names_the_signing_key_and_the_peers_table_relative_to_its_file(tmp_path: Path):
    path = tmp_path / "policy.toml"
    path.write_text('[secure-aggregation]\nsigning-key = "keys/node0"\npeers = "peers.toml"\n')
    policy = load_policy(path)
    assert (policy.signing_key, policy.peers) == (tmp_path / "keys/node0", tmp_path / "peers.toml")
    again = tmp_path / "again.toml"
    again.write_text(policy.to_toml())
    assert (load_policy(again).signing_key, load_policy(again).peers) == (policy.signing_key, policy.peers)
    assert load_policy(path).in_simulation is False
    none = tmp_path / "none.toml"
    none.write_text('[secure-aggregation]\nsigning-key = ""\n')
    assert load_policy(none).signing_key is None and load_policy(none).peers is None


def test_simulated_keys_are_deterministic_per_seed_and_client():
    a, b = simulated_signer(SEED, 2), simulated_signer(SEED, 2)
    assert a.sign(b"m") == b.sign(b"m")  # RFC 6979: the runtimes send the same bytes
    assert PEERS.verify(2, a.sign(b"m"), b"m") and not simulated_peers(SEED + 1).verify(2, a.sign(b"m"), b"m")
