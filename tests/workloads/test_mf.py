"""The mf workload's pieces: party and device handlers (refusals), the devices' batch handler (same bits), a lost
party stops the run with its rounds kept, a failed device is left out while secure aggregation stays above t."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, MessageType, RecordDict
from flwr.app import Message as FlowerMessage

from clients.records import to_recorddict
from fedpriv.config import RunConfig
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, Randomness, SecretRandomness
from fedpriv.workloads import Node, Refusal, Request, get_workload
from fedpriv.workloads.driver import InProcess, call, run_workload
from fedpriv.workloads.mf.contract import ARRAYS, CONFIG, SHARED, request
from fedpriv.workloads.protocol import Broadcast, stack_replies
from tests.strategies._flower import set_task_identity

SYNTHETIC = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "mf_synthetic.toml"
TINY = {"mf-synthetic-users": 30, "mf-synthetic-items": 20, "mf-synthetic-density": 0.4, "mf-rounds": 2,
        "mf-local-steps": 2, "mf-pretrain-steps": 5, "mf-local-finetune-steps": 3}
MF = get_workload("mf")


def _setup(**values: object):
    return MF.setup(RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values}))


def _node(setup, k: int = 0, randomness: Randomness | None = None, state: dict | None = None) -> Node:
    """Client ``k``'s node: keyed by the run seed (a simulation) unless ``randomness`` is given."""
    return Node(client=k, data=MF.load_client(setup, k, {"partition-id": k}), state=dict(state or {}),
                randomness=randomness or KeyedRandomness(setup.seed))


def _party(setup, k: int = 0) -> Node:
    return _node(setup, k)


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
    again = Node(client=0, data=node.data, randomness=KeyedRandomness(setup.seed))
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
    nodes = {int(c): _node(setup, int(c)) for c in ids}

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
    handle, node = MF.handler(setup), _node(setup)
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


def _device_run(setup, V, fresh) -> tuple[Node, list[np.ndarray]]:
    """Device 0's pretrain and iteration 0's two reports, each message with the randomness ``fresh()`` (a deployed
    node runs a fresh process per message) and the state the last one left (context.state)."""
    handle, n, state, uploads = MF.handler(setup), int(setup.roster.size), {}, []
    node = None
    for message in (request("pretrain", setup.digest, V),
                    request("report", setup.digest, V, iteration=0, round=1, **{"num-devices": n}),
                    request("report", setup.digest, iteration=0, round=2, n1=n)):
        node = _node(setup, 0, fresh(), state)
        reply = handle(Request(client=0, kind="train", message=message), node)
        if "secagg-input" in reply:
            uploads.append(reply["secagg-input"]["vector"])
        state = node.state
    return node, uploads


def test_a_deployed_device_draws_from_its_node_secret_kept_for_the_run() -> None:
    """A secret randomness per message: the first one's secret is kept in the node's state and keys u⁰, the pick and
    both rounds' noise shares, so round 2 cancels round 1's ξ_i (§6.4); keyed, the run seed's bits."""
    setup, V = _devices()
    from fedpriv.mf.lfl import lfl_plan, pretrain_users, round1_uploads, round2_uploads
    from fedpriv.mf.lfl_device import item_gradient_signals
    from fedpriv.workloads.mf.client import NOISE_SECRET

    plan = lfl_plan(setup.cfg, num_devices=setup.roster.size, n_items=setup.split.train.n_items,
                    R=float(setup.split.train.r_max))
    n, i = int(setup.roster.size), np.array([0])
    keyed, keyed_uploads = _device_run(setup, V, lambda: KeyedRandomness(setup.seed))
    assert NOISE_SECRET not in keyed.state
    u = pretrain_users(V, keyed.data.train, i, setup.cfg, setup.seed)
    signal = item_gradient_signals(u, V, keyed.data.train, i, seed=setup.seed, iteration=0)
    np.testing.assert_array_equal(keyed_uploads[0], round1_uploads(plan, signal, i, seed=setup.seed, iteration=0)[0])
    np.testing.assert_array_equal(keyed_uploads[1], round2_uploads(plan, i, n, seed=setup.seed, iteration=0)[0])
    secret, uploads = _device_run(setup, V, SecretRandomness)
    own = SecretRandomness(secret.state[NOISE_SECRET])
    u = pretrain_users(V, secret.data.train, i, setup.cfg, own)
    assert np.array_equal(secret.state["u"], u[0])
    signal = item_gradient_signals(u, V, secret.data.train, i, seed=own, iteration=0)
    np.testing.assert_array_equal(uploads[0], round1_uploads(plan, signal, i, seed=own, iteration=0)[0])
    np.testing.assert_array_equal(uploads[1], round2_uploads(plan, i, n, seed=own, iteration=0)[0])
    assert not np.array_equal(uploads[0], keyed_uploads[0])
    _, others = _device_run(setup, V, SecretRandomness)  # another node: another secret
    assert not np.array_equal(others[0], uploads[0])


def test_a_deployed_party_keeps_its_secret_across_requests() -> None:
    setup = _setup(**{"mf-notion": "per-user"})  # trimming: drawn from the secret at every message's rebuild
    U = _u0(setup)
    handle = MF.handler(setup)
    from fedpriv.workloads.mf.client import NOISE_SECRET, make_party

    state: dict = {}
    copies = []
    for message in (_train(setup, "setup", U), _train(setup, "train", U, round=1), _train(setup, "train", U, round=2)):
        node = _node(setup, 0, SecretRandomness(), state)  # a fresh process and secret per message
        reply = handle(message, node)
        if ARRAYS in reply:
            copies.append(reply[ARRAYS][SHARED])
        state = node.state
    secret = state[NOISE_SECRET]
    # the same party built afresh from the kept secret gives the same copies
    party = make_party(setup, node.data, SecretRandomness(secret))
    party.setup(U)
    np.testing.assert_array_equal(party.train_round(U, 1), copies[0])
    np.testing.assert_array_equal(party.train_round(U, 2), copies[1])
    keyed = _party(setup)
    handle(_train(setup, "setup", U), keyed)
    assert not np.array_equal(handle(_train(setup, "train", U, round=1), keyed)[ARRAYS][SHARED], copies[0])


def test_a_refused_request_keeps_no_secret() -> None:
    setup = _setup()
    node = _node(setup, 0, SecretRandomness())
    with pytest.raises(Refusal):
        MF.handler(setup)(Request(client=0, kind="train", message=request("setup", "0" * 16, _u0(setup))), node)
    assert node.state == {}


def test_a_device_answers_only_the_iterations_its_noise_is_calibrated_for() -> None:
    setup, V = _devices()
    handle, node, n = MF.handler(setup), _node(setup), int(setup.roster.size)
    handle(Request(client=0, kind="train", message=request("pretrain", setup.digest, V)), node)
    with pytest.raises(Refusal, match="an 'iteration' in 0..1 .*got 2"):
        handle(Request(client=0, kind="train", message=request("report", setup.digest, V, iteration=2, round=1,
                                                                **{"num-devices": n})), node)


def test_with_the_protocol_a_device_reports_only_through_the_masked_upload() -> None:
    setup, V = _devices(secagg="protocol")
    handle, node, n = MF.handler(setup), _node(setup), int(setup.roster.size)
    handle(Request(client=0, kind="train", message=request("pretrain", setup.digest, V)), node)
    report = request("report", setup.digest, V, iteration=0, round=1, **{"num-devices": n})
    with pytest.raises(Refusal, match="through secure aggregation's 'upload' stage .*got no 'secagg' record"):
        handle(Request(client=0, kind="train", message=report), node)
    from fedpriv.workloads.messages import Config, Message

    oracle = Message({**report.records, "secagg": Config({"stage": "oracle", "instance": 0})})
    with pytest.raises(Refusal, match="got stage 'oracle'"):
        handle(Request(client=0, kind="train", message=oracle), node)
    assert "round1" not in node.state


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


# --------------------------------------------------------------------------- a deployed node: terms, releases, ledger

#: What a node under the default policy can serve: no evaluation channel (its errors go out without noise).
QUIET = {"mf-evaluate": "off"}


def _terms(**values: object):
    return MF.deployment.node_terms(RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values}))


@pytest.mark.parametrize("setting", ["vfl", "hfl", "lfl"])
def test_a_private_run_without_the_evaluation_channel_is_admitted(setting: str) -> None:
    values = {"mf-setting": setting, **QUIET, **({"secagg": "protocol"} if setting == "lfl" else {})}
    terms = _terms(**values)
    assert (terms.task, terms.steps, terms.step_key, dict(terms.features), terms.paths, terms.clip_norms) == (
        "mf", 2, "round", {}, (), ())
    sizes = {(cap, what): value for cap, what, value in terms.sizes}
    assert sizes[("rounds", "mf-rounds")] == 2 and sizes[("data-values", "mf-synthetic-users × mf-synthetic-items")] \
        == 30 * 20
    assert sizes[("clients", "mf-synthetic-users" if setting == "lfl" else "mf-parties")] == (30 if setting == "lfl"
                                                                                             else 2)
    NodePolicy.default().admit(terms)


@pytest.mark.parametrize("values, switch, key, value", [
    ({}, "no-noise", "mf-evaluate", "on"),
    ({"mf-private": "off", **QUIET}, "no-noise", "mf-private", "off"),
    ({"mf-algorithm": "fmf", **QUIET}, "no-noise", "mf-algorithm", "fmf"),
    ({"mf-setting": "hfl", "mf-algorithm": "local", **QUIET}, "no-noise", "mf-algorithm", "local"),
    ({"mf-setting": "hfl", "mf-notion": "per-rating-paper", **QUIET}, "no-noise", "mf-notion", "per-rating-paper"),
    ({"mf-setting": "lfl", "mf-algorithm": "stage1-only", "secagg": "protocol", **QUIET}, "no-noise", "mf-algorithm",
     "stage1-only"),
    ({"mf-setting": "lfl", **QUIET}, "secagg-oracle", "secagg", "oracle"),
])
def test_a_run_that_gives_up_privacy_needs_the_simulation_switch(values: dict, switch: str, key: str,
                                                                   value: str) -> None:
    terms = _terms(**values)
    assert terms.features[switch] == (key, value)
    with pytest.raises(PolicyRefusal, match=re.escape(f"refuses {key} = '{value}': it needs the simulation-only "
                                                      f"switch '{switch}'")):
        NodePolicy.default().admit(terms)
    NodePolicy.simulation().admit(terms)


def test_a_ratings_file_is_opened_only_inside_the_data_root(tmp_path: Path) -> None:
    terms = _terms(**{"mf-data": "file", "mf-path": "ratings.csv", **QUIET})
    assert terms.paths == (("mf-path", "ratings.csv"),)
    with pytest.raises(PolicyRefusal, match="refuses mf-path = 'ratings.csv': this node opens no data files"):
        NodePolicy.default().admit(terms)
    NodePolicy(data_root=tmp_path).admit(terms)
    clipped = _terms(**{"mf-clip": "gradient", "mf-clip-threshold": 7.0, **QUIET})
    assert clipped.clip_norms == (("mf-clip-threshold", 7.0),)
    with pytest.raises(PolicyRefusal, match="refuses mf-clip-threshold = 7.0"):
        NodePolicy(max_clip_norm=5.0).admit(clipped)


def _release(setup, node: Node, op: str, kind: str = "train", shared=None, **fields: object):
    return MF.deployment.release_of(setup, Request(client=node.client, kind=kind,
                                                   message=request(op, setup.digest, shared, **fields)), node)


@pytest.mark.parametrize("values", [{"mf-setting": "vfl"}, {"mf-setting": "vfl", "mf-notion": "per-user"},
                                    {"mf-setting": "hfl", "mf-parties": 3}])
def test_a_partys_round_1_is_charged_its_whole_runs_epsilon_and_the_later_rounds_nothing(values: dict) -> None:
    """§3.7.3: a party's ε^(k) for its TT′ (+ κ) steps, what the run reports per party — charged once."""
    from fedpriv.mf.run import mf_config_from_run, run_mf

    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values, **QUIET})
    setup = MF.setup(config)
    cfg, data = mf_config_from_run(config)
    expected = run_mf(cfg, data, config.seed)
    node = _node(setup, 1)
    first = _release(setup, node, "train", round=1)
    assert (first.step, first.part, first.key, first.asked) == (1, "train", "party-epsilon", 5.0)
    assert first.epsilon == pytest.approx(expected.party_epsilons[1], rel=1e-12) and first.epsilon <= 5.0 * (1 + 1e-9)
    assert first.delta == 1e-5
    later = _release(setup, node, "train", round=2)
    assert (later.step, later.epsilon, later.delta) == (2, 0.0, 0.0)
    assert _release(setup, node, "setup") is None and _release(setup, node, "finetune") is None
    with pytest.raises(Refusal, match="expected an int 'round' in 1..2"):
        _release(setup, node, "train", round=3)


def test_fixed_size_sampling_is_charged_without_amplification() -> None:
    poisson = _release(_setup(**QUIET), _party(_setup()), "train", round=1)
    fixed_setup = _setup(**{"mf-sampling": "fixed", **QUIET})
    fixed = _release(fixed_setup, _node(fixed_setup), "train", round=1)
    assert fixed.epsilon > 2 * poisson.epsilon  # the same z at q = 1 instead of q = η = 0.2


def test_a_run_without_a_guarantee_is_charged_as_unbounded_every_round() -> None:
    setup = _setup(**{"mf-private": "off"})
    node = _party(setup)
    for t in (1, 2):
        release = _release(setup, node, "train", round=t)
        assert math.isinf(release.epsilon) and (release.key, release.asked) == ("mf-private", "off")
    evaluations = [_release(setup, node, "evaluate", kind="evaluate", which=w) for w in ("test", "train")]
    assert all(math.isinf(r.epsilon) and r.key == "mf-evaluate" for r in evaluations)


def test_every_evaluation_is_its_own_unbounded_release_at_the_partys_step() -> None:
    setup = _setup()
    handle, node, U = MF.handler(setup), _party(setup), _u0(setup)
    handle(_train(setup, "setup", U), node)
    handle(_train(setup, "train", U, round=1), node)
    parts = []
    for which in ("test", "test", "train"):
        release = _release(setup, node, "evaluate", kind="evaluate", shared=U, which=which)
        assert (release.step, math.isinf(release.epsilon)) == (1, True)
        parts.append(release.part)
        handle(Request(client=0, kind="evaluate", message=request("evaluate", setup.digest, U, which=which)), node)
    assert parts == ["evaluate 1", "evaluate 2", "evaluate 3"]


@pytest.mark.parametrize("mode, secagg, fraction", [
    ("corrected", "protocol", lambda t, n, w: t / n),  # ζ₁ζ₂(n)/(ζ₁+ζ₂(n)) = 1/n, at t devices
    ("paper", "protocol", lambda t, n, w: t / ((2 - w) * n)),  # ζ₂ = 1/n: 1/((1−ω)n + n)
    ("corrected", "oracle", lambda t, n, w: 1 / n),  # one device's two clear reports
])
def test_a_devices_first_report_is_charged_its_whole_runs_worst_case_epsilon(mode: str, secagg: str,
                                                                              fraction) -> None:
    """The server may claim any n1 in [t, n] and sum as few as t devices: σ_eff² ≥ fraction·σ_v² (§6.4)."""
    from fedpriv.accounting.distributed import rdp_accountant_epsilon
    from fedpriv.mf.lfl import lfl_plan

    setup, V = _devices(**{"secagg-noise": mode, "secagg": secagg, **QUIET})
    n, omega = int(setup.roster.size), setup.cfg.omega
    t = math.ceil((1 - omega) * n - 1e-9)
    plan = lfl_plan(setup.cfg, num_devices=n, n_items=setup.split.train.n_items, R=float(setup.split.train.r_max))
    z = plan.sigma * math.sqrt(fraction(t, n, omega)) / plan.sensitivity
    node = _node(setup)
    report = {"iteration": 0, "round": 1, "num-devices": n}
    first = _release(setup, node, "report", shared=V, **report)
    assert (first.step, first.part, first.delta) == (1, "round1", 1e-5)
    assert first.epsilon == pytest.approx(rdp_accountant_epsilon([z] * 2, 1e-5), rel=1e-9)
    assert first.key == ("secagg" if secagg == "oracle" else "party-epsilon")
    if secagg == "protocol" and mode == "corrected":  # an honest server's σ_eff ≥ σ_v: at most the target
        assert 5.0 * (1 - 1e-9) <= first.epsilon
    node.state["round1"] = 0  # what the handler keeps once it answered
    assert _release(setup, node, "report", shared=V, **{**report, "iteration": 1}).epsilon == 0.0
    second = _release(setup, node, "report", iteration=0, round=2, n1=n)
    assert (second.step, second.part, second.epsilon) == (1, "round2", 0.0)
    assert _release(setup, node, "pretrain", shared=V) is None and _release(setup, node, "finetune", shared=V) is None
    with pytest.raises(Refusal, match="expected an int 'iteration' in 0..1"):
        _release(setup, node, "report", shared=V, **{**report, "iteration": 2})


def test_an_ldp_noise_device_is_charged_its_own_reports_epsilon() -> None:
    from fedpriv.mf.run import mf_config_from_run, run_mf

    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, "mf-setting": "lfl", "mf-algorithm": "ldp-noise",
                                                         **QUIET})
    setup = MF.setup(config)
    first = _release(setup, _node(setup), "report", shared=np.zeros((setup.split.train.n_items, setup.cfg.rank)),
                     iteration=0, round=1, **{"num-devices": int(setup.roster.size)})
    expected = run_mf(*mf_config_from_run(config), config.seed)
    assert first.epsilon == pytest.approx(expected.info["local_epsilon"], rel=1e-12)
    assert first.epsilon <= 5.0 * (1 + 1e-9)


def _deployed(k: int, run: int, parties: int) -> Context:
    return Context(run_id=run, node_id=k + 1, node_config={"partition-id": k, "num-partitions": parties},
                   state=RecordDict(), run_config={})


def _flower(app, message, ctx: Context, kind=MessageType.TRAIN):
    set_task_identity()
    return app(FlowerMessage(to_recorddict(message), 1, kind), ctx)


def test_a_deployed_party_charges_its_ledger_once_for_the_run(tmp_path: Path) -> None:
    """The ClientApp under the default policy: setup releases nothing, round 1 the party's whole-run ε, round 2
    nothing new; an evaluate request is refused (no noise); a replayed run is refused by the ledger."""
    from clients.app import make_client_app

    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **QUIET})
    setup = MF.setup(config)
    app, U, ledger = make_client_app(config), _u0(setup), NodeLedger(default_ledger_path(1))
    ctx = _deployed(1, 9, 2)
    replies = [_flower(app, request("setup", setup.digest, U), ctx)]
    assert ledger.spent().releases == 0
    replies += [_flower(app, request("train", setup.digest, U, round=t), ctx) for t in (1, 2)]
    assert not any(r.has_error() for r in replies), [r.error.reason for r in replies if r.has_error()]
    expected = _release(setup, _node(setup, 1), "train", round=1)
    spent = ledger.spent()
    assert spent.releases == 2 and spent.epsilon == pytest.approx(expected.epsilon, rel=1e-12)
    assert spent.delta == pytest.approx(1e-5) and [r["step"] for r in ledger.releases()] == [1, 2]
    evaluate = _flower(app, request("evaluate", setup.digest, U, which="test"), ctx, MessageType.EVALUATE)
    assert evaluate.has_error() and "ε = inf" in evaluate.error.reason and ledger.spent().releases == 2
    # the same party's keyed (simulation) copy differs: the deployed node drew its own noise
    keyed = MF.handler(setup)
    node = _node(setup, 1)
    keyed(Request(client=1, kind="train", message=request("setup", setup.digest, U)), node)
    copy = keyed(Request(client=1, kind="train", message=request("train", setup.digest, U, round=1)), node)
    assert not np.array_equal(replies[1].content.array_records[ARRAYS][SHARED].numpy(), copy[ARRAYS][SHARED])
    again = _deployed(1, 9, 2)  # a fresh state of the same run: setup again, then round 1 is refused
    assert not _flower(app, request("setup", setup.digest, U), again).has_error()
    replay = _flower(app, request("train", setup.digest, U, round=1), again)
    assert replay.has_error() and "released step 2 of run 9 already" in replay.error.reason
    assert ledger.spent().releases == 2


def test_a_deployed_device_charges_its_first_report_and_nothing_after(tmp_path: Path) -> None:
    """A device's gate (check, handler, charge — what the ClientApp does) under the default policy."""
    from fedpriv.node.ledger import NodeLedger as Ledger
    from fedpriv.workloads.gate import NodeGate
    from fedpriv.workloads.messages import Config, Message

    config = RunConfig.from_toml(SYNTHETIC).with_values({**TINY, "mf-setting": "lfl", "secagg": "protocol", **QUIET})
    setup, V = _devices(secagg="protocol", **QUIET)
    gate, n = NodeGate(NodePolicy.default(), Ledger(tmp_path / "ledger.json")), int(setup.roster.size)
    handle, state = MF.handler(setup), {}

    def ask(message: Message) -> Message:
        nonlocal state
        node = _node(setup, 0, SecretRandomness(), state)
        req = Request(client=0, kind="train", message=message)
        release = gate.check(MF, setup, config, req, node, run=4)
        reply = handle(req, node)
        gate.charge(release, MF, config, run=4)
        state = node.state
        return reply

    def upload(message: Message) -> Message:  # the masked-upload stage's request, as SecAggMod passes it on
        return Message({**message.records, "secagg": Config({"stage": "upload", "instance": 0})})

    ask(request("pretrain", setup.digest, V))
    assert gate.ledger.spent().releases == 0
    for t in (0, 1):
        ask(upload(request("report", setup.digest, V, iteration=t, round=1, **{"num-devices": n})))
        ask(upload(request("report", setup.digest, iteration=t, round=2, n1=n)))
    spent = gate.ledger.spent()
    assert spent.releases == 4 and spent.epsilon == pytest.approx(gate.ledger.releases()[0]["epsilon"])
    assert spent.epsilon > 0 and [r["epsilon"] for r in gate.ledger.releases()[1:]] == [0.0, 0.0, 0.0]
    with pytest.raises(PolicyRefusal, match="released step 2 \\(round2\\) of run 4 already"):
        ask(upload(request("report", setup.digest, iteration=1, round=2, n1=n)))
