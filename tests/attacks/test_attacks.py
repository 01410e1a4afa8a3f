"""Attacks on federated LDP-SGD (docs/attacks.md): who attacks, what changes, and what is refused.

The uploads are compared with those of the same run without the attack: an attack must change the
attackers' uploads and leave every honest client's upload bit for bit as it was, in the per-client
path (the fast and Flower engines, a deployment) and in the batched engine.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpriv.attacks.report import attack_summary
from fedpriv.attacks.selection import attacker_count, attacker_rows, attackers, attackers_of
from fedpriv.config import RunConfig
from fedpriv.models import num_params
from fedpriv.node.randomness import KeyedRandomness
from fedpriv.workloads.base import Node
from fedpriv.workloads.ldp_sgd.contract import ARRAYS, PARAMS, train_request
from fedpriv.workloads.messages import Request
from fedpriv.workloads.protocol import Broadcast
from fedpriv.workloads.registry import get_workload

BASE = {"num-clients": 10, "rounds": 1, "local-steps": 2, "batch-size": 8, "perturbation": "coordinatewise",
        "mechanism": "piecewise", "epsilon": 5.0, "noise-schedule": "last_step", "seed": 3}


def test_attackers_are_a_fixed_keyed_set() -> None:
    """⌊f·N⌋ distinct sorted ids, the same on every call, another set under another seed."""
    a = attackers(3, 100, 0.29)  # 0.29 · 100 = 28.999999999999996 in binary: still 29 attackers
    assert a.size == 29 == np.unique(a).size and np.all(np.diff(a) > 0) and a.min() >= 0 and a.max() < 100
    np.testing.assert_array_equal(a, attackers(3, 100, 0.29))
    assert not np.array_equal(a, attackers(4, 100, 0.29))
    assert attacker_count(10, 0.2) == 2 and attacker_count(10, 0.19) == 1 and attacker_count(7, 0.0) == 0
    assert set(attackers(3, 100, 0.1)) <= set(a)  # a prefix of the same permutation: more attackers add to the set
    assert attackers_of(RunConfig.from_mapping({**BASE, "attack-fraction": 0.5})).size == 0  # attack = "none"


def test_attack_none_takes_the_grids_parameters_and_attacks_nothing() -> None:
    """A grid attack=none,sign-flip with attack-fraction and attack-scale set: the baseline cell runs, nobody attacks."""
    w, honest = _uploads({}, "fast")
    _, baseline = _uploads({"attack-fraction": 0.3, "attack-scale": 4.0}, "fast")
    np.testing.assert_array_equal(baseline, honest)


def test_the_attackers_cover_clients_uniformly() -> None:
    """Over many seeds each client attacks with probability m/N (binomial count, 5 standard errors)."""
    n, m, seeds = 20, 5, 2000
    counts = np.zeros(n)
    for s in range(seeds):
        counts[attackers(s, n, m / n)] += 1
    p = m / n
    assert np.all(np.abs(counts - seeds * p) <= 5 * np.sqrt(seeds * p * (1 - p)))


@pytest.mark.parametrize("overrides, match", [
    ({"attack": "trojan"}, "attack must be one of"),
    ({"attack": "ldp-manipulation", "attack-fraction": 0.2, "perturbation": "ldpvec", "mechanism": "gaussian"},
     "'ldp-manipulation' of task 'ldp-sgd' needs perturbation = 'coordinatewise'"),
    ({"attack": "sign-flip", "attack-fraction": 1.0}, r"attack-fraction must be in \[0, 1\)"),
    ({"attack": "sign-flip", "attack-fraction": -0.1}, r"attack-fraction must be in \[0, 1\)"),
    ({"attack": "sign-flip", "attack-fraction": 0.05}, "chooses no attacker"),
    ({"attack": "sign-flip", "attack-fraction": 0.2, "attack-scale": -1.0}, "attack-scale must be >= 0"),
    ({"attack": "scaling", "attack-fraction": 0.2, "attack-scale": 1.0}, "must be > 1 for attack 'scaling'"),
    ({"attack": "gaussian", "attack-fraction": 0.2, "attack-scale": 2.0}, "attack-scale applies to"),
    ({"attack": "gaussian", "attack-fraction": 0.2, "attack-std": 0.0}, "attack-std must be > 0"),
])
def test_bad_attack_values_are_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        workload = get_workload("ldp-sgd")
        workload.setup(RunConfig.from_mapping({**BASE, **overrides}))


def _uploads(overrides: dict, engine: str) -> tuple[np.ndarray, np.ndarray]:
    """Every client's round-2 upload from a fixed global model (per client, or as the batched engine's block)."""
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({**BASE, **overrides}))
    data = workload.load_clients(setup)
    params = np.linspace(-0.05, 0.05, num_params(data.model), dtype=np.float32)
    ids = np.arange(setup.config["num-clients"])
    if engine == "batched":
        batch = workload.batch_handler(setup, "batched", data, {"threads": 1})(
            Broadcast(clients=ids, kind="train", message=train_request(params, 2)))
        assert not batch.errors
        return params, batch.records[ARRAYS][PARAMS]
    handler, (middleware,) = workload.handler(setup), workload.middleware(setup)
    rows = [middleware(Request(client=int(c), kind="train", message=train_request(params, 2)),
                       Node(client=int(c), data=data[int(c)], state={}, randomness=KeyedRandomness(setup.config["seed"])),
                       handler)[ARRAYS][PARAMS] for c in ids]
    return params, np.stack(rows)


ATTACKS = ["sign-flip", "scaling", "gaussian", "label-flip", "backdoor", "ldp-manipulation"]


@pytest.mark.parametrize("engine", ["fast", "batched"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_changes_exactly_the_attackers_uploads(attack: str, engine: str) -> None:
    w, honest = _uploads({}, engine)
    _, attacked = _uploads({"attack": attack, "attack-fraction": 0.3}, engine)
    bad = np.isin(np.arange(10), attackers(3, 10, 0.3))
    assert bad.sum() == 3
    np.testing.assert_array_equal(attacked[~bad], honest[~bad])  # honest clients: bit for bit
    assert np.all(np.any(attacked[bad] != honest[bad], axis=1))  # every attacker: another upload
    delta, delta_honest = attacked[bad].astype(np.float64) - w, honest[bad].astype(np.float64) - w
    # float32 rounding of w + a·(u − w): |error| <= (|w| + |a|·|u − w| + |a|·|u|)·2⁻²³ per coordinate (a few ulps)
    ulp = 2.0 ** -23 * (np.abs(w) + 10 * np.abs(honest[bad]) + 10 * np.abs(delta_honest)) * 4
    if attack == "sign-flip":
        assert np.all(np.abs(delta + delta_honest) <= ulp)
    elif attack == "scaling":  # γ defaults to the clients per round: 10
        assert np.all(np.abs(delta - 10 * delta_honest) <= ulp)
    elif attack == "gaussian":  # N(0, 1) per coordinate: mean 0 and variance 1 within 5 standard errors
        n = delta.size
        assert abs(delta.mean()) <= 5 / np.sqrt(n) and abs(delta.var() - 1.0) <= 5 * np.sqrt(2 / n)


def test_scaling_and_sign_flip_take_their_scale() -> None:
    w, honest = _uploads({}, "fast")
    _, flipped = _uploads({"attack": "sign-flip", "attack-fraction": 0.3, "attack-scale": 3.0}, "fast")
    bad = np.isin(np.arange(10), attackers(3, 10, 0.3))
    ratio = (flipped[bad].astype(np.float64) - w) / (honest[bad].astype(np.float64) - w)
    big = np.abs(honest[bad].astype(np.float64) - w) > 1e-3  # away from float32 cancellation
    np.testing.assert_allclose(ratio[big], -3.0, rtol=1e-4)


def test_label_flip_trains_on_flipped_labels() -> None:
    """With 2 local steps and no noise, a label-flip attacker's upload is an honest client's on labels 9 − y."""
    from fedpriv.federated.config import LdpSgdConfig
    from fedpriv.federated.local import local_update

    cfg = {"perturbation": "none", "attack": "label-flip", "attack-fraction": 0.3}
    w, attacked = _uploads(cfg, "fast")
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({**BASE, **cfg}))
    c = int(attackers(3, 10, 0.3)[0])
    data = workload.load_clients(setup)[c]
    res = local_update(data.model, torch.from_numpy(w), data.x, 9 - data.y, LdpSgdConfig.of(setup.config),
                       server_round=2, client_id=c, num_classes=10)
    expected = (res.release.base + res.release.scale * res.release.vector).numpy()
    np.testing.assert_array_equal(attacked[c], expected)


def test_the_run_records_who_attacked(tmp_path) -> None:
    from simulations.runner import run

    cfg = RunConfig.from_mapping({**BASE, "rounds": 2, "attack": "sign-flip", "attack-fraction": 0.2,
                                  "fraction-train": 0.5})
    result = run(cfg, engine="fast", root=tmp_path)
    attack = result.summary["attack"]
    assert attack["attack"] == "sign-flip" and attack["attackers"] == attackers(3, 10, 0.2).tolist()
    assert attack["attacker-count"] == 2 and attack["attacker-share"] == 0.2
    for record in result.rounds:
        assert record["attackers"] == int(np.isin(record["client-ids"], attack["attackers"]).sum())
    assert attack_summary(cfg)["attackers"] == attack["attackers"]


def test_attacker_rows_are_the_attackers_positions_and_a_block_without_one_row_per_id_is_refused() -> None:
    cfg = RunConfig.from_mapping({"num-clients": 10, "attack": "sign-flip", "attack-fraction": 0.3})
    who = attackers_of(cfg)
    ids = np.array([9, 0, *who.tolist(), 5])
    flat, rows = attacker_rows(cfg, torch.zeros((ids.size, 4)), ids.reshape(1, -1))
    assert flat.tolist() == ids.tolist() and set(flat[rows].tolist()) == set(who.tolist())
    assert all(flat[i] not in who for i in set(range(ids.size)) - set(rows.tolist()))
    for block in (torch.zeros((ids.size - 1, 4)), torch.zeros(ids.size)):
        with pytest.raises(ValueError, match=rf"uploads must have shape \(N, d\) with one row per client id \({ids.size}\)"):
            attacker_rows(cfg, block, ids)
