"""fedpriv's deployed ClientApp (``clients.app:app`` with ``ldp_mod``) under a node's own policy, in process.

What a SuperNode does with each message, without the daemons: the run config is a request the node's
policy checks, each release is charged to the node's ledger before it leaves, the noise is the node's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import make_client_app, whoami_request
from clients.contract import ARRAYS, PARAMS
from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.models import get_flat
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import POLICY_KEY, NodePolicy
from fedpriv.workloads.ldp_sgd.workload import _own_partition
from tests.strategies._flower import train_message

N = 3
HONEST = RunConfig.from_mapping({"num-clients": N, "rounds": 3, "local-steps": 2, "batch-size": 8, "epsilon": 1.0,
                                 "partition": "iid", "seed": 5})


def _params(cfg: RunConfig = HONEST) -> np.ndarray:
    return get_flat(_own_partition(LdpSgdConfig.of(cfg), 0).model).numpy()


def _context(cfg: RunConfig, *, run: int = 1, pid: int = 0, policy: Path | None = None) -> Context:
    node_config: dict = {"partition-id": pid, "num-partitions": N}
    if policy is not None:
        node_config[POLICY_KEY] = str(policy)
    return Context(run_id=run, node_id=pid + 1, node_config=node_config, state=RecordDict(),
                   run_config=cfg.to_dict())


def _policy_file(tmp_path: Path, policy: NodePolicy, name: str = "node.toml") -> Path:
    path = tmp_path / name
    path.write_text(policy.to_toml())
    return path


@pytest.fixture(scope="module")
def app():
    """The deployed ClientApp: configuration from the run config, the node's own policy (import once per module)."""
    import torch

    from clients.app import app as module_app

    threads = torch.get_num_threads()
    yield module_app
    torch.set_num_threads(threads)


@pytest.mark.parametrize("overrides, names", [
    ({"perturbation": "none"}, "perturbation = 'none'"),
    ({"analyzer-oracle": "on"}, "analyzer-oracle = 'on'"),
    ({"attack": "ldp-manipulation"}, "attack = 'ldp-manipulation'"),
    ({"noise-schedule": "last_step"}, "noise-schedule = 'last_step'"),
    ({"epsilon": 50.0}, "epsilon = 50.0"),
    ({"model": "evil_model:factory"}, "model = 'evil_model:factory'"),
    ({"dataset": "csv:/etc/hostname", "label-column": "x"}, "dataset = '/etc/hostname'"),
    ({"num-clients": 10**10}, "num-clients = 10000000000"),
])
def test_a_request_beyond_the_default_policy_is_refused_and_nothing_is_charged(app, overrides, names) -> None:
    cfg = HONEST.with_values(overrides)
    for msg in (train_message(_params(), 1), Message(whoami_request(), 1, MessageType.QUERY)):
        reply = app(msg, _context(cfg))
        assert reply.has_error() and names in reply.error.reason and "node policy refuses" in reply.error.reason
    assert not default_ledger_path(0).exists()


def test_each_release_is_charged_and_questions_are_not(app) -> None:
    whoami = app(Message(whoami_request(), 1, MessageType.QUERY), _context(HONEST))
    assert not whoami.has_error()
    assert not default_ledger_path(0).exists()
    for server_round in (1, 2):
        reply = app(train_message(_params(), server_round), _context(HONEST))
        assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    ledger = NodeLedger(default_ledger_path(0))
    assert [(r["run"], r["step"], r["task"]) for r in ledger.releases()] == [("1", 1, "ldp-sgd"), ("1", 2, "ldp-sgd")]
    assert ledger.spent().epsilon == pytest.approx(2.0)  # ε = 1 per round: E = 2 steps at ε/2 each


def test_the_ledger_keeps_the_spend_across_runs_and_refuses_beyond_the_budget(app, tmp_path: Path) -> None:
    policy = _policy_file(tmp_path, replace(NodePolicy.default(), budget_epsilon=2.5, ledger=tmp_path / "l.json"))
    for run in (1, 2):
        assert not app(train_message(_params(), 1), _context(HONEST, run=run, policy=policy)).has_error()
    refused = app(train_message(_params(), 1), _context(HONEST, run=3, policy=policy))
    assert refused.has_error() and "lifetime budget ε = 2.5 has 0.5 left" in refused.error.reason
    assert NodeLedger(tmp_path / "l.json").spent().releases == 2


def test_two_nodes_with_identical_run_configs_draw_independent_noise(app, tmp_path: Path) -> None:
    uploads = []
    for i in range(2):  # two nodes of client 0: the same data, run config and round
        policy = _policy_file(tmp_path, replace(NodePolicy.default(), ledger=tmp_path / f"l{i}.json"), f"n{i}.toml")
        reply = app(train_message(_params(), 1), _context(HONEST, policy=policy))
        uploads.append(reply.content[ARRAYS][PARAMS].numpy())
    assert not np.array_equal(*uploads)
    keyed = []
    for i in range(2):  # the same two nodes allowed keyed-noise: the run seed's bits, equal
        policy = _policy_file(tmp_path, replace(NodePolicy.default(), ledger=tmp_path / f"k{i}.json",
                                                switches=frozenset({"keyed-noise"})), f"k{i}.toml")
        keyed.append(app(train_message(_params(), 1), _context(HONEST, policy=policy)).content[ARRAYS][PARAMS].numpy())
    np.testing.assert_array_equal(*keyed)
    simulated = make_client_app(HONEST, policy=NodePolicy.simulation())(train_message(_params(), 1),
                                                                        _context(HONEST))
    np.testing.assert_array_equal(keyed[0], simulated.content[ARRAYS][PARAMS].numpy())


def test_an_error_reply_never_carries_what_a_data_file_holds(app, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "users.csv").write_text("TOKEN-7f3a,b\n1,2\n")
    cfg = HONEST.with_values({"dataset": "csv:users.csv", "label-column": "nope"})
    base = replace(NodePolicy.default(), data_root=tmp_path / "data", ledger=tmp_path / "l.json")
    quiet = app(train_message(_params(), 1), _context(cfg, policy=_policy_file(tmp_path, base)))
    assert quiet.has_error() and "cannot load its data" in quiet.error.reason
    assert "TOKEN-7f3a" not in quiet.error.reason and "node's log" in quiet.error.reason
    told = replace(base, switches=frozenset({"error-details"}))
    loud = app(train_message(_params(), 1), _context(cfg, policy=_policy_file(tmp_path, told, "loud.toml")))
    assert loud.has_error() and "label-column" in loud.error.reason  # allowed: the detail goes to the server


def test_a_node_whose_policy_file_is_bad_answers_nothing(app, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[release]\nmax-epsilon = -1\n")
    reply = app(train_message(_params(), 1), _context(HONEST, policy=bad))
    assert reply.has_error() and "policy cannot be used" in reply.error.reason
    assert "max-epsilon" not in reply.error.reason  # the node's file is the node's business: its log has it
