"""The generic ServerApp running federated LDP-SGD on an in-process Grid: rounds, reports, failures, evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Context, RecordDict

from clients.app import make_client_app
from clients.contract import CONFIG, PARAMS, SERVER_ROUND
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.data import load_dataset
from fedpriv.federated.aggregate import aggregate
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import (
    build_perturbation,
    effective_batch_size,
    finish_update,
    local_update,
)
from fedpriv.federated.sampling import sample_clients
from fedpriv.models import accuracy, build_model, forward_flat, get_flat
from fedpriv.node.policy import NodePolicy
from fedpriv.rng import CounterRows
from fedpriv.workloads import ProtocolError
from fedpriv.workloads.ldp_sgd.workload import _own_partition
from strategies import make_evaluate_fn
from strategies.server_app import ServerResult, make_server_app
from tests.strategies._flower import InProcessGrid

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

N = 4
CFG = RunConfig().replace(
    num_clients=N, rounds=2, partition="iid", local_steps=2, batch_size=16, seed=5,
    perturbation="coordinatewise", mechanism="laplace", epsilon=5.0, noise_schedule="last_step",
)


def _server_context(run_config=None) -> Context:
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config or {}))


def _run(cfg, client_mods=None, **server_kwargs):
    rounds, result = [], ServerResult()
    server = make_server_app(cfg, on_progress=rounds.append, result=result, **server_kwargs)
    mods = [LdpMod(cfg, policy=SIMULATION)] if client_mods is None else client_mods
    grid = InProcessGrid(make_client_app(cfg, mods=mods, policy=SIMULATION), N)
    return server, grid, rounds, result


def _params(result: ServerResult) -> np.ndarray:
    """The final (or, after a failed round, the last committed) global model."""
    outcome = result.output.outcome
    return outcome.arrays.get("params", outcome.committed_arrays.get("params"))


def _by_hand(cfg: RunConfig, rounds: int) -> np.ndarray:
    """The same federation without Flower: local_update + finish_update + aggregate, client by client."""
    train, _ = load_dataset(cfg)
    model = build_model(cfg.model, train.input_shape, train.num_classes, seed=cfg.seed)
    w = get_flat(model).numpy()
    for r in range(1, rounds + 1):
        uploads, ns = [], []
        for cid in sample_clients(cfg.seed, r, cfg.num_clients, cfg.fraction_train, cfg.min_clients):
            cid = int(cid)
            data = _own_partition(LdpSgdConfig.of(cfg), cid)
            res = local_update(model, torch.from_numpy(w), data.x, data.y, cfg, server_round=r, client_id=cid,
                               num_classes=data.num_classes)
            pert = build_perturbation(cfg, batch_size=effective_batch_size(cfg, res.num_examples))
            flat, _ = finish_update(res, pert, CounterRows.keyed(cfg.seed, r, [cid], "noise"))
            uploads.append(flat.numpy())
            ns.append(res.num_examples)
        w = aggregate(np.stack(uploads), np.array(ns, float), cfg.strategy).astype(np.float32)
    return w


def test_server_main_runs_rounds_reports_them_and_matches_the_hand_computation():
    server, grid, rounds, result = _run(CFG)
    server(grid, _server_context())
    assert [r["round"] for r in rounds] == [1, 2]
    for m in rounds:
        assert {"test-accuracy", "test-loss", "train-loss", "rejected", "failed", "clients", "client-ids",
                "rejected-reasons", "failed-reasons", "privacy-claim", "epsilon-total"} <= set(m)
        assert m["clients"] == N and m["rejected"] == 0 and m["failed"] == 0 and m["client-ids"] == [0, 1, 2, 3]
        assert 0.0 <= m["test-accuracy"] <= 1.0 and np.isfinite(m["test-loss"])
    assert result.error is None and result.output.summary["status"] == "finished"
    assert "coordinatewise" in result.output.summary["privacy_scope"]
    # whoami to every node, then every node got a train message each round, nothing else
    assert [sorted(sent) for sent in grid.sent] == [sorted(grid.node_ids)] * 3
    np.testing.assert_array_equal(_params(result), _by_hand(CFG, 2))


def test_partial_participation_samples_the_same_clients_as_the_hand_computation():
    cfg = CFG.replace(fraction_train=0.5, rounds=3, seed=8)
    server, grid, rounds, result = _run(cfg)
    server(grid, _server_context())
    for m in rounds:
        assert m["client-ids"] == sorted(int(c) for c in sample_clients(8, m["round"], N, 0.5, cfg.min_clients))
    assert len(grid.sent[0]) == N and all(len(sent) == 2 for sent in grid.sent[1:])  # whoami, then 2 per round
    np.testing.assert_array_equal(_params(result), _by_hand(cfg, 3))


def test_a_failing_client_is_counted_and_the_round_goes_on():
    def flaky(msg, ctxt, call_next):
        if ctxt.node_config["partition-id"] == 2 and msg.content[CONFIG].get(SERVER_ROUND) == 2:
            raise RuntimeError("simulated crash")
        return call_next(msg, ctxt)

    server, grid, rounds, _result = _run(CFG, client_mods=[flaky, LdpMod(CFG, policy=SIMULATION)])
    server(grid, _server_context())
    assert rounds[0]["failed"] == 0 and rounds[1]["failed"] == 1
    assert rounds[1]["client-ids"] == [0, 1, 3]
    assert "simulated crash" in rounds[1]["failed-reasons"][0]


def test_a_failed_round_stops_the_run_and_keeps_the_finished_rounds():
    cfg = CFG.replace(rounds=3, min_clients=N)

    def flaky(msg, ctxt, call_next):
        if ctxt.node_config["partition-id"] == 1 and msg.content[CONFIG].get(SERVER_ROUND) == 2:
            raise RuntimeError("simulated crash")
        return call_next(msg, ctxt)

    server, grid, rounds, result = _run(cfg, client_mods=[flaky, LdpMod(cfg, policy=SIMULATION)])
    with pytest.raises(ProtocolError, match="round 2"):  # after the summary: `flwr run` fails too
        server(grid, _server_context())
    summary = result.output.summary
    assert summary["status"] == "failed"
    assert "round 2: 3 valid client update(s), fewer than min-clients=4 (1 failed, 0 rejected" in summary["error"]
    assert "simulated crash" in summary["error"]
    assert [r["round"] for r in rounds] == [1] and summary["rounds_finished"] == 1
    np.testing.assert_array_equal(_params(result), _by_hand(cfg, 1))  # the last good model


def test_clients_without_the_mod_are_rejected_and_the_round_fails():
    server, grid, rounds, result = _run(CFG, client_mods=[])
    with pytest.raises(ProtocolError, match="is the ldp_mod installed"):
        server(grid, _server_context())
    summary = result.output.summary
    assert rounds == [] and summary["status"] == "failed" and "is the ldp_mod installed?" in summary["error"]
    assert "0 valid client update(s)" in summary["error"] and f"{N} rejected" in summary["error"]


def test_module_level_apps_read_the_run_config():
    from clients.app import app as client_app
    from strategies.server_app import app as server_app

    # the module-level ClientApp is a deployed node's: its default policy wants every local step noised
    run_config = CFG.replace(rounds=1, noise_schedule="every_step").to_dict()
    grid = InProcessGrid(client_app, N, run_config=run_config)
    threads = torch.get_num_threads()
    try:
        server_app(grid, _server_context(run_config))
    finally:
        torch.set_num_threads(threads)
    assert len(grid.sent) == 2 and len(grid.sent[1]) == N  # whoami, then one round


def test_evaluate_fn_matches_the_model_helpers():
    _, test = load_dataset(CFG)
    train, _ = load_dataset(CFG)
    model = build_model("lr", train.input_shape, train.num_classes, seed=1)
    flat = get_flat(model).numpy() * 0.5
    fn = make_evaluate_fn(model, test, batch_size=100)  # several chunks
    out = fn(0, ArrayRecord({PARAMS: Array(flat)}))
    x, y = torch.from_numpy(test.x.copy()), torch.from_numpy(test.y.copy())
    assert out["test-accuracy"] == pytest.approx(accuracy(model, x, y, params=torch.from_numpy(flat)), abs=1e-12)
    logits = forward_flat(model, torch.from_numpy(flat), x)
    assert out["test-loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-5)
    with pytest.raises(ValueError, match="global parameters must have shape"):
        fn(1, ArrayRecord({PARAMS: Array(flat[:-1])}))


def test_min_clients_above_num_clients_is_refused_before_any_round():
    server, grid, rounds, _ = _run(CFG.replace(min_clients=N + 1))
    with pytest.raises(ValueError, match="min-clients=5 exceeds num-clients=4"):
        server(grid, _server_context())
    assert grid.sent == [] and rounds == []
