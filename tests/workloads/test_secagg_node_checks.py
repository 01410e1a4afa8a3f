"""What a node checks in secure aggregation (SecAggMiddleware, so every runtime): the advertised roster, threshold and
graph against its own policy, the oracle switch, its signing key and peers table; the signed protocol end to end and
an active server caught by it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness
from fedpriv.secagg.base import DropoutModel, survivor_threshold
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy, MaskingGraph
from fedpriv.secagg.protocol import ConsistencyRequest, ProtocolAggregator, ProtocolConfig, RosterMsg, UnmaskRequest
from fedpriv.workloads import Config, Node, Reply, Request, secagg_middleware
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import call, chain
from fedpriv.workloads.protocol import Outcome, drive
from fedpriv.workloads.secure_aggregation import (
    INSTANCE,
    SECAGG,
    SECAGG_MSG,
    SEED,
    STAGE,
    SecAggMiddleware,
    SecAggSettings,
    fields_of,
    input_message,
    secure_sum_steps,
    to_records,
)
from simulations.deploy.certs import generate_node_keys

N, D = 6, 4
CODEC = FixedPointCodec.for_clients(4.0, 300)
X = np.linspace(-1.0, 1.0, N * D).reshape(N, D)
DEFAULT, SIMULATION = NodePolicy.default(), NodePolicy.simulation()


def config(n: int = N, threshold: int | None = None, graph: MaskingGraph | None = None, *, roster: Sequence[int] = (),
           signed: bool = False) -> ProtocolConfig:
    ids = tuple(roster) or tuple(range(n))
    return ProtocolConfig(instance=0, roster=ids, threshold=threshold or survivor_threshold(len(ids), 0.3), dim=D,
                          codec=CODEC, graph=graph, signed=signed)


def advertise(cfg: ProtocolConfig, policy: NodePolicy, client: int = 0) -> tuple[Node, Any]:
    """The node of ``client`` under ``policy`` after the server's advertise message: (node, its reply or refusal)."""
    node = Node(client=client, data=None, randomness=KeyedRandomness(3))
    request = Request(client=client, kind="train", message=Message_({
        SECAGG: Config({STAGE: "advertise", INSTANCE: cfg.instance, SEED: 3}), **to_records(cfg.to_dict())}))
    try:
        return node, SecAggMiddleware(policy=policy)(request, node, _never)
    except PolicyRefusal as refusal:
        return node, refusal


def _never(request: Request, node: Node) -> Message_:
    raise AssertionError("the application was asked for its vector")


def refused(result: Any, *needles: str) -> None:
    assert isinstance(result, PolicyRefusal), result
    for needle in needles:
        assert needle in str(result), str(result)


# --------------------------------------------------------------------------- roster, threshold, graph


def test_a_roster_of_one_with_threshold_one_is_refused_and_nothing_is_drawn():
    node, got = advertise(config(roster=(0,), threshold=1), DEFAULT)
    refused(got, "node policy refuses roster = 1", "min-roster = 3")
    assert got.key == "roster" and got.asked == 1
    assert node.state == {}  # no key drawn, no instance joined
    _, ok = advertise(config(roster=(0,), threshold=1), SIMULATION)  # a simulation sets no floor
    assert not isinstance(ok, PolicyRefusal)


@pytest.mark.parametrize("policy, n, threshold, need", [
    (DEFAULT, 10, 6, 7),  # ⌈(1 − 0.3)·10⌉ = 7
    (replace(DEFAULT, max_dropout=0.1), 10, 8, 9),
    (DEFAULT, 3, 2, 3),  # 0.7·3 = 2.1
])
def test_a_threshold_below_the_nodes_own_limit_is_refused(policy, n, threshold, need):
    _, got = advertise(config(n, threshold), policy)
    refused(got, f"node policy refuses threshold = {threshold}: this node's limit is ⌈(1 − ω)·n⌉ = {need} for a "
            f"roster of n = {n} clients (its max-dropout ω = {policy.max_dropout:g})")
    _, ok = advertise(config(n, need), policy)
    assert not isinstance(ok, PolicyRefusal)


def test_the_roster_floor_is_the_nodes_min_roster():
    policy = replace(DEFAULT, min_roster=5)
    refused(advertise(config(4, 4), policy)[1], "roster = 4", "min-roster = 5")
    assert not isinstance(advertise(config(5, 5), policy)[1], PolicyRefusal)


def test_a_harary_graph_weaker_than_the_nodes_bound_is_refused():
    n = 200
    threshold = survivor_threshold(n, 0.3)
    weak = MaskingGraph("harary", 4, 2, seed=1)
    _, got = advertise(config(n, threshold, weak), DEFAULT)
    refused(got, "node policy refuses degree = 4", "share threshold t = 2 over n = 200", "γ = 0.05",
            "this node's limit is 2^-40")
    good, _ = GraphPolicy().resolve(n, 0.3, seed=1)  # what fedpriv's servers advertise
    node, ok = advertise(config(n, threshold, good), DEFAULT)
    assert not isinstance(ok, PolicyRefusal) and good.kind == "harary"
    # the neighbours come from the public randomness on the node, not from the server's message
    assert set(fields_of(Message_(to_records(config(n, threshold, good).to_dict())))) == {
        "instance", "roster", "threshold", "dim", "clip-range", "levels", "modulus-bits", "graph", "degree",
        "share-threshold", "graph-seed"}


def test_the_oracle_is_refused_under_the_default_policy_before_the_application_is_asked():
    request = Request(client=1, kind="train", message=Message_({
        SECAGG: Config({STAGE: "oracle", INSTANCE: 0, SEED: 3, "dim": D})}))
    node = Node(client=1, data=None, randomness=KeyedRandomness(3))
    with pytest.raises(PolicyRefusal, match=r"node policy refuses secagg = 'oracle': it needs the simulation-only "
                                            r"switch 'secagg-oracle'") as info:
        SecAggMiddleware(policy=DEFAULT)(request, node, _never)
    assert (info.value.key, info.value.asked) == ("secagg", "oracle")
    reply = SecAggMiddleware(policy=SIMULATION)(request, node, lambda r, n: input_message(X[1]))
    np.testing.assert_array_equal(reply["secagg-input"]["vector"], X[1])


def test_a_middleware_with_a_memo_is_a_simulation():
    assert SecAggMiddleware(memo=True).policy.in_simulation and not SecAggMiddleware().policy.in_simulation
    with pytest.raises(ValueError, match="memo=True shares pairwise secrets between simulated clients"):
        SecAggMiddleware(memo=True, policy=DEFAULT)


# --------------------------------------------------------------------------- signing keys and peers


@pytest.fixture(scope="module")
def node_keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """ECDSA P-384 node keys as ``fedpriv deploy`` writes them, and a peers table listing them."""
    out = tmp_path_factory.mktemp("keys")
    pairs = generate_node_keys(out, N)
    table = out / "peers.toml"
    table.write_text("".join(f'{c} = "{pub.name}"\n' for c, (_, pub) in enumerate(pairs)))
    return [private for private, _ in pairs], table


def keyed(node_keys: tuple[list[Path], Path], client: int, **changes: Any) -> NodePolicy:
    keys, table = node_keys
    return replace(DEFAULT, signing_key=keys[client], peers=table, **changes)


def test_a_deployed_node_without_a_peers_table_says_it_runs_against_an_honest_but_curious_server(caplog):
    secagg_middleware._LOGGED.clear()  # noqa: SLF001 - logged once per process
    with caplog.at_level(logging.WARNING, logger="fedpriv.workloads.secure_aggregation"):
        node, reply = advertise(config(), DEFAULT)
    assert not isinstance(reply, PolicyRefusal) and "signature" not in reply[SECAGG_MSG]
    assert "honest-but-curious server model" in caplog.text and "not detected" in caplog.text
    caplog.clear()
    advertise(config(), SIMULATION)
    assert "honest-but-curious" not in caplog.text  # a simulation has no server to distrust


def test_a_signed_instance_needs_the_nodes_signing_key(node_keys):
    refused(advertise(config(signed=True), DEFAULT)[1], "refuses signed = 1", "no [secure-aggregation] signing-key")
    keys, table = node_keys
    refused(advertise(config(), replace(DEFAULT, peers=table))[1], "a peers table but no [secure-aggregation] "
            "signing-key")
    _, reply = advertise(config(signed=True), replace(DEFAULT, signing_key=keys[0]))  # signs, verifies nobody
    assert reply[SECAGG_MSG]["signature"]


def test_a_roster_client_outside_the_peers_table_is_refused(node_keys):
    refused(advertise(config(roster=(0, 1, 2, 9)), keyed(node_keys, 0))[1], "node policy refuses roster = [9]",
            "peers table")


def test_a_node_with_keys_signs_even_when_the_server_does_not_ask(node_keys):
    _, reply = advertise(config(), keyed(node_keys, 0))
    assert reply[SECAGG_MSG]["signature"]


# --------------------------------------------------------------------------- the protocol end to end


def _steps(settings: SecAggSettings, n: int = N):
    result = yield from secure_sum_steps(settings, np.arange(n), Message_({}), instance=0, dim=D)
    return Outcome(info={"result": result})


Tamper = Callable[[str, int, Message_], Message_]


def transport(policies: Mapping[int, NodePolicy], tamper: Tamper | None = None) -> Callable[[list[Request]], list[Reply]]:
    """Every client behind its own middleware under its own policy; ``tamper(stage, client, message)`` is an active
    server rewriting what it sends."""
    handlers = {c: chain([SecAggMiddleware(policy=p)], lambda r, node: input_message(X[node.client]))
                for c, p in policies.items()}
    nodes = {c: Node(client=c, data=None, randomness=KeyedRandomness(3)) for c in policies}

    def exchange(requests: list[Request]) -> list[Reply]:
        out = []
        for r in requests:
            c = int(r.client)
            message = tamper(r.message[SECAGG][STAGE], c, r.message) if tamper else r.message
            out.append(call(handlers[c], Request(client=c, kind=r.kind, message=message), nodes[c]))
        return out

    return exchange


def run(settings: SecAggSettings, policies: Mapping[int, NodePolicy], tamper: Tamper | None = None) -> Any:
    return drive(_steps(settings), transport(policies, tamper), lambda c: {}).info["result"]


def unsigned_total() -> np.ndarray:
    return ProtocolAggregator(omega=0.3, codec=CODEC, seed=3).aggregate(X, np.arange(N), dropout=DropoutModel(),
                                                                          instance=0).total


def test_the_signed_protocol_completes_in_simulation_with_the_same_bits():
    settings = SecAggSettings(mode="protocol", omega=0.3, codec=CODEC, seed=3, signed=True)
    got = run(settings, dict.fromkeys(range(N), SIMULATION))
    assert not got.halted and set(got.present) == {"advertise", "share", "upload", "consistency", "unmask"}
    np.testing.assert_array_equal(got.total, unsigned_total())  # signatures change no released bit
    plain = run(replace(settings, signed=False), dict.fromkeys(range(N), SIMULATION))
    assert set(plain.present) == {"advertise", "share", "upload", "unmask"}
    np.testing.assert_array_equal(plain.total, got.total)


def test_nodes_with_keys_make_the_server_run_the_consistency_check(node_keys):
    settings = SecAggSettings(mode="protocol", omega=0.3, codec=CODEC, seed=3)  # the server asks nothing
    got = run(settings, {c: keyed(node_keys, c) for c in range(N)})
    assert not got.halted and got.rejected == {} and "consistency" in got.present
    np.testing.assert_array_equal(got.total, unsigned_total())


def _roster_of(message: Message_) -> RosterMsg:
    return RosterMsg.from_dict(fields_of(message))


def test_a_key_substituted_by_the_server_is_refused_by_the_node_it_was_sent_to(node_keys):
    stranger = generate_node_keys(Path(node_keys[1]).parent / "stranger", 1)[0][0]
    from fedpriv.secagg import crypto
    from fedpriv.secagg.signing import keys_payload, load_signing_key

    fake = (crypto.generate_keypair()[1], crypto.generate_keypair()[1])
    digest = config().digest()

    def substitute(stage: str, client: int, message: Message_) -> Message_:
        if stage != "share" or client != 0:
            return message
        roster = _roster_of(message)
        forged = load_signing_key(stranger).sign(keys_payload(digest, 0, 3, *fake))  # not client 3's key
        tampered = RosterMsg(roster.instance, {**roster.keys, 3: fake}, {**roster.signatures, 3: forged})
        return Message_({**message.records, **to_records(tampered.to_dict())})

    settings = SecAggSettings(mode="protocol", omega=0.3, codec=CODEC, seed=3)
    got = run(settings, {c: keyed(node_keys, c) for c in range(N)}, substitute)
    assert "advertised keys of client 3" in got.rejected[0] and "do not verify" in got.rejected[0]
    assert "SignatureError" in got.rejected[0]


def test_different_survivor_sets_sent_to_different_nodes_are_caught_before_any_share_leaves(node_keys):
    """The server tells nodes 3 and 4 that node 5 dropped (to get 5's mask key from them) and the rest that it uploaded
    (to get 5's self-mask seed): the signatures over the two sets do not agree, and no node unmasks."""
    def equivocate(stage: str, client: int, message: Message_) -> Message_:
        if client not in (3, 4) or stage not in ("consistency", "unmask"):
            return message
        if stage == "consistency":
            return Message_({**message.records, **to_records(ConsistencyRequest(0, (0, 1, 2, 3, 4)).to_dict())})
        request = UnmaskRequest.from_dict(fields_of(message))  # the unmask list that matches what 3 and 4 signed
        return Message_({**message.records, **to_records(replace(request, uploaders=(0, 1, 2, 3, 4),
                                                                  dropped=(5,)).to_dict())})

    settings = SecAggSettings(mode="protocol", omega=0.3, codec=CODEC, seed=3)
    got = run(settings, {c: keyed(node_keys, c) for c in range(N)}, equivocate)
    assert got.halted and got.total is None and got.halted_at == "unmask"
    for c in range(N):  # 3 and 4 also see a signature from client 5, outside the set they signed
        assert "SignatureError" in got.rejected[c], got.rejected[c]
        assert ("do not verify over the survivor set" if c not in (3, 4) else "must come from survivors, got clients "
                "[5]") in got.rejected[c]


def test_an_unmask_request_without_the_consistency_check_gets_no_share(node_keys):
    """A server that skips the consistency check (sends each node an unsigned unmask request) gets nothing."""
    def skip(stage: str, client: int, message: Message_) -> Message_:
        if stage != "consistency":
            return message
        head = Config({**message[SECAGG], STAGE: "unmask"})
        return Message_({SECAGG: head, SECAGG_MSG: Config({"instance": 0, "uploaders": list(range(N)),
                                                              "dropped": []})})

    settings = SecAggSettings(mode="protocol", omega=0.3, codec=CODEC, seed=3)
    got = run(settings, {c: keyed(node_keys, c) for c in range(N)}, skip)
    assert got.halted and all("only after the consistency check" in got.rejected[c] for c in range(N))
