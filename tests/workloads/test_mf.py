"""The mf workload's pieces: party and device handlers (refusals), the devices' batch handler (same bits), a lost
party stops the run with its rounds kept, a failed device is left out while secure aggregation stays above t."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.workloads import Node, Refusal, Request, get_workload
from fedpriv.workloads.driver import InProcess, call, run_workload
from fedpriv.workloads.mf.contract import ARRAYS, CONFIG, SHARED, request
from fedpriv.workloads.protocol import Broadcast, stack_replies

SYNTHETIC = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "mf_synthetic.toml"
TINY = {"mf-synthetic-users": 30, "mf-synthetic-items": 20, "mf-synthetic-density": 0.4, "mf-rounds": 2,
        "mf-local-steps": 2, "mf-pretrain-steps": 5, "mf-local-finetune-steps": 3}
MF = get_workload("mf")


def _setup(**values: object):
    return MF.setup(RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values}))


def _party(setup, k: int = 0) -> Node:
    return Node(client=k, data=MF.load_client(setup, k, {"partition-id": k}))


def _train(setup, op: str, shared: np.ndarray, **fields: object) -> Request:
    return Request(client=0, kind="train", message=request(op, setup.digest, shared, **fields))


def _u0(setup) -> np.ndarray:
    from fedpriv.mf.fmf import init_shared

    return init_shared(setup.cfg, setup.split.train.n_users, float(setup.split.train.r_max), setup.seed)


def test_a_party_answers_its_rounds_once_and_in_order() -> None:
    setup = _setup()
    handle, node, U = MF.handler(setup), _party(setup), _u0(setup)
    with pytest.raises(Refusal, match="expected setup before 'train'"):
        handle(_train(setup, "train", U, round=1), node)
    handle(_train(setup, "setup", U), node)
    with pytest.raises(Refusal, match="expected setup once per run"):
        handle(_train(setup, "setup", U), node)
    with pytest.raises(Refusal, match="expected round 1 of 2"):
        handle(_train(setup, "train", U, round=2), node)
    first = handle(_train(setup, "train", U, round=1), node)[ARRAYS][SHARED]
    with pytest.raises(Refusal, match="expected round 2 of 2 .*got round 1"):  # a replayed round: a second release
        handle(_train(setup, "train", U, round=1), node)
    with pytest.raises(Refusal, match="expected fine-tuning after round 2, got it after round 1"):
        handle(_train(setup, "finetune", U), node)
    handle(_train(setup, "train", U, round=2), node)
    handle(_train(setup, "finetune", U), node)
    with pytest.raises(Refusal, match="nothing after fine-tuning"):
        handle(_train(setup, "train", U, round=3), node)
    # the same requests to a fresh node (state rebuilt from node.state, no live party) give the same bits
    again = Node(client=0, data=node.data)
    handle(_train(setup, "setup", U), again)
    assert np.array_equal(handle(_train(setup, "train", U, round=1), again)[ARRAYS][SHARED], first)


@pytest.mark.parametrize("change, match", [
    (lambda s, U: request("setup", "0" * 16, U), "expected config-digest"),
    (lambda s, U: request("setup", s.digest, U[:-1]), r"expected a float array 'shared' of shape"),
    (lambda s, U: request("setup", s.digest, np.where(np.arange(U.size).reshape(U.shape) == 3, np.nan, U)),
     "expected finite values"),
    (lambda s, U: request("setup", s.digest, U + 10.0), "in C_R"),
    (lambda s, U: request("setup", s.digest), "holding 'shared'"),
    (lambda s, U: request("evaluate", s.digest, U, which="test"), "expected op in"),
])
def test_a_party_refuses_foreign_configs_and_bad_shared_embeddings(change, match: str) -> None:
    setup = _setup()
    node = _party(setup)
    with pytest.raises(Refusal, match=match):
        MF.handler(setup)(Request(client=0, kind="train", message=change(setup, _u0(setup))), node)
    assert node.state == {}  # a refused request leaves the state untouched


def _devices(**values: object):
    setup = _setup(**{"mf-setting": "lfl", **values})
    from fedpriv.mf.lfl import LflServer, lfl_plan

    plan = lfl_plan(setup.cfg, num_devices=setup.roster.size, n_items=setup.split.train.n_items,
                    R=float(setup.split.train.r_max))
    return setup, LflServer(setup.cfg, plan, setup.seed).V


def test_the_devices_batch_handler_gives_each_devices_bits() -> None:
    setup, V = _devices()
    ids = setup.roster
    batch = MF.batch_handler(setup, "fast", MF.load_clients(setup), {})
    handle = MF.handler(setup)
    nodes = {int(c): Node(client=int(c), data=MF.load_client(setup, int(c), {"partition-id": int(c)})) for c in ids}

    def both(kind: str, message) -> tuple:
        step = Broadcast(clients=ids, kind=kind, message=message)
        per = stack_replies([call(handle, r, nodes[r.client]) for r in step.requests()])
        return batch(step), per

    for kind, message in [("train", request("pretrain", setup.digest, V)),
                          ("evaluate", request("evaluate", setup.digest, V, which="test")),
                          ("train", request("report", setup.digest, V, iteration=0, round=1, **{"num-devices": ids.size})),
                          ("train", request("report", setup.digest, iteration=0, round=2, n1=ids.size)),
                          ("train", request("finetune", setup.digest, V)),
                          ("evaluate", request("evaluate", setup.digest, V, which="train"))]:
        got, per = both(kind, message)
        assert not per.left_out and np.array_equal(got.clients, per.clients)
        for name, record in got.records.items():
            for key, value in record.items():
                assert np.array_equal(value, per.records[name][key]), (message[CONFIG]["op"], key)


def test_a_device_refuses_a_foreign_roster_size_and_a_replayed_report() -> None:
    setup, V = _devices()
    handle, node = MF.handler(setup), Node(client=0, data=MF.load_client(setup, 0, {"partition-id": 0}))
    handle(Request(client=0, kind="train", message=request("pretrain", setup.digest, V)), node)
    n = int(setup.roster.size)
    with pytest.raises(Refusal, match="num-devices"):  # a larger n would shrink every noise share
        handle(Request(client=0, kind="train", message=request("report", setup.digest, V, iteration=0, round=1,
                                                                **{"num-devices": n + 1})), node)
    handle(Request(client=0, kind="train", message=request("report", setup.digest, V, iteration=0, round=1,
                                                            **{"num-devices": n})), node)
    with pytest.raises(Refusal, match="an iteration above 0"):
        handle(Request(client=0, kind="train", message=request("report", setup.digest, V, iteration=0, round=1,
                                                                **{"num-devices": n})), node)
    with pytest.raises(Refusal, match="valid round-2 request|n1"):
        handle(Request(client=0, kind="train", message=request("report", setup.digest, iteration=0, round=2,
                                                                n1=1)), node)


def test_a_deployed_node_keys_its_randomness_by_its_own_secret_unless_keyed_noise() -> None:
    setup, V = _devices()
    assert MF.deployment_node_config(setup, 3, keyed_noise=True) == {"partition-id": 3,
                                                                      "num-partitions": int(setup.roster.size)}
    assert MF.deployment_node_config(setup, 3, keyed_noise=False)["noise-seed"] == "secret"
    with pytest.raises(ValueError, match="node config noise-seed must be 'run' or 'secret', got 'server'"):
        MF.load_client(setup, 0, {"partition-id": 0, "noise-seed": "server"})
    from fedpriv.mf.lfl import lfl_plan, round1_uploads, round2_uploads
    from fedpriv.mf.lfl_device import item_gradient_signals

    plan = lfl_plan(setup.cfg, num_devices=setup.roster.size, n_items=setup.split.train.n_items,
                    R=float(setup.split.train.r_max))
    handle, n, i = MF.handler(setup), int(setup.roster.size), np.array([0])
    keyed, secret = (Node(client=0, data=MF.load_client(setup, 0, {"partition-id": 0, "noise-seed": choice}))
                     for choice in ("run", "secret"))
    uploads = {}
    for node in (keyed, secret):
        handle(Request(client=0, kind="train", message=request("pretrain", setup.digest, V)), node)
        one = handle(Request(client=0, kind="train", message=request("report", setup.digest, V, iteration=0, round=1,
                                                                      **{"num-devices": n})), node)
        two = handle(Request(client=0, kind="train", message=request("report", setup.digest, iteration=0, round=2,
                                                                      n1=n)), node)
        uploads[id(node)] = (one["secagg-input"]["vector"], two["secagg-input"]["vector"])
    assert "secret-seed" not in keyed.state
    own = secret.state["secret-seed"]
    assert own != setup.seed and 0 <= own < 2**63
    # the secret keys u⁰, the signal and both rounds' noise shares: round 2 cancels the ξ_i of round 1 (§6.4)
    from fedpriv.mf.lfl import pretrain_users

    u = pretrain_users(V, secret.data.train, i, setup.cfg, own)
    assert np.array_equal(secret.state["u"], u[0])
    signal = item_gradient_signals(u, V, secret.data.train, i, seed=own, iteration=0)
    assert np.array_equal(uploads[id(secret)][0], round1_uploads(plan, signal, i, seed=own, iteration=0)[0])
    assert np.array_equal(uploads[id(secret)][1], round2_uploads(plan, i, n, seed=own, iteration=0)[0])
    assert not np.array_equal(uploads[id(secret)][0], uploads[id(keyed)][0])


def test_a_party_with_a_secret_seed_keeps_it_across_requests() -> None:
    setup = _setup()
    U = _u0(setup)
    handle = MF.handler(setup)
    node = Node(client=0, data=MF.load_client(setup, 0, {"partition-id": 0, "noise-seed": "secret"}))
    handle(_train(setup, "setup", U), node)
    own = node.state["secret-seed"]
    first = handle(_train(setup, "train", U, round=1), node)[ARRAYS][SHARED]
    assert node.state["secret-seed"] == own
    # the same party keyed by its secret (built afresh from the node's state) gives the same copy
    from fedpriv.workloads.mf.client import make_party

    party = make_party(setup, node.data, own)
    party.setup(U)
    assert np.array_equal(party.train_round(U, 1), first)
    keyed = _party(setup)
    handle(_train(setup, "setup", U), keyed)
    assert not np.array_equal(handle(_train(setup, "train", U, round=1), keyed)[ARRAYS][SHARED], first)


def test_a_lost_party_stops_the_run_with_its_finished_rounds_kept() -> None:
    setup = _setup(**{"mf-rounds": 3})
    transport = InProcess(MF, setup, "fast")
    real = transport.handler

    def lose_party_1_in_round_2(req: Request, node: Node):
        if req.client == 1 and req.message[CONFIG].get("round") == 2:
            raise ConnectionError("node lost")
        return real(req, node)

    transport.handler = lose_party_1_in_round_2
    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, "mf-rounds": 3})
    from fedpriv.rundir import Committed

    out = run_workload(MF, setup, config, transport, None, Committed(), engine="fast", broadcast=transport.broadcast)
    assert out.summary["status"] == "failed" and [r["round"] for r in out.records] == [1]
    assert "party 1 did not answer the round 2 (Stage 2) step" in out.summary["error"]
    assert "node lost" in out.summary["error"]


@pytest.mark.parametrize("secagg", ["oracle", "protocol"])
def test_a_failed_device_is_left_out_and_the_rounds_go_on_above_the_threshold(secagg: str) -> None:
    values = {"mf-setting": "lfl", "secagg": secagg, "mf-synthetic-users": 12, "mf-synthetic-items": 8,
              "mf-synthetic-density": 0.5}
    setup = _setup(**values)
    transport = InProcess(MF, setup, "fast")
    real = transport.handler

    def device_3_dies_after_pretrain(req: Request, node: Node):
        if req.client == 3 and req.message.get(CONFIG, {}).get("op") != "pretrain":
            raise ConnectionError("node lost")
        return real(req, node)

    transport.handler = device_3_dies_after_pretrain
    transport.batch = None  # every device through its handler
    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values})
    from fedpriv.rundir import Committed

    out = run_workload(MF, setup, config, transport, None, Committed(), engine="fast", broadcast=transport.broadcast)
    assert out.summary["status"] == "finished", out.summary["error"]
    assert [(r["n1"], r["halted"]) for r in out.records] == [(11, False), (11, False)]
    assert list(out.summary["info"]["lost_devices"]) == [3]
