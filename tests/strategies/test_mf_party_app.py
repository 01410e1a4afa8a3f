"""The MF party ServerApp: equal to run_vfl / run_hfl (in-process Grid and run_simulation), fatal party failures."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, MessageType, RecordDict

from clients.contract import ARRAYS
from clients.mf_party_app import (
    SHARED,
    make_mf_party_client_app,
    make_party,
    shared_rows,
)
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.data_spec import party_groups
from fedpriv.mf.fmf import composition_rule, init_shared, run_fmf
from fedpriv.mf.hfl import run_hfl
from fedpriv.mf.vfl import run_vfl
from strategies.mf_party_app import (
    MfPartyError,
    MfPartyHolder,
    make_mf_party_server_app,
)
from tests.strategies._flower import InProcessGrid, error_reply

SEED = 5
SPLIT = train_test_split(synthetic_ratings(n_users=40, n_items=30, rank=3, density=0.3, seed=2), seed=SEED)
R = float(SPLIT.train.r_max)
BASE = dict(epsilon=2.0, rank=3, rounds=3, local_steps=2, sampling_rate=0.3)
VFL_RATING = MfConfig(setting="vfl", notion="per-rating", parties=2, **BASE)
VFL_USER = MfConfig(setting="vfl", notion="per-user", parties=3, finetune_steps=2, **BASE)
HFL_USER = MfConfig(setting="hfl", notion="per-user", parties=2, pretrain_steps=20, local_finetune_steps=10, **BASE)
CONFIGS = {"vfl-per-rating": VFL_RATING, "vfl-per-user": VFL_USER, "hfl-per-user": HFL_USER}


def _server_context() -> Context:
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})


def in_process(config: MfConfig):
    """run_vfl / run_hfl, plus the final shared embedding of the same loop (run_fmf over the same parties)."""
    groups = party_groups(SPLIT, config, SEED)
    expected = (run_vfl if config.setting == "vfl" else run_hfl)(SPLIT, groups, config, SEED)
    parties = [make_party(SPLIT, groups, k, config, SEED) for k in range(len(groups))]
    finals = []
    for party in parties:
        original = party.finetune
        party.finetune = lambda shared, original=original: (finals.append(shared.copy()), original(shared))[1]
    loop = run_fmf(parties, init_shared(config, shared_rows(SPLIT, config), R, SEED), config,
                   rule=composition_rule(config), delta=config.delta)
    return expected, loop, finals[0], groups


def server_app(config: MfConfig, holder: MfPartyHolder, parties: int, **kwargs):
    return make_mf_party_server_app(config, parties, shared_rows(SPLIT, config), R, seed=SEED, result=holder,
                                    **kwargs)


def assert_same_result(got, expected) -> None:
    """Every number the runs compute from the same bits (timings aside)."""
    for name in ("setting", "algorithm", "notion", "test_mse", "test_mse_before_finetune", "train_mse", "epsilon",
                 "delta", "party_epsilons", "noise_multiplier", "source_epsilon"):
        assert getattr(got, name) == getattr(expected, name), name
    assert [(r.round, r.test_mse, r.epsilon) for r in got.rounds] == \
        [(r.round, r.test_mse, r.epsilon) for r in expected.rounds]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_server_app_over_an_in_process_grid_equals_the_in_process_run(name):
    config = CONFIGS[name]
    expected, loop, final_shared, groups = in_process(config)
    holder, seen = MfPartyHolder(), []
    grid = InProcessGrid(make_mf_party_client_app(SPLIT, groups, config, seed=SEED), len(groups))
    server_app(config, holder, len(groups), progress=seen.append)(grid, _server_context())
    assert holder.error is None
    assert_same_result(holder.result, expected)
    assert_same_result(holder.result, loop)
    np.testing.assert_array_equal(holder.shared, final_shared)
    assert holder.result.info["parties"] == loop.info["parties"]
    assert [r.round for r in holder.rounds] == list(range(1, config.total_rounds + 1))
    assert seen == [{"round": r.round, "test_mse": r.test_mse, "epsilon": r.epsilon} for r in expected.rounds]
    # the target ε is each party's (§3.7.3); the global one composes them
    assert holder.result.epsilon is not None and max(holder.result.party_epsilons) <= config.epsilon * (1 + 1e-9)
    # client ids, setup, T × (train, evaluate), evaluate before, finetune, evaluate after, evaluate train
    assert len(grid.sent) == 2 + 2 * config.total_rounds + 4


def test_a_non_private_run_reports_no_epsilon():
    config = VFL_RATING.replace(algorithm="fmf", epsilon=None)
    expected, _, final_shared, groups = in_process(config)
    holder = MfPartyHolder()
    grid = InProcessGrid(make_mf_party_client_app(SPLIT, groups, config, seed=SEED), len(groups))
    server_app(config, holder, len(groups))(grid, _server_context())
    assert_same_result(holder.result, expected)
    assert holder.result.epsilon is None and all(r.epsilon is None for r in holder.rounds)
    np.testing.assert_array_equal(holder.shared, final_shared)


class FaultyGrid(InProcessGrid):
    """Breaks party ``party``'s reply to the ``nth`` train message (1-based) in the way ``fault`` says."""

    def __init__(self, *args, party: int, nth: int, fault: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.party, self.nth, self.fault, self.trains = party, nth, fault, 0

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            self.trains += 1
            if self.trains == self.nth:
                node = self.node_ids[self.party]
                index = next(i for i, r in enumerate(replies) if r.metadata.src_node_id == node)
                request = next(m for m in messages if m.metadata.dst_node_id == node)
                if self.fault == "error":
                    replies[index] = error_reply(request, "disk full")
                elif self.fault == "missing":
                    del replies[index]
                else:
                    copy = replies[index].content.array_records[ARRAYS][SHARED].numpy().copy()
                    if self.fault == "nan":
                        copy[0, 0] = np.nan
                    else:
                        copy = copy[:-1]
                    content = RecordDict({ARRAYS: ArrayRecord({SHARED: Array(copy)}),
                                          "metrics": replies[index].content.metric_records["metrics"]})
                    replies[index] = Message(content, reply_to=request)
        return replies


@pytest.mark.parametrize("fault, match", [
    ("error", "party 1 failed the round 2 (Stage 2): disk full"),
    ("missing", "party 1 did not reply to the round 2 (Stage 2)"),
    ("nan", "party 1's round-2 copy is rejected (never averaged): expected finite values in 'shared', got 1 NaN/inf"),
    ("shape", "party 1's round-2 copy is rejected (never averaged): expected a float array 'shared' of shape (40, 3)"),
])
def test_a_failing_party_stops_the_run_and_keeps_the_finished_rounds(fault, match):
    config = VFL_RATING
    groups = party_groups(SPLIT, config, SEED)
    holder, seen = MfPartyHolder(), []
    # train message 1 is setup, 2 is round 1, 3 is round 2
    grid = FaultyGrid(make_mf_party_client_app(SPLIT, groups, config, seed=SEED), len(groups), party=1, nth=3,
                      fault=fault)
    with pytest.raises(MfPartyError, match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        server_app(config, holder, len(groups), progress=seen.append)(grid, _server_context())
    assert holder.error is not None and "party 1" in holder.error and holder.result is None
    assert [r.round for r in holder.rounds] == [1] and [s["round"] for s in seen] == [1]
    expected, *_ = in_process(config)
    assert holder.rounds[0].test_mse == expected.rounds[0].test_mse


def test_parties_of_another_configuration_refuse_the_setup():
    groups = party_groups(SPLIT, VFL_RATING, SEED)
    holder = MfPartyHolder()
    grid = InProcessGrid(make_mf_party_client_app(SPLIT, groups, VFL_RATING.replace(epsilon=8.0), seed=SEED),
                         len(groups))
    with pytest.raises(MfPartyError, match=r"party 0 failed the setup \(Stage 1\).*expected config-digest"):
        server_app(VFL_RATING, holder, len(groups))(grid, _server_context())
    assert holder.rounds == [] and holder.result is None


def test_too_few_nodes_time_out():
    groups = party_groups(SPLIT, VFL_RATING, SEED)
    holder = MfPartyHolder()
    grid = InProcessGrid(make_mf_party_client_app(SPLIT, groups, VFL_RATING, seed=SEED), 1)
    with pytest.raises(TimeoutError, match="only 1 of 2 nodes connected"):
        server_app(VFL_RATING, holder, 2, timeout=0.5)(grid, _server_context())
    assert "only 1 of 2" in holder.error


@pytest.mark.parametrize("kwargs, error, match", [
    ({"config": MfConfig(setting="lfl", notion="per-user")}, ValueError, "config must be a VFL algorithm"),
    ({"config": VFL_RATING.replace(algorithm="central-dp")}, ValueError, "config must be a VFL algorithm"),
    ({"config": {}}, TypeError, "config must be an MfConfig"),
    ({"parties": 0}, ValueError, "parties"),
    ({"rows": 0}, ValueError, "rows"),
    ({"R": -1.0}, ValueError, "R"),
    ({"seed": -2}, ValueError, "seed"),
    ({"timeout": 0.0}, ValueError, "timeout"),
    ({"result": object()}, TypeError, "result must be an MfPartyHolder"),
])
def test_factory_rejects_bad_arguments(kwargs, error, match):
    args = {"config": VFL_RATING, "parties": 2, "rows": 40, "R": R, "seed": SEED, "result": MfPartyHolder(),
            "timeout": None, **kwargs}
    with pytest.raises(error, match=match):
        make_mf_party_server_app(args["config"], args["parties"], args["rows"], args["R"], seed=args["seed"],
                                 result=args["result"], timeout=args["timeout"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_flower_simulation_equals_the_in_process_run(name):
    """run_simulation with one SuperNode per party: bit-identical shared embedding, same MSEs and ε."""
    from flwr.simulation import run_simulation

    from simulations.flower_engine import ray_backend_config

    config = CONFIGS[name]
    expected, loop, final_shared, groups = in_process(config)
    holder = MfPartyHolder()
    run_simulation(server_app=server_app(config, holder, len(groups), timeout=120.0),
                   client_app=make_mf_party_client_app(SPLIT, groups, config, seed=SEED),
                   num_supernodes=len(groups), backend_config=ray_backend_config())
    assert holder.error is None and holder.result is not None
    assert_same_result(holder.result, expected)
    np.testing.assert_array_equal(holder.shared, final_shared)
    assert holder.result.info["parties"] == loop.info["parties"]
