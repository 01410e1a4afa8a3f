"""The SA_ω interface (docs/federated_mf.md §6.2, §6.5, §9 A20): survivor threshold and the keyed drop-out model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedpriv.secagg.base import STAGES, DropoutModel, check_roster, survivor_threshold


@pytest.mark.parametrize(
    "n, omega, expected",
    [
        (10, 0.3, 7),  # (1−ω)n = 7.000000000000001 in floating point: must not round up to 8
        (10, 0.0, 10),
        (1, 0.0, 1),
        (7, 0.5, 4),  # ⌈3.5⌉
        (100, 0.25, 75),
        (10, 0.999, 1),  # ω close to 1: at least one client
        (10_000, 1 - 1e-9, 1),
    ],
)
def test_survivor_threshold_table(n: int, omega: float, expected: int) -> None:
    assert survivor_threshold(n, omega) == expected


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_clients": 0, "omega": 0.3}, ValueError, "num_clients must be >= 1, got 0"),
        ({"num_clients": 2.5, "omega": 0.3}, TypeError, "num_clients must be an integer"),
        ({"num_clients": 10, "omega": 1.0}, ValueError, r"omega must be in \[0, 1\), got 1.0"),
        ({"num_clients": 10, "omega": -0.1}, ValueError, r"omega must be in \[0, 1\), got -0.1"),
        ({"num_clients": 10, "omega": float("nan")}, ValueError, "omega must be in"),
        ({"num_clients": 10, "omega": "0.3"}, TypeError, "omega must be a real number"),
    ],
)
def test_survivor_threshold_rejects_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        survivor_threshold(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"rates": {"upload": 1.0}}, ValueError, r"rates\['upload'\] must be in \[0, 1\), got 1.0"),
        ({"rates": {"share": -0.2}}, ValueError, r"rates\['share'\] must be in \[0, 1\), got -0.2"),
        ({"rates": {"fit": 0.1}}, ValueError, r"rates keys must be steps in .*got \['fit'\]"),
        ({"forced": {"train": [1]}}, ValueError, r"forced keys must be steps in .*got \['train'\]"),
        ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ],
)
def test_dropout_model_validation_table(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DropoutModel(**kwargs)


@pytest.mark.parametrize(
    "client_ids, instance, error, match",
    [
        ([1, 2, 2], 0, ValueError, "client_ids must be unique, got 1 duplicate"),
        ([], 0, ValueError, "client_ids must be a non-empty 1-D sequence"),
        ([[1, 2]], 0, ValueError, "client_ids must be a non-empty 1-D sequence"),
        ([-1, 2], 0, ValueError, "client_ids must be >= 0, got -1"),
        ([0.5, 1.0], 0, TypeError, "client_ids must hold integers"),
        ([1, 2], -1, ValueError, "instance must be >= 0, got -1"),
    ],
)
def test_presence_rejects_bad_roster(client_ids: list, instance: int, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DropoutModel.uniform(0.1).presence(client_ids, instance)


def test_check_roster_keeps_the_given_order() -> None:
    ids = check_roster([5, 1, 3])
    assert ids.dtype == np.int64 and ids.tolist() == [5, 1, 3]


def test_presence_without_dropouts_keeps_everyone() -> None:
    masks = DropoutModel().presence(np.arange(20), 3)
    assert list(masks) == list(STAGES)
    assert all(m.all() for m in masks.values())


def test_presence_is_cumulative() -> None:
    model = DropoutModel(rates={s: 0.3 for s in STAGES}, seed=4)
    masks = model.presence(np.arange(2_000), 0)
    for before, after in itertools.pairwise(STAGES):
        assert not (masks[after] & ~masks[before]).any(), f"a client absent at {before} is back at {after}"
        assert masks[after].sum() < masks[before].sum()  # rate 0.3 over 2000 clients: someone drops


def test_presence_is_keyed_by_seed_and_instance() -> None:
    ids = np.arange(500)
    model = DropoutModel.uniform(0.3, seed=11)
    a, b = model.presence(ids, 5), model.presence(ids, 5)
    assert all(np.array_equal(a[s], b[s]) for s in STAGES)
    other_instance = model.presence(ids, 6)
    other_seed = DropoutModel.uniform(0.3, seed=12).presence(ids, 5)
    assert not np.array_equal(a["upload"], other_instance["upload"])
    assert not np.array_equal(a["upload"], other_seed["upload"])


def test_presence_does_not_depend_on_roster_order() -> None:
    ids = np.array([901, 4, 77, 12, 3_000, 55, 8, 640, 31, 2])
    model = DropoutModel(rates={s: 0.35 for s in STAGES}, seed=7)
    base = model.presence(ids, 2)
    perm = np.random.default_rng(0).permutation(ids.size)
    shuffled = model.presence(ids[perm], 2)
    for step in STAGES:
        assert np.array_equal(shuffled[step], base[step][perm])


@pytest.mark.parametrize("rate", [0.05, 0.2, 0.5])
def test_drop_rate_matches_the_model(rate: float) -> None:
    n = 40_000
    masks = DropoutModel(rates={"share": rate, "upload": rate}, seed=3).presence(np.arange(n), 1)
    for step, keep in (("advertise", 1.0), ("share", 1 - rate), ("upload", (1 - rate) ** 2), ("unmask", (1 - rate) ** 2)):
        frac = masks[step].mean()
        se = math.sqrt(keep * (1 - keep) / n)  # binomial proportion (CLT)
        assert abs(frac - keep) <= 5 * se + 1e-12, f"{step}: kept {frac:.4f}, expected {keep:.4f} ± {5 * se:.4f}"


def test_forced_drops_apply_at_their_step_and_after() -> None:
    ids = np.array([10, 11, 12, 13, 14])
    masks = DropoutModel(forced={"share": [12], "unmask": (10, 14)}).presence(ids, 0)
    assert masks["advertise"].all()
    assert ids[~masks["share"]].tolist() == [12]
    assert ids[~masks["upload"]].tolist() == [12]
    assert ids[~masks["unmask"]].tolist() == [10, 12, 14]


def test_forced_ids_outside_the_roster_are_ignored() -> None:
    masks = DropoutModel(forced={"upload": [99]}).presence([1, 2, 3], 0)
    assert all(m.all() for m in masks.values())


def test_uniform_sets_the_rate_on_share_and_upload_by_default() -> None:
    model = DropoutModel.uniform(0.25, seed=2)
    assert dict(model.rates) == {"share": 0.25, "upload": 0.25}
    assert model.seed == 2
