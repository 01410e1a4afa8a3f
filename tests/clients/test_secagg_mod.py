"""SecAggMod with in-memory Messages: pass-through, each stage against the real SecAggServer, errors as Error replies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from clients.secagg_mod import (
    INPUT,
    SECAGG,
    SECAGG_ARRAYS,
    SECAGG_MSG,
    SecAggMod,
    from_records,
    input_record,
    to_records,
)
from fedpriv.node.policy import NodePolicy
from fedpriv.rng import stream
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import MaskingGraph
from fedpriv.secagg.protocol import (
    KeysMsg,
    MaskedMsg,
    ProtocolConfig,
    SecAggServer,
    SharesMsg,
    UnmaskMsg,
)
from tests.strategies._flower import context

N, D, T, SEED = 4, 6, 3, 11
#: A node inside a simulation (the oracle stage needs its switch ``secagg-oracle``).
SIMULATION = NodePolicy.simulation()
CODEC = FixedPointCodec.for_clients(4.0, N)
X = np.linspace(-1.5, 1.5, N * D).reshape(N, D)  # client c's vector is row c


def make_app(reply: Callable[[int], RecordDict] | None = None, policy: NodePolicy | None = None) -> ClientApp:
    """A ClientApp with SecAggMod (under ``policy``; None: the node's own, here the default policy) whose train
    handler replies row ``partition-id`` of X (or ``reply(pid)``)."""
    app = ClientApp(mods=[SecAggMod(policy=policy)])

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        content = reply(pid) if reply is not None else RecordDict({INPUT: input_record(X[pid])})
        return Message(content, reply_to=msg)

    return app


def config(instance: int = 0, roster: tuple[int, ...] = tuple(range(N)), graph: MaskingGraph | None = None,
           threshold: int = T) -> ProtocolConfig:
    return ProtocolConfig(instance=instance, roster=roster, threshold=threshold, dim=D, codec=CODEC, graph=graph)


def stage_message(stage: str, instance: int, fields: dict[str, Any] | None, extra: dict[str, Any] | None = None,
                  dst: int = 1) -> Message:
    """A server → client message of ``stage`` carrying a protocol message's fields (as SecAggWorkflow sends)."""
    records: dict[str, Any] = {SECAGG: ConfigRecord({"stage": stage, "instance": instance, "seed": SEED, "dim": D})}
    if fields is not None:
        records.update(to_records(fields))
    records.update(extra or {})
    return Message(RecordDict(records), dst, MessageType.TRAIN)


def reply_fields(reply: Message) -> dict[str, Any]:
    assert not reply.has_error(), reply.error.reason
    return from_records(reply.content)


class Run:
    """One instance driven stage by stage: N client contexts, the real server, the replies so far."""

    def __init__(self, app: ClientApp, instance: int = 0, cfg: ProtocolConfig | None = None) -> None:
        self.app, self.instance = app, instance
        self.cfg = cfg or config(instance)
        self.server = SecAggServer(self.cfg)
        self.ids = self.cfg.roster
        self.ctx = {c: context(c, len(self.ids), node_id=100 + c) for c in self.ids}

    def send(self, stage: str, c: int, fields: dict[str, Any] | None, **kw: Any) -> Message:
        return self.app(stage_message(stage, self.instance, fields, **kw), self.ctx[c])

    def advertise(self) -> Any:
        keys = [KeysMsg.from_dict(reply_fields(self.send("advertise", c, self.cfg.to_dict()))) for c in self.ids]
        return self.server.receive_keys(keys)

    def share(self) -> dict[int, Any]:
        rosters = self.advertise()
        shares = [SharesMsg.from_dict(reply_fields(self.send("share", c, rosters[c].to_dict()))) for c in self.ids]
        return self.server.receive_shares(shares)

    def upload(self) -> tuple[Any, list[Message]]:
        inboxes = self.share()
        replies = [self.send("upload", c, inboxes[c].to_dict()) for c in self.ids]
        return self.server.receive_masked([MaskedMsg.from_dict(reply_fields(r)) for r in replies]), replies


def assert_error(reply: Message, *needles: str) -> None:
    assert reply.has_error()
    assert reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "SecAggMod" in reply.error.reason
    for needle in needles:
        assert needle in reply.error.reason, reply.error.reason


# --------------------------------------------------------------------------- pass-through


def test_messages_without_a_secagg_record_pass_through_untouched():
    seen: list[Message] = []
    app = ClientApp(mods=[SecAggMod()])

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        seen.append(msg)
        return Message(RecordDict({"metrics": MetricRecord({"x": 1.0})}), reply_to=msg)

    msg = Message(RecordDict({"config": ConfigRecord({"a": 1})}), 1, MessageType.TRAIN)
    reply = app(msg, context(0, N))
    assert seen == [msg]
    assert not reply.has_error() and reply.content["metrics"]["x"] == 1.0


# --------------------------------------------------------------------------- the stages


@pytest.mark.parametrize("graph", ["complete", "harary"])
def test_a_whole_instance_through_the_mod_gives_the_sum_and_forgets_its_secrets(graph: str):
    # the Harary config (4 clients, degree 2, t = 2) travels in the advertise message and back out of each
    # node's state at every later stage
    cfg = config(graph=MaskingGraph("harary", 2, 2, seed=4)) if graph == "harary" else None
    run = Run(make_app(), cfg=cfg)
    requests, uploads = run.upload()
    replies = [UnmaskMsg.from_dict(reply_fields(run.send("unmask", c, requests[c].to_dict()))) for c in range(N)]
    total = run.server.receive_unmask(replies)
    assert np.all(np.abs(total - X.sum(axis=0)) <= N * CODEC.step)
    if graph == "harary":
        assert all(len(requests[c].uploaders) == 3 for c in range(N))  # itself and its two neighbours
    for ctx in run.ctx.values():  # the instance's state is gone, the history stays
        assert set(ctx.state.keys()) == {"secagg-history"}
    # the masked upload equals what the protocol computes from the rounding stream of (seed, instance, client)
    for reply in uploads:
        assert reply.content[SECAGG]["stage"] == "upload"
        masked = reply.content[SECAGG_ARRAYS]["masked"].numpy()
        assert masked.dtype == np.uint64 and masked.shape == (D,)


def test_the_clear_vector_never_appears_in_an_upload_reply():
    run = Run(make_app())
    _, uploads = run.upload()
    for c, reply in enumerate(uploads):
        assert INPUT not in reply.content
        assert set(reply.content.keys()) == {SECAGG, SECAGG_MSG, SECAGG_ARRAYS}
        blobs = [a.numpy().tobytes() for rec in reply.content.array_records.values() for a in rec.values()]
        blobs += [repr(dict(rec.items())).encode() for rec in reply.content.config_records.values()]
        enc = CODEC.encode(X[c], stream(SEED, 0, c, "secagg-rounding"))
        for needle in (X[c].tobytes(), X[c].astype(np.float32).tobytes(), enc.tobytes()):
            assert not any(needle in b for b in blobs)


def test_the_oracle_stage_replies_the_clear_vector_only_where_the_policy_allows_it():
    reply = make_app(policy=SIMULATION)(stage_message("oracle", 5, None), context(2, N))
    assert not reply.has_error()
    np.testing.assert_array_equal(reply.content[INPUT]["vector"].numpy(), X[2])
    for app in (make_app(), make_app(policy=NodePolicy.default())):  # the node's own policy: the default one
        refused = app(stage_message("oracle", 5, None), context(2, N))
        assert_error(refused, "node policy refuses secagg = 'oracle'", "'secagg-oracle'", "off on this node")
        assert not refused.has_content()  # an Error reply: no vector


def test_the_upload_stage_attaches_the_request_for_the_application():
    got: list[int] = []

    def reply(pid: int) -> RecordDict:
        return RecordDict({INPUT: input_record(X[pid])})

    app = ClientApp(mods=[SecAggMod()])

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        got.append(int(msg.content["config"]["iteration"]))
        return Message(reply(int(ctx.node_config["partition-id"])), reply_to=msg)

    run = Run(app)
    inboxes = run.share()
    r = run.send("upload", 0, inboxes[0].to_dict(), extra={"config": ConfigRecord({"iteration": 7})})
    assert not r.has_error() and got == [7]


# --------------------------------------------------------------------------- errors become Error replies


def test_unknown_stage_and_missing_state():
    app = make_app()
    assert_error(app(stage_message("bogus", 0, None), context(0, N)), "'bogus'")
    assert_error(app(stage_message("share", 0, {"instance": 0}), context(0, N)), "no secure-aggregation state",
                 "'advertise'")


def test_out_of_order_wrong_instance_and_foreign_state():
    run = Run(make_app())
    roster = run.advertise()[0]
    inboxes_fields = {"instance": 0, "ciphertexts-ids": [], "ciphertexts": []}
    assert_error(run.send("upload", 0, inboxes_fields), "out of order")  # upload right after advertise
    other = stage_message("share", 1, roster.to_dict())
    assert_error(run.app(other, run.ctx[0]), "instance 1", "instance this node is in (0)")
    stolen = context(1, N)  # node of client 1 with client 0's state
    for key in list(run.ctx[0].state):
        stolen.state[key] = run.ctx[0].state[key]
    assert_error(run.app(stage_message("share", 0, roster.to_dict()), stolen), "foreign state")
    # the refused messages left client 0's session intact
    assert not run.send("share", 0, roster.to_dict()).has_error()


def test_a_replayed_instance_is_refused():
    run = Run(make_app())
    run.advertise()
    again = run.send("advertise", 0, run.cfg.to_dict())
    assert_error(again, "instance 0 again", "replay")
    older = Message(RecordDict({SECAGG: ConfigRecord({"stage": "advertise", "instance": 0}),
                                **to_records(config(0).to_dict())}), 1, MessageType.TRAIN)
    assert_error(run.app(older, run.ctx[1]), "replay")


def test_advertise_refuses_a_roster_without_this_client_and_a_malformed_config():
    app = make_app()
    cfg = config(0, roster=(0, 1, 2))
    assert_error(app(stage_message("advertise", 0, cfg.to_dict()), context(3, N)), "client id 3 in the roster")
    bad = {k: v for k, v in config(0).to_dict().items() if k != "levels"}
    assert_error(app(stage_message("advertise", 0, bad), context(0, N)), "ProtocolViolation", "'levels'")
    assert_error(app(stage_message("advertise", 0, None), context(0, N)), "'secagg-msg'")
    assert_error(app(stage_message("advertise", 3, config(0).to_dict()), context(0, N)), "instance 3")


def test_the_node_needs_a_partition_id():
    app = make_app()
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    assert_error(app(stage_message("advertise", 0, config(0).to_dict()), ctx), "partition-id")


@pytest.mark.parametrize("reply, match", [
    (lambda pid: RecordDict({"metrics": MetricRecord({"x": 1.0})}), "ArrayRecord 'secagg-input'"),
    (lambda pid: RecordDict({INPUT: ArrayRecord({"vector": Array(X[pid]), "extra": Array(X[pid])})}), "one array 'vector'"),
    (lambda pid: RecordDict({INPUT: input_record(X[pid][:-1])}), f"length dim={D}"),
    (lambda pid: RecordDict({INPUT: ArrayRecord({"vector": Array(np.arange(D))})}), "float array"),
    (lambda pid: RecordDict({INPUT: input_record(np.full(D, np.nan))}), "finite"),
])
def test_a_malformed_application_reply_is_refused_without_echoing_it(reply, match):
    run = Run(make_app(reply))
    inboxes = run.share()
    r = run.send("upload", 0, inboxes[0].to_dict())
    assert_error(r, match)
    oracle = make_app(reply, policy=SIMULATION)(stage_message("oracle", 9, None), context(0, N))
    assert_error(oracle, match)


def test_an_application_error_reply_is_passed_on_and_nothing_is_uploaded():
    app = ClientApp(mods=[SecAggMod()])

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="local failure"), reply_to=msg)

    run = Run(app)
    inboxes = run.share()
    reply = run.send("upload", 0, inboxes[0].to_dict())
    assert reply.has_error() and reply.error.reason == "local failure"
    assert run.ctx[0].state["secagg-session"]["stage"] == "share"  # nothing was uploaded


def test_protocol_errors_become_error_replies_with_their_message():
    run = Run(make_app())
    inboxes = run.share()
    fields = inboxes[0].to_dict()
    fields["ciphertexts"] = [c[:-1] + bytes([c[-1] ^ 1]) for c in fields["ciphertexts"]]  # tampered relay
    assert_error(run.send("upload", 0, fields), "ShareAuthenticationError")
    big = ClientApp(mods=[SecAggMod()])

    @big.train()
    def train(msg: Message, ctx: Context) -> Message:
        return Message(RecordDict({INPUT: input_record(np.full(D, 100.0))}), reply_to=msg)

    run2 = Run(big)
    inboxes2 = run2.share()
    assert_error(run2.send("upload", 1, inboxes2[1].to_dict()), "EncodingOverflowError", "clip_range")
