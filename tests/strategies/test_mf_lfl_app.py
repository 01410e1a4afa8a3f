"""The LFL ServerApp + device ClientApps over an in-process Grid (and Ray, slow): the in-process run's numbers, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, MessageType, RecordDict
from flwr.clientapp import ClientApp

from clients.mf_lfl_app import make_mf_lfl_client_app
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.lfl import lfl_roster, run_lfl
from fedpriv.mf.result import MfResult
from strategies.mf_lfl_app import MfLflError, MfLflHolder, make_mf_lfl_server_app
from tests.strategies._flower import InProcessGrid, error_reply

N_USERS, N_ITEMS, SEED = 10, 15, 3
SPLIT = train_test_split(synthetic_ratings(n_users=N_USERS, n_items=N_ITEMS, rank=3, density=0.4, seed=1), seed=0)


def lfl(**kw) -> MfConfig:
    base = {"setting": "lfl", "notion": "per-user", "epsilon": 1.0, "rank": 3, "rounds": 2, "pretrain_steps": 20,
            "local_finetune_steps": 5, "lfl_step_size": 3.0}
    return MfConfig(**{**base, **kw})


def server_app(cfg: MfConfig, holder: MfLflHolder, **kw):
    return make_mf_lfl_server_app(cfg, lfl_roster(SPLIT.train), N_ITEMS, SPLIT.train.r_max, seed=SEED, result=holder,
                                  **kw)


def run_grid(cfg: MfConfig, client_app: ClientApp | None = None, **kw) -> MfLflHolder:
    holder = MfLflHolder()
    grid = InProcessGrid(client_app or make_mf_lfl_client_app(SPLIT, cfg, seed=SEED), N_USERS)
    server_app(cfg, holder, **kw)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                run_config={}))
    return holder


def assert_same_result(got: MfResult, want: MfResult) -> None:
    """Every number of the two results equal (wall times aside)."""
    for name in ("test_mse", "test_mse_before_finetune", "train_mse", "epsilon", "party_epsilons",
                 "noise_multiplier", "source_epsilon"):
        assert getattr(got, name) == getattr(want, name), name
    assert len(got.rounds) == len(want.rounds)
    for a, b in zip(got.rounds, want.rounds, strict=True):
        assert (a.round, a.test_mse, a.epsilon, a.extra) == (b.round, b.test_mse, b.epsilon, b.extra)
    assert {k: v for k, v in got.info.items()} == {k: v for k, v in want.info.items()}


@pytest.mark.parametrize("kw", [
    {},
    {"dropout_rate": 0.15},
    {"lfl_mode": "paper"},
    {"algorithm": "ldp-noise"},
    {"epsilon": None},
    {"algorithm": "stage1-only", "epsilon": None},
    pytest.param({"aggregator": "protocol", "dropout_rate": 0.15}, id="protocol"),
])
def test_the_grid_run_equals_the_in_process_run(kw):
    cfg = lfl(**kw)
    want = run_lfl(SPLIT, cfg, SEED)
    holder = run_grid(cfg)
    assert holder.error is None
    assert_same_result(holder.result, want)
    assert holder.rounds == holder.result.rounds


def test_the_dropout_case_exercises_a_skipped_round_two():
    """Seed 3 at r = 0.15: iteration 0 keeps exactly ⌈(1−ω)n⌉ = 7 (round 2 skipped), iteration 1 runs both rounds."""
    res = run_lfl(SPLIT, lfl(dropout_rate=0.15), SEED)
    assert (res.rounds[0].extra["n1"], res.rounds[0].extra["n2"]) == (7, 0)
    assert res.rounds[1].extra["n2"] > 0


def test_progress_gets_each_iteration():
    seen: list[dict] = []
    run_grid(lfl(), progress=seen.append)
    assert [s["round"] for s in seen] == [1, 2] and all(s["epsilon"] > 0 for s in seen)


def test_a_missing_roster_device_stops_the_run_before_anything_is_sent():
    holder = MfLflHolder()
    grid = InProcessGrid(make_mf_lfl_client_app(SPLIT, lfl(), seed=SEED), N_USERS)
    node9 = next(n for n, c in grid.contexts.items() if c.node_config["partition-id"] == 9)
    grid.contexts[node9].node_config["partition-id"] = N_USERS  # no such user: its query is refused
    with pytest.raises(MfLflError, match=r"devices \[9\] of the roster are not connected"):
        server_app(lfl(), holder)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                run_config={}))
    assert "not connected" in holder.error and holder.result is None
    assert len(grid.sent) == 1  # only the client-id query went out


class FailingGrid(InProcessGrid):
    """Device 4 answers every evaluate message with an error (a crash outside secure aggregation)."""

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        return [error_reply(m, "device 4 crashed")
                if m.metadata.message_type == MessageType.EVALUATE
                and self.contexts[m.metadata.dst_node_id].node_config["partition-id"] == 4 else r
                for m, r in zip(messages, replies, strict=True)]


def test_a_device_failing_outside_secure_aggregation_stops_the_run():
    holder = MfLflHolder()
    grid = FailingGrid(make_mf_lfl_client_app(SPLIT, lfl(), seed=SEED), N_USERS)
    with pytest.raises(MfLflError, match="device 4 failed the 'evaluate-test' stage: device 4 crashed"):
        server_app(lfl(), holder)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                run_config={}))
    assert holder.rounds == [] and "device 4 crashed" in holder.error


def test_a_device_with_another_configuration_is_refused_at_pretraining():
    holder = MfLflHolder()
    grid = InProcessGrid(make_mf_lfl_client_app(SPLIT, lfl(epsilon=2.0), seed=SEED), N_USERS)
    with pytest.raises(MfLflError, match="failed the 'pretrain' stage: .*expected config-digest"):
        server_app(lfl(), holder)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                run_config={}))


@pytest.mark.parametrize("kwargs, match", [
    ({"config": lfl(algorithm="central-sgd", epsilon=None)}, "config must be an LFL device algorithm"),
    ({"roster": np.array([0, 0, 1])}, "roster must be unique"),
])
def test_factory_errors(kwargs, match):
    args = {"config": lfl(), "roster": lfl_roster(SPLIT.train)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        make_mf_lfl_server_app(args["config"], args["roster"], N_ITEMS, 5.0, seed=0, result=MfLflHolder())


# --------------------------------------------------------------------------- Ray (slow)


@pytest.mark.slow
def test_flower_simulation_equals_the_in_process_run():
    from flwr.simulation import run_simulation

    from simulations.flower_engine import ray_backend_config

    cfg = lfl(aggregator="protocol", dropout_rate=0.15)
    want = run_lfl(SPLIT, cfg, SEED)
    holder = MfLflHolder()
    run_simulation(server_app=server_app(cfg, holder, timeout=120.0),
                   client_app=make_mf_lfl_client_app(SPLIT, cfg, seed=SEED),
                   num_supernodes=N_USERS, backend_config=ray_backend_config())
    assert holder.error is None and holder.result is not None
    assert_same_result(holder.result, want)
